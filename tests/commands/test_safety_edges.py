"""Issue 30, item 11: the edges. Paths past the OS's limits, a read-only folder, a non-UTF-8
argument, a spec of 1,000 envs under `ulimit -n 1024`, and a lock another process holds: a
clear message (no traceback), nothing written, no hang.

Every case runs the real command line in a child process (`python -m envbuilder`), with real
folders, an immutable folder (chattr +i, as root) and a real process holding the lock.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import as_process

from envbuilder.core.nofollow import _MAX_OPEN, LinkInTheWay, Tree

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux limits and flock")

LONG_NAME = "n" * 300  # over NAME_MAX (255)
LONG_PATH = "/".join(["d" * 200] * 25)  # 5,000 bytes: over PATH_MAX (4096)


def _assert_usage_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


LONG_CASES = {
    "init-spec": ("init", "--gpu", "cpu", "--os", "linux", "--spec", "{}/environments.toml"),
    "compare-markdown": ("compare", "a.json", "b.json", "--markdown", "{}.md"),
    "probe-json": ("probe", "--expect", "cpu", "--only", "conformance", "--json", "{}.json"),
}


@pytest.mark.parametrize("long", [LONG_NAME, LONG_PATH], ids=["name", "path"])
@pytest.mark.parametrize("case", sorted(LONG_CASES))
def test_a_path_past_the_systems_limits_is_a_usage_error(
    tmp_path: Path, case: str, long: str
) -> None:
    argv = [word.format(long) for word in LONG_CASES[case]]
    proc = as_process(*argv, cwd=tmp_path, timeout=60)
    limit = "255" if long == LONG_NAME else "4095"
    _assert_usage_error(proc, "bytes", limit, "choose a shorter")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write into, root included (chattr +i on ext4/xfs/btrfs)."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    chattr = shutil.which("chattr")
    done = chattr and subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode
    if not chattr or done != 0:
        pytest.skip("chattr +i is not available here (file system or privileges)")
    try:
        yield folder
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def test_init_into_a_folder_it_cannot_write_says_so(immutable: Path) -> None:
    proc = as_process(
        "init", "--gpu", "cpu", "--os", "linux", "--spec", "frozen/environments.toml",
        cwd=immutable.parent,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cannot write frozen/environments.toml: operation not permitted" in proc.stderr
    assert list(immutable.iterdir()) == []


def test_init_gpu_with_a_byte_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "init", "--os", "linux", "--gpu", b"RX\xff7900"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        check=False,
    )
    _assert_usage_error(proc, "--gpu", "is not UTF-8 text (byte 0xff at 2)")
    assert list(tmp_path.iterdir()) == []


# --- descriptors ---------------------------------------------------------------------------------


def test_a_tree_keeps_a_bounded_number_of_folders_open(tmp_path: Path) -> None:
    for i in range(3 * _MAX_OPEN):
        (tmp_path / f"f{i}" / "sub").mkdir(parents=True)
    with Tree(tmp_path) as tree:
        for i in range(3 * _MAX_OPEN):
            tree.folder((f"f{i}", "sub"))
            assert tree.open_handles() <= _MAX_OPEN
        (tmp_path / "f0").rename(tmp_path / "moved")
        (tmp_path / "f0").symlink_to(tmp_path / "moved")
        with pytest.raises(LinkInTheWay, match="symbolic link"):  # opened again: no link
            tree.folder(("f0", "sub"))


def _spec_of(envs: int) -> str:
    env = (
        'description = "cpu"\naccelerator = "cpu"\npython = "3.12"\n'
        'packages = ["torch==2.14.1+cpu"]\nindex_pins = {{ torch = "pytorch-cpu" }}\n'
        'targets = ["docker", "native"]\n\n[env.e{i}.docker]\nbase = "ubuntu:24.04"\n\n'
    )
    head = '[indexes.pytorch-cpu]\nurl = "https://download.pytorch.org/whl/cpu"\n\n'
    return head + "".join(f"[env.e{i}]\n" + env.format(i=i) for i in range(envs))


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def _render(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "-q", "render", *extra],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=_limit_descriptors,  # the child only, before it starts
    )


@pytest.mark.slow
def test_a_spec_of_1000_envs_renders_under_ulimit_n_1024(tmp_path: Path) -> None:
    (tmp_path / "environments.toml").write_text(_spec_of(1000))
    proc = _render(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((tmp_path / "dockerfiles").iterdir())) == 1000
    assert len(list((tmp_path / "slurm").iterdir())) == 1000
    assert _render(tmp_path, "--check").returncode == 0
    (tmp_path / "environments.toml").write_text(_spec_of(10))  # 990 envs' files removed
    proc = _render(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "dockerfiles").iterdir()) == [
        f"e{i}" for i in range(10)
    ]


# --- a lock another process holds -----------------------------------------------------------


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)   # a read-only handle is enough for flock
fcntl.flock(fd, fcntl.LOCK_SH)
print("held", flush=True)
if sys.argv[2] == "-":
    sys.stdin.readline()  # held until the test says so
else:
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "environments.toml").write_text(_spec_of(1))
    return root


def _hold(folder: Path, seconds: float | None) -> subprocess.Popen[str]:
    """A process holding the folder's lock for `seconds` (None: until a line on its stdin)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), "-" if seconds is None else str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _render_waiting(root: Path, timeout: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "ENVBUILDER_LOCK_TIMEOUT": timeout}
    start = time.monotonic()
    proc = as_process("render", cwd=root, env=env, timeout=60)
    return proc, time.monotonic() - start


def test_a_lock_held_too_long_is_waited_for_with_a_message_then_given_up(
    small_project: Path,
) -> None:
    holder = _hold(small_project, 30)
    try:
        proc, took = _render_waiting(small_project, "1.5")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert 1.5 <= took < 20
    said = " ".join(proc.stderr.split())
    who = f"pid {holder.pid} ({sys.executable} -c"
    assert said.count(f"warning: waiting for the lock on {small_project}, held by {who}") == 1
    assert f"gave up after 1.5 s waiting for the lock on {small_project}: {who}" in said
    assert "Nothing was written" in said and "ENVBUILDER_LOCK_TIMEOUT" in said
    assert not (small_project / "dockerfiles").exists()


def test_a_lock_released_during_the_wait_lets_the_command_go_on(small_project: Path) -> None:
    """The holder lets go once the render says it waits (not after a fixed time: under load a
    render started later than a 1 s hold lasted, and never waited)."""
    holder = _hold(small_project, None)
    env = {**os.environ, "ENVBUILDER_LOCK_TIMEOUT": "60"}
    render = subprocess.Popen(
        [sys.executable, "-m", "envbuilder", "render"],
        cwd=small_project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert render.stderr is not None and holder.stdin is not None
        first = render.stderr.readline()
        assert "waiting for the lock on" in first, first
        holder.stdin.write("go\n")
        holder.stdin.flush()
        _out, rest = render.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
        render.kill()
        render.wait()
    assert render.returncode == 0, first + rest
    assert (first + rest).count("waiting for the lock on") == 1
    assert (small_project / "dockerfiles" / "e0" / "Dockerfile").is_file()


def test_a_lock_timeout_that_is_not_a_number_is_refused(small_project: Path) -> None:
    holder = _hold(small_project, 30)
    try:
        proc, _took = _render_waiting(small_project, "soon")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "ENVBUILDER_LOCK_TIMEOUT='soon': give the seconds" in proc.stderr

"""Stale work from killed runs is swept, and a venv a live uv holds is never synced (issue 21,
fault 6).

Before: a SIGKILLed `build --target native` left `uv pip sync` running on the venv and its
`venv-wheelhouse-*` (about 190 MB with torch) in the cache, which no later build removed, and
the next build synced the same venv beside that uv; a killed `lock` could leave an
`envbuilder-lock-*` folder in the temp folder. Here with real processes and SIGKILL:

  * a work folder whose owner was killed while a child it started (holding the owner file's
    lock) still runs is kept; once the child is gone the next command removes it; folders of a
    live process, without an owner file, that are links, or of a reused pid are judged right;
  * a real build killed while its uv syncs: the next build refuses the venv while that uv
    runs (nothing changed), and once it ended a build succeeds and the wheelhouse is gone.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from test_interrupts import SMALL_SPEC, survivors
from test_lock_support import FAKE_INDEX_URL, make_wheel

from envbuilder.core import stale

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SIGKILL, flock and /proc start times"
)
ENVBUILDER = Path(sys.executable).with_name("envbuilder")
MARK = "ENVBUILDER_TEST_MARK"

KILLED_OWNER = """
import os, subprocess, sys
from pathlib import Path
from envbuilder.core import stale

with stale.owned_dir(sys.argv[1], Path(sys.argv[2])) as owned:
    (owned.path / "data.bin").write_bytes(b"x" * 4096)
    child = subprocess.Popen(
        ["sleep", sys.argv[3]], pass_fds=(owned.fd,), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print(owned.path, child.pid, flush=True)
    os.kill(os.getpid(), 9)  # SIGKILL: no handler, no cleanup
"""


def killed_owner(parent: Path, prefix: str, child_s: float) -> tuple[Path, int]:
    """A process that makes a work folder, starts a child (a stand-in for uv) that inherits its
    lock, and is SIGKILLed: (the folder, the child's pid)."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_OWNER, prefix, str(parent), str(child_s)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    folder, pid = proc.stdout.split()
    return Path(folder), int(pid)


def wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        stat_text = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}").exists() else ""
        if ") Z" in stat_text:
            return
        time.sleep(0.05)


def test_a_killed_runs_folder_is_kept_while_its_child_runs_then_swept(tmp_path: Path) -> None:
    folder, child = killed_owner(tmp_path, "envbuilder-lock-", 4)
    assert folder.is_dir() and Path(f"/proc/{child}").exists()
    assert stale.sweep(tmp_path, "envbuilder-lock-") == []  # the child holds the lock
    assert folder.is_dir()
    wait_gone(child)
    assert stale.sweep(tmp_path, "envbuilder-lock-") == [folder]
    assert not folder.exists()


def test_the_next_lock_command_sweeps_what_a_killed_lock_left(tmp_path: Path) -> None:
    """The command, not only the function: `envbuilder lock` (here with nothing to resolve)
    removes an `envbuilder-lock-*` a killed lock left in the temp folder."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    folder, child = killed_owner(temp, "envbuilder-lock-", 0.1)
    wait_gone(child)
    spec = tmp_path / "environments.toml"
    spec.write_text("")
    env = {**os.environ, "TMPDIR": str(temp), "ENVBUILDER_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [str(ENVBUILDER), "lock", "--spec", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert not folder.exists(), done.stderr


def test_what_cannot_be_proven_dead_is_left_alone(tmp_path: Path) -> None:
    prefix = "venv-wheelhouse-"
    # a live owner (this process)
    with stale.owned_dir(prefix, tmp_path) as live:
        # no owner file (one being made right now, or someone else's)
        bare = tmp_path / f"{prefix}bare"
        bare.mkdir()
        # a link named like one, to a folder elsewhere with a dead owner's file in it
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / stale.OWNER).write_text(json.dumps({"pid": 2**22 + 7, "start": "1"}))
        (elsewhere / "keep.txt").write_text("keep")
        (tmp_path / f"{prefix}link").symlink_to(elsewhere)
        # an owner file that is a link
        linked = tmp_path / f"{prefix}linked-owner"
        linked.mkdir()
        (linked / stale.OWNER).symlink_to(elsewhere / stale.OWNER)
        # a pid that now names another process (this one), started at another time: dead
        reused = tmp_path / f"{prefix}reused"
        reused.mkdir()
        (reused / stale.OWNER).write_text(json.dumps({"pid": os.getpid(), "start": "0"}))
        removed = stale.sweep(tmp_path, prefix)
        assert removed == [reused]
        assert live.path.is_dir() and bare.is_dir() and linked.is_dir()
        assert (elsewhere / "keep.txt").read_text() == "keep"
    assert not live.path.exists()


# --- the real build ------------------------------------------------------------------------------


def heavy_wheel(folder: Path, files: int) -> Path:
    """A valid wheel of `files` small modules: installing it takes uv a few seconds."""
    name, version = "tinytorch", "1.0+cpu"
    info = f"{name}-{version}.dist-info"
    contents = {f"{name}/m{i}.py": f"X = {i}\n" for i in range(files)}
    contents[f"{name}/__init__.py"] = ""
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Dist: tinydep\n"
    )
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in contents.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), text)
    return out


def _build(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENVBUILDER), "-q", "build", "--target", "native", "--env", "small"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_a_killed_build_leaves_no_wheelhouse_and_its_uv_is_never_joined(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    heavy_wheel(mirror, 20000)
    make_wheel(mirror, "tinydep", "2.0")
    project = tmp_path / "project"
    project.mkdir()
    (project / "environments.toml").write_text(
        SMALL_SPEC.format(url=FAKE_INDEX_URL, mirror=mirror), encoding="utf-8"
    )
    cache = tmp_path / "cache"
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILDER_MIRROR_")}
    env.update(ENVBUILDER_CACHE=str(cache), TMPDIR=tempfile.mkdtemp(dir=tmp_path), **{MARK: marker})
    subprocess.run([str(ENVBUILDER), "-q", "lock"], cwd=project, env=env, check=True)

    proc = subprocess.Popen(
        [str(ENVBUILDER), "-q", "build", "--target", "native", "--env", "small"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if any(" pip sync " in s for s in survivors(marker)):
            break
        time.sleep(0.005)
    assert proc.poll() is None, f"the build ended before uv synced: {proc.communicate()[1]}"
    uv = [s for s in survivors(marker) if " pip sync " in s]
    uv_pid = int(uv[0].split(":")[0])
    # uv is held still (SIGSTOP) while the second build looks: a stopped process keeps what it
    # holds, so the window does not depend on how fast uv unpacks on this machine.
    os.kill(uv_pid, signal.SIGSTOP)
    try:
        proc.kill()  # SIGKILL envbuilder alone: its uv lives on in its own session
        proc.wait()
        second = _build(project, env)
        still_running = Path(f"/proc/{uv_pid}").exists()
    finally:
        os.kill(uv_pid, signal.SIGCONT)
    assert still_running, "uv ended with envbuilder: no window to test"
    assert second.returncode == 1, (second.stdout, second.stderr)
    assert "is being changed by another `envbuilder build`" in second.stderr, second.stderr
    assert list(cache.glob("venv-wheelhouse-*")), "the uv's wheelhouse must stay while it runs"

    wait_gone(uv_pid, timeout=300)
    third = _build(project, env)
    assert third.returncode == 0, third.stderr
    assert list(cache.glob("venv-wheelhouse-*")) == []
    venv = project / ".envbuilder" / "venvs" / "small-native"
    assert json.loads((venv / "envbuilder-venv.json").read_text()).get("state") != "incomplete"
    assert survivors(marker) == []

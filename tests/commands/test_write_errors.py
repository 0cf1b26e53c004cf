"""Write errors are one clear message, never a traceback or a half-written file (issue 13,
fault 6).

A property test per command (`render`, `lock`, `compare --json/--markdown/--html`): hypothesis
picks a real fault and where it strikes, the command runs (envbuilder.commands._cli.main,
in-process), and then:
  * the exit code is 1;
  * stderr holds exactly one `error:` line, naming the path (the obstacle, or the file that
    could not be written) and the cause, and no traceback;
  * nothing changed: the project (or the output folder) is byte for byte what it was, no temp
    file or folder in it or in $TMPDIR.

The faults are real (tests run as root, so permissions would not stop anything):
  file-for-folder   a file where the command needs a folder (lockfiles, dockerfiles/cpu, ...)
  folder-for-file   a folder where the command writes a file (a pylock, a Dockerfile, ...)
  read-only         the folder bind-mounted read-only onto itself
  full-disk         the folder on a tmpfs shrunk to exactly what it holds (ENOSPC)
Mounts are undone in `finally` blocks, and the module's teardown unmounts anything left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shipped import rendered_folders
from test_lock_support import FAKE_INDEX_URL, make_wheel

from envbuilder.commands._cli import main

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "tests" / "data" / "compare"
FAULTS = ("file-for-folder", "folder-for-file", "read-only", "full-disk")
#: What each fault's message must say.
CAUSES = {
    "file-for-folder": "is a file, not a folder",
    "folder-for-file": "is a folder, not a file",
    "read-only": "read-only file system",
    "full-disk": "no space left on device",
}
# capsys is read (and so emptied) before every example's run: sharing it across examples is safe.
EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- real faults --------------------------------------------------------------------------------


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` bind-mounted read-only onto itself while the block runs."""
    _sh("mount", "--bind", str(folder), str(folder))
    try:
        _sh("mount", "-o", "remount,bind,ro", str(folder))
        yield
    finally:
        _unmount(folder)


@contextlib.contextmanager
def full_disk(folder: Path, staging: Path) -> Iterator[None]:
    """`folder`'s content on a tmpfs exactly as large as that content: every write of data
    fails with ENOSPC. The original folder is back afterwards (under the mount, untouched);
    `staging` (a new path outside what is compared) holds a copy meanwhile."""
    shutil.copytree(folder, staging, symlinks=True)
    _sh("mount", "-t", "tmpfs", "-o", "size=64m,mode=755", "tmpfs", str(folder))
    try:
        shutil.copytree(staging, folder, symlinks=True, dirs_exist_ok=True)
        stat = os.statvfs(folder)
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        _sh("mount", "-o", f"remount,size={max(used, stat.f_frsize)}", str(folder))
        yield
    finally:
        _unmount(folder)
        shutil.rmtree(staging)


def file_for_folder(path: Path) -> None:
    """A plain file where the folder `path` is (or would be)."""
    if path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a file in the way\n")


def folder_for_file(path: Path) -> None:
    """A folder (not empty) where the file `path` is (or would be)."""
    path.unlink(missing_ok=True)
    (path / "inside").mkdir(parents=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounts a read-only bind and a tiny tmpfs: needs root on Linux")
    root = tmp_path_factory.mktemp("write-errors")
    probe = root / "mount-probe"
    probe.mkdir()
    try:
        _sh("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(probe))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc.stderr.strip()}): needs CAP_SYS_ADMIN")
    _unmount(probe)
    yield root
    # Whatever a failed example left mounted below `root`, deepest first.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(str(root))), reverse=True):
        _unmount(Path(point))


# --- running and checking -----------------------------------------------------------------------

Tree = dict[str, bytes | None]


def tree(root: Path) -> Tree:
    """Every file (its bytes) and folder (None) below `root`."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@dataclass
class Example:
    """One command in a fresh copy, with its own $TMPDIR."""

    root: Path  # what must stay unchanged
    tmp: Path

    @classmethod
    def fresh(cls, workdir: Path, template: Path) -> Example:
        base = Path(tempfile.mkdtemp(dir=workdir))
        root = base / "proj"
        shutil.copytree(template, root)
        (base / "tmp").mkdir()
        return cls(root, base / "tmp")


def run_failing(
    example: Example,
    argv: Sequence[str],
    fault: str,
    fault_at: Path,
    outputs: Sequence[Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Apply `fault` at `fault_at`, run the command, and check the outcome."""
    if fault == "file-for-folder":
        file_for_folder(fault_at)
    elif fault == "folder-for-file":
        folder_for_file(fault_at)
    before = tree(example.root)
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(example.tmp)
    capsys.readouterr()
    try:
        with contextlib.ExitStack() as stack:
            if fault == "read-only":
                stack.enter_context(read_only(fault_at))
            elif fault == "full-disk":
                stack.enter_context(full_disk(fault_at, example.root.parent / "staging"))
            code = main(["-q", *argv])
            err = capsys.readouterr().err
            assert tree(example.root) == before, "something was written or removed"
    finally:
        tempfile.tempdir = saved_tempdir
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1, err
    assert "Traceback" not in err
    assert len(errors) == 1, err
    assert CAUSES[fault] in errors[0], errors[0]
    named = [fault_at] if fault in ("file-for-folder", "folder-for-file") else outputs
    assert any(str(path) in errors[0] for path in named), (errors[0], named)
    assert tree(example.root) == before
    assert list(example.tmp.iterdir()) == []


# --- render -------------------------------------------------------------------------------------

RENDERED = rendered_folders()


@pytest.fixture(scope="module")
def render_template(workdir: Path) -> tuple[Path, list[Path]]:
    """The shipped project with every rendered file out of date (a line added): render rewrites
    every file. (A changed spec would make the cpu lock older than the spec: render refuses.)"""
    template = workdir / "render-template"
    template.mkdir()
    for name in ("environments.toml", "lockfiles", *RENDERED):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, template / name)
    for name in RENDERED:
        for f in (template / name).rglob("*"):
            if f.is_file():
                f.write_bytes(f.read_bytes() + b"stale\n")
    outputs = sorted(
        p.relative_to(template)
        for name in RENDERED
        for p in (template / name).rglob("*")
        if p.is_file()
    )
    return template, outputs


@given(fault=st.sampled_from(FAULTS), pick=st.integers(0, 10_000))
@EXAMPLES
def test_render_write_errors(
    fault: str,
    pick: int,
    workdir: Path,
    render_template: tuple[Path, list[Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    template, outputs = render_template
    example = Example.fresh(workdir, template)
    files = [example.root / p for p in outputs]
    folders = sorted(
        {example.root / p.parent for p in outputs} | {example.root / name for name in RENDERED}
    )
    fault_at = {
        "file-for-folder": folders[pick % len(folders)],
        "folder-for-file": files[pick % len(files)],
    }.get(fault, example.root)
    run_failing(
        example,
        ["render", "--spec", str(example.root / "environments.toml")],
        fault,
        fault_at,
        files,
        capsys,
    )


# --- lock ---------------------------------------------------------------------------------------

SMALL_SPEC = """
[indexes.fake]
url = "{url}"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu", "tinydep=={dep}"]
index_pins = {{ tinytorch = "fake", tinydep = "fake" }}
targets = ["native"]
"""


@pytest.fixture(scope="module")
def lock_template(workdir: Path) -> Path:
    """A small env locked with tinydep 2.0 whose spec now asks for 2.1: `lock` rewrites both
    lock files. Offline: every package comes from a mirror folder."""
    mirror = workdir / "mirror"
    make_wheel(mirror, "tinytorch", "1.0+cpu", requires=("tinydep",))
    make_wheel(mirror, "tinydep", "2.0")
    make_wheel(mirror, "tinydep", "2.1")
    template = workdir / "lock-template"
    template.mkdir()
    spec = template / "environments.toml"
    spec.write_text(SMALL_SPEC.format(url=FAKE_INDEX_URL, mirror=mirror, dep="2.0"))
    assert main(["-q", "lock", "--spec", str(spec)]) == 0
    spec.write_text(SMALL_SPEC.format(url=FAKE_INDEX_URL, mirror=mirror, dep="2.1"))
    return template


@pytest.fixture(autouse=True)
def _no_machine_mirrors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ENVBUILDER_MIRROR_"):
            monkeypatch.delenv(name)


@given(fault=st.sampled_from(FAULTS), pick=st.integers(0, 10_000))
@EXAMPLES
def test_lock_write_errors(
    fault: str, pick: int, workdir: Path, lock_template: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = Example.fresh(workdir, lock_template)
    lockfiles = example.root / "lockfiles"
    files = sorted(lockfiles.iterdir())
    fault_at = {"file-for-folder": lockfiles, "folder-for-file": files[pick % len(files)]}.get(
        fault, example.root
    )
    run_failing(
        example,
        ["lock", "--spec", str(example.root / "environments.toml")],
        fault,
        fault_at,
        files,
        capsys,
    )


# --- compare ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compare_template(workdir: Path) -> Path:
    """An output folder `out` with an earlier comparison's files in it."""
    template = workdir / "compare-template"
    (template / "out").mkdir(parents=True)
    (template / "out" / "old.md").write_text("an earlier comparison\n")
    return template


@given(
    fault=st.sampled_from(FAULTS),
    pick=st.integers(0, 10_000),
    wanted=st.sets(st.sampled_from(("json", "markdown", "html")), min_size=1),
)
@EXAMPLES
def test_compare_write_errors(
    fault: str,
    pick: int,
    wanted: set[str],
    workdir: Path,
    compare_template: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = Example.fresh(workdir, compare_template)
    out = example.root / "out"
    paths = {"json": out / "c.json", "markdown": out / "c.md", "html": out / "html"}
    argv = ["compare", str(REPORTS / "cpu.docker.json"), str(REPORTS / "cpu.native.json")]
    for kind in sorted(wanted):
        argv += [f"--{kind}", str(paths[kind])]
    files = [paths[k] for k in sorted(wanted) if k != "html"]
    folders = [out] + ([paths["html"]] if "html" in wanted else [])
    targets = files + ([paths["html"] / "index.html"] if "html" in wanted else [])
    fault_at = {
        "file-for-folder": folders[pick % len(folders)],
        "folder-for-file": targets[pick % len(targets)],
    }.get(fault, out)
    named = files + ([paths["html"]] if "html" in wanted else [])
    run_failing(example, argv, fault, fault_at, named, capsys)


def test_an_os_error_no_step_turned_into_a_message_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The edge's backstop (issue 30's loop, run 8: a full disk gave `render` a traceback): an
    OSError that reaches the CLI is one `error:` line naming the file and the cause, exit 1."""
    import errno

    from envbuilder.commands import check as check_command

    spec = tmp_path / "environments.toml"
    shutil.copy(Path(__file__).resolve().parents[2] / "environments.toml", spec)
    full = tmp_path / "state" / "receipt"

    def disk_full(*_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(full))

    monkeypatch.setattr(check_command, "run", disk_full)
    assert main(["check", "--spec", str(spec)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: cannot write or read {full}: no space left on device "
        "(free some space and run it again)"
    ]

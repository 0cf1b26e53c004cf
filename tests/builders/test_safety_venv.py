"""Issue 13, fault 1: `build --target native --path DIR` changes only a venv envbuilder made.

Every test runs the real command line (`python -m envbuilder`) on real folders. The refusals use
the shipped `cpu` spec and locks (refused before the lock is read, so no wheel is fetched); the
builds use a one-package project made here, whose only wheel comes from a mirror folder, so
they run offline in about a second. "Unchanged" means a recursive listing of every entry's type,
mode, size, mtime, link target and content sha256 is equal before and after.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from clirun import as_process

from envbuilder.builders.venvcommands import uv_venv_command, uv_venv_environment
from envbuilder.builders.venvfolder import (
    MARKER,
    incomplete_marker_bytes,
    inspect_folder,
    marker_bytes,
    marker_state,
    read_marker,
)
from envbuilder.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
Tree = dict[str, tuple[object, ...]]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the native target is Linux-only")


# --- helpers -----------------------------------------------------------------------------------


def tree(root: Path) -> Tree:
    """Every entry under `root` (root included, links not followed) with what identifies it."""
    out: Tree = {}
    paths = [root, *root.rglob("*")] if root.is_dir() and not root.is_symlink() else [root]
    for path in paths:
        st = path.lstat()
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = ("link", str(path.readlink()), st.st_mtime_ns)
        elif path.is_dir():
            out[key] = ("dir", st.st_mode, st.st_mtime_ns)
        else:
            out[key] = (
                "file",
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out


def envbuilder(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process; ENVBUILDER_CACHE comes from the caller."""
    return as_process(*args, cwd=cwd, timeout=300, quiet=True)


def make_wheel(folder: Path, name: str, version: str, valid: bool = True) -> Path:
    """A pure-Python wheel made here. `valid=False`: no .dist-info, so installers refuse it."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode()}
    if valid:
        files[f"{dist}/METADATA"] = (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode()
        files[f"{dist}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        record = [f"{p},sha256={_b64sha(d)},{len(d)}" for p, d in files.items()]
        files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def _b64sha(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def marker(venv: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((venv / MARKER).read_text())
    return data


def runs(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)


# --- the shipped cpu spec (refusals) -----------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cpu-project")
    shutil.copy2(REPO / "environments.toml", root / "environments.toml")
    shutil.copytree(REPO / "lockfiles", root / "lockfiles")
    return root


@pytest.fixture(scope="module")
def user_venv_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's own venv of this Python (`python -m venv`, with pip) with a package installed."""
    base = tmp_path_factory.mktemp("user-venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    wheel = make_wheel(base / "wheels", "userpkg", "1.0")
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv


def _project_with_foreign_pyvenv(path: Path) -> str:
    (path / "src").mkdir(parents=True)
    (path / "src" / "model.py").write_text("print('months of work')\n")
    (path / ".git" / "objects").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "pyvenv.cfg").write_text(
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.9.18\n"
    )
    return "a venv of Python 3.9.18 that envbuilder did not make"


def _non_empty_folder(path: Path) -> str:
    (path / "data").mkdir(parents=True)
    (path / "data" / "x.csv").write_text("1,2\n")
    (path / "notes.txt").write_text("keep\n")
    return "a folder that is not a venv (no pyvenv.cfg); it holds data, notes.txt"


def _a_file(path: Path) -> str:
    path.write_text("a file where the venv folder should be\n")
    return "a file, not a folder"


def _a_link(path: Path) -> str:
    target = path.parent / "elsewhere"
    target.mkdir()
    path.symlink_to(target)
    return f"a symbolic link (to {target})"


NOT_TAKEN_OVER: dict[str, Callable[[Path], str]] = {
    "project-with-foreign-pyvenv": _project_with_foreign_pyvenv,
    "non-empty-folder": _non_empty_folder,
    "file": _a_file,
    "symlink": _a_link,
}


def _assert_refused(proc: subprocess.CompletedProcess[str], path: Path, what: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""  # no "(built)" line
    message = " ".join(proc.stderr.split())
    assert f"{path} is {what}" in message
    assert "nothing was changed" in message
    assert "--force" in message and "another --path" in message


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("case", sorted(NOT_TAKEN_OVER))
def test_what_envbuilder_did_not_make_is_refused_and_unchanged(
    cpu_project: Path, tmp_path: Path, case: str, force: bool
) -> None:
    # (a) the first repro: src/ and .git vanished and the build said "(built)";
    # (c), (d) and a link: refused even with --force, which only takes over a venv
    path = tmp_path / "target"
    what = NOT_TAKEN_OVER[case](path)
    before = tree(path)
    proc = envbuilder(
        "build",
        "--target",
        "native",
        "--env",
        "cpu",
        "--path",
        str(path),
        *(["--force"] if force else []),
        cwd=cpu_project,
    )
    _assert_refused(proc, path, what)
    assert tree(path) == before
    if case == "project-with-foreign-pyvenv":
        assert "it holds files a venv does not: .git, src" in " ".join(proc.stderr.split())


def test_users_own_venv_of_the_same_python_is_refused_and_unchanged(
    cpu_project: Path, tmp_path: Path, user_venv_template: Path
) -> None:
    # (b) the second repro: its packages were uninstalled, then the build failed
    venv = tmp_path / "venv"
    shutil.copytree(user_venv_template, venv, symlinks=True)
    version = runs(venv / "bin" / "python", "import platform; print(platform.python_version())")
    before = tree(venv)
    proc = envbuilder(
        "build", "--target", "native", "--env", "cpu", "--path", str(venv), cwd=cpu_project
    )
    _assert_refused(
        proc,
        venv,
        f"a venv of Python {version.stdout.strip()} that envbuilder did not make (no {MARKER})",
    )
    assert tree(venv) == before


def test_force_is_a_usage_error_for_image_targets_and_documented(cpu_project: Path) -> None:
    proc = envbuilder("build", "--target", "docker", "--env", "cpu", "--force", cwd=cpu_project)
    assert proc.returncode == 2
    assert "--force applies to the venv targets (native, windows), not docker" in proc.stderr
    help_text = " ".join(envbuilder("build", "--help", cwd=cpu_project).stdout.split())
    assert "--force venv targets (native, windows): replace a venv" in help_text


# --- a one-package project (builds, offline) ---------------------------------------------------


@dataclass
class Tiny:
    root: Path
    pylock: Path
    env_lock: Path

    def build(self, venv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return envbuilder(
            "build",
            "--target",
            "native",
            "--env",
            "tiny",
            "--path",
            str(venv),
            *extra,
            cwd=self.root,
        )

    def validate(self, venv: Path) -> subprocess.CompletedProcess[str]:
        return envbuilder(
            "validate",
            "--target",
            "native",
            "--env",
            "tiny",
            "--path",
            str(venv),
            "--only",
            "conformance",
            cwd=self.root,
        )

    def lock(self, name: str, version: str, valid: bool = True) -> None:
        """Lock the env to one wheel (put in the mirror folder), as `envbuilder lock` would."""
        wheel = make_wheel(self.root / "mirror", name, version, valid)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        self.pylock.write_text(
            f'lock-version = "1.0"\ncreated-by = "test"\nrequires-python = "=={PYTHON}.*"\n\n'
            f'[[packages]]\nname = "{name}"\nversion = "{version}"\n'
            f'wheels = [{{ url = "https://wheels.invalid/simple/{wheel.name}", '
            f'hashes = {{ sha256 = "{sha}" }} }}]\n'
        )
        spec_hash = load_spec(self.root / "environments.toml").env_hash("tiny")  # current
        self.env_lock.write_text(
            f'version = 1\nenv = "tiny"\nspec_hash = "{spec_hash}"\nenvbuilder_version = "0.1.0"\n'
            f'source_date_epoch = 0\n\n[targets.native]\nplatform = "x86_64-manylinux_2_28"\n'
            f'python = "{PYTHON}"\npylock = "{self.pylock.name}"\n'
            f'pylock_sha256 = "{hashlib.sha256(self.pylock.read_bytes()).hexdigest()}"\n'
        )


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tiny:
    root = tmp_path / "tiny-project"
    (root / "lockfiles").mkdir(parents=True)
    (root / "environments.toml").write_text(
        f'[indexes.local]\nurl = "https://wheels.invalid/simple"\nmirror = "{root / "mirror"}"\n'
        f'\n[env.tiny]\ndescription = "one small wheel"\naccelerator = "cpu"\n'
        f'python = "{PYTHON}"\npackages = ["tinypkg==0.1"]\n'
        f'index_pins = {{ tinypkg = "local" }}\ntargets = ["native"]\n'
    )
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    project = Tiny(
        root, root / "lockfiles" / "pylock.tiny-native.toml", root / "lockfiles" / "tiny.lock.toml"
    )
    project.lock("tinypkg", "0.1")
    return project


def _assert_built(proc: subprocess.CompletedProcess[str], venv: Path, version: str = "0.1") -> None:
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("(built)")
    assert "lock_sha256" in marker(venv)  # a finished build's marker (names its lock)
    got = runs(venv / "bin" / "python", "import tinypkg; print(tinypkg.VERSION)")
    assert got.stdout.strip() == version, got.stderr


def test_build_makes_a_venv_where_nothing_is_or_in_an_empty_folder(
    tiny: Tiny, tmp_path: Path
) -> None:
    absent = tmp_path / "new" / "venv"
    _assert_built(tiny.build(absent), absent)
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_built(tiny.build(empty), empty)
    again = tiny.build(empty)
    assert again.returncode == 0 and again.stdout.strip().endswith("(up to date)")


def test_force_replaces_a_foreign_venv_with_a_new_one(
    tiny: Tiny, tmp_path: Path, user_venv_template: Path
) -> None:
    venv = tmp_path / "venv"
    shutil.copytree(user_venv_template, venv, symlinks=True)
    _assert_built(tiny.build(venv, "--force"), venv)
    python = venv / "bin" / "python"
    assert runs(python, "import userpkg").returncode != 0  # the user's package went with it
    assert runs(python, "import pip").returncode != 0  # a venv made anew: the lock only
    again = tiny.build(venv)  # envbuilder's venv now: no --force needed
    assert again.returncode == 0 and again.stdout.strip().endswith("(up to date)")


def test_a_moved_venv_is_not_taken_for_envbuilders_own(tiny: Tiny, tmp_path: Path) -> None:
    first, moved = tmp_path / "first", tmp_path / "moved"
    _assert_built(tiny.build(first), first)
    first.rename(moved)
    before = tree(moved)
    proc = tiny.build(moved)
    _assert_refused(proc, moved, f"a venv of Python {PYTHON}")
    assert f"names another folder, {first}: it was copied or moved" in proc.stderr
    assert tree(moved) == before
    _assert_built(tiny.build(moved, "--force"), moved)


def _break_python(venv: Path) -> None:
    """The venv's base Python is gone (as after an upgrade): bin/python points nowhere."""
    python = venv / "bin" / "python"
    python.unlink()
    python.symlink_to("/nonexistent/python3")


def test_remaking_envbuilders_venv_follows_no_link_out_of_it(tiny: Tiny, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _assert_built(tiny.build(venv), venv)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "precious.txt").write_text("not the venv's\n")
    (venv / "share").symlink_to(outside)  # a top-level entry that is a link
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "linked").symlink_to(outside / "deep")  # a link deep inside
    outside_before = tree(outside)
    _break_python(venv)
    _assert_built(tiny.build(venv), venv)
    assert tree(outside) == outside_before
    assert not (venv / "share").exists()


def test_remaking_a_venv_that_holds_user_files_is_refused_and_unchanged(
    tiny: Tiny, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _assert_built(tiny.build(venv), venv)
    (venv / "notes.txt").write_text("kept in the venv folder by its user\n")
    (venv / "src" / "editable").mkdir(parents=True)  # where `pip install -e` puts checkouts
    _break_python(venv)
    before = tree(venv)
    proc = tiny.build(venv)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    message = " ".join(proc.stderr.split())
    assert "also holds files a venv does not: notes.txt, src" in message
    assert "Nothing was changed" in message and "another --path" in message
    assert tree(venv) == before


def test_a_venv_whose_python_belongs_to_another_environment_is_never_synced(
    tiny: Tiny, tmp_path: Path
) -> None:
    # the folder's marker is envbuilder's, but its bin/python runs another venv: syncing
    # "through" it would change that other venv
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    venv = tmp_path / "venv"
    _assert_built(tiny.build(venv), venv)
    python = venv / "bin" / "python"
    python.unlink()
    python.write_text(f'#!/bin/sh\nexec "{other / "bin" / "python"}" "$@"\n')
    python.chmod(0o755)
    tiny.lock("tinypkg", "0.2")  # a new lock: the build must sync
    other_before = tree(other)
    _assert_built(tiny.build(venv), venv, version="0.2")
    assert tree(other) == other_before


def test_a_failed_sync_leaves_an_incomplete_venv_that_validate_refuses_and_build_repairs(
    tiny: Tiny, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _assert_built(tiny.build(venv), venv)
    tiny.lock("tinypkg", "0.2", valid=False)  # its hash is right; installing it fails
    failed = tiny.build(venv)
    assert failed.returncode == 1 and "installing the locked packages" in failed.stderr
    assert marker(venv)["state"] == "incomplete"

    refused = tiny.validate(venv)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    message = " ".join(refused.stderr.split())
    assert f"the venv at {venv} is incomplete: a build of it was interrupted or failed" in message
    assert f"envbuilder build --target native --env tiny --path {venv}" in message

    tiny.lock("tinypkg", "0.2")
    _assert_built(tiny.build(venv), venv, version="0.2")
    assert marker(venv)["state"] == "complete"
    checked = tiny.validate(venv)
    assert "is incomplete" not in checked.stderr
    assert checked.stdout.split()[:3] == ["tiny", "native", "pass"], checked.stderr


def test_a_folder_left_by_an_interrupted_build_is_repaired(tiny: Tiny, tmp_path: Path) -> None:
    # interrupted right after the marker was written into a new folder
    new = tmp_path / "new"
    new.mkdir()
    (new / MARKER).write_bytes(incomplete_marker_bytes(new, "tiny", "native"))
    _assert_built(tiny.build(new), new)
    # interrupted while an old venv was being removed: only part of it is left
    venv = tmp_path / "venv"
    _assert_built(tiny.build(venv), venv)
    (venv / MARKER).write_bytes(incomplete_marker_bytes(venv, "tiny", "native"))
    shutil.rmtree(venv / "bin")
    _assert_built(tiny.build(venv), venv)


# --- the parts, on real folders ----------------------------------------------------------------


def test_uv_is_never_asked_to_clear_a_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # uv venv --clear (or UV_VENV_CLEAR=1 in the user's environment) deletes what a folder holds
    monkeypatch.setenv("UV_VENV_CLEAR", "1")
    cmd = uv_venv_command("uv", "/usr/bin/python3", Path("/v"), "p")
    assert "--allow-existing" in cmd and not {"--clear", "-c"} & set(cmd)
    assert "UV_VENV_CLEAR" not in uv_venv_environment()


def test_a_folder_holding_only_an_interrupted_marker_write_is_empty(tmp_path: Path) -> None:
    (tmp_path / f".{MARKER}.abc123.tmp").write_text("{")
    assert inspect_folder(tmp_path).kind == "empty"
    (tmp_path / "x").write_text("")
    assert inspect_folder(tmp_path).kind == "other"


def test_marker_states(tmp_path: Path) -> None:
    done = marker_bytes(tmp_path, "cpu", "native", "ab" * 32, "3.11.7", {"a": "1"})
    (tmp_path / MARKER).write_bytes(done)
    assert (read_marker(tmp_path / MARKER) or {})["state"] == "complete"
    older = {"marker_version": 1, "venv": str(tmp_path)}  # an envbuilder before states
    assert marker_state(older) == "complete"
    (tmp_path / MARKER).write_bytes(incomplete_marker_bytes(tmp_path, "cpu", "native"))
    data = read_marker(tmp_path / MARKER)
    assert data is not None and marker_state(data) == "incomplete"
    assert "lock_sha256" not in data  # an incomplete venv holds no known lock
    assert inspect_folder(tmp_path).kind == "ours"


def test_a_marker_that_is_a_link_proves_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("version = 3.11.7\n")
    elsewhere = tmp_path / "marker.json"
    elsewhere.write_bytes(marker_bytes(venv, "cpu", "native", "ab" * 32, "3.11.7", {}))
    (venv / MARKER).symlink_to(elsewhere)
    assert inspect_folder(venv).kind == "foreign-venv"
    (venv / MARKER).unlink()
    shutil.copy2(elsewhere, venv / MARKER)
    assert inspect_folder(venv).kind == "ours"

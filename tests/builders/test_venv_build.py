"""Real venvs with torch, built from the shipped `cpu` lock (issue 7's acceptance).

One venv is built per test session and shared (installing torch takes a while); the tests run in
file order and each leaves the venv as the lock says. Everything is offline: torch comes from the
machine's mirror folder through the host wheel cache, hash-checked.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from envbuilder.builders.lookup import builder_for
from envbuilder.builders.venv import NativeVenvBuilder
from envbuilder.builders.venvcommands import VenvLayout
from envbuilder.builders.venvfolder import MARKER
from envbuilder.core.errors import EnvbuilderError, LockError
from envbuilder.core.fsutil import sha256_file
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import no_progress
from envbuilder.core.project import Project
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry
from envbuilder.targets.base import Artifact, BuildOptions, ValidateOptions

# slow: torch is installed and the probe runs several times; network: with an empty wheel cache
# torch's small dependencies come from the default index (torch itself from the mirror folder).
pytestmark = [pytest.mark.slow, pytest.mark.network]

REPO = Path(__file__).resolve().parents[2]
ENV = "cpu"
#: A short validation for the tests that only need to know the venv still works and conforms.
SHORT = ValidateOptions(level="quick", only=("device", "conformance"))


def _native() -> NativeVenvBuilder:
    target = builder_for(registry.get("native"))
    assert isinstance(target, NativeVenvBuilder)
    return target


@dataclass
class Built:
    project: Project
    env: EnvSpec
    venv: Path
    first: Artifact


def _copy_project(dest: Path) -> Path:
    for name in ("environments.toml", "lockfiles"):
        src = REPO / name
        if not src.exists():
            pytest.fail(f"{src} is missing: the shipped spec and its locks are part of the repo")
        if src.is_dir():
            shutil.copytree(src, dest / name)
        else:
            shutil.copy2(src, dest / name)
    return dest / "environments.toml"


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    root = tmp_path_factory.mktemp("venv-project")
    spec_path = _copy_project(root)
    project = Project.from_spec(spec_path, cache=tmp_path_factory.mktemp("venv-cache"))
    env = load_spec(spec_path).env(ENV)
    venv = root / "venvs" / "cpu native"  # a space in the path, on purpose
    # uv's own cache goes to a folder of this session, so a test can see what a build leaves
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UV_CACHE_DIR", str(tmp_path_factory.mktemp("uv-cache")))
        first = _native().build(project, env, BuildOptions(path=venv), no_progress)
        yield Built(project, env, venv, first)


def test_build_leaves_no_unpacked_wheels_in_uvs_cache(built: Built) -> None:
    # Each build's wheelhouse is a new folder: a cached sync would keep one more unpacked torch
    # (~0.7 GB) per build in uv's cache, forever.
    cache = Path(os.environ["UV_CACHE_DIR"])
    assert not [p for p in cache.rglob("torch") if p.is_dir()]


def _validate(b: Built, options: ValidateOptions = SHORT) -> dict[str, object]:
    report = _native().validate(
        b.project, b.env, dataclasses.replace(options, path=b.venv), no_progress
    )
    data: dict[str, object] = json.loads(report.read_text())
    return data


def _checks(report: dict[str, object]) -> dict[str, dict[str, object]]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return {c["name"]: c for c in checks}


def _snapshot(venv: Path) -> dict[str, int]:
    return {str(p.relative_to(venv)): p.lstat().st_mtime_ns for p in sorted(venv.rglob("*"))}


def _python(b: Built) -> Path:
    return Path(VenvLayout(b.venv, windows=False).python)


def _rebuild(b: Built) -> Artifact:
    return _native().build(b.project, b.env, BuildOptions(path=b.venv), no_progress)


# --- 1. built from the lock, probe passes ------------------------------------------------------


def test_build_creates_the_venv_from_the_lock_and_the_probe_passes(built: Built) -> None:
    assert built.first.details["changed"] == "yes"
    marker = json.loads((built.venv / MARKER).read_text())
    pylock = built.project.lockfiles / f"pylock.{ENV}-native.toml"
    assert marker["lock_sha256"] == sha256_file(pylock)
    assert (marker["env"], marker["target"], marker["venv"]) == (ENV, "native", str(built.venv))
    assert marker["packages"]["torch"] == "2.13.0+cpu"
    assert "pip" not in marker["packages"]  # the venv holds the lock and nothing else
    report = _validate(built, ValidateOptions(level="quick"))
    assert report["status"] == "pass", json.dumps(report["checks"], indent=1)[:4000]
    assert report["labels"] == {"env": ENV, "target": "native"}
    assert (built.project.reports / f"{ENV}.native.json").is_file()


def test_validate_command_reports_the_expected_and_found_release(built: Built) -> None:
    """Issue 24's acceptance: `envbuilder validate --target native --env cpu` writes a report
    that says which release and devices it expected (none: a cpu env) and which it found."""
    from envbuilder.commands._cli import main

    code = main(
        [
            "-q",
            "validate",
            "--target",
            "native",
            "--env",
            ENV,
            "--path",
            str(built.venv),
            "--only",
            "conformance",
            "--spec",
            str(built.project.spec_path),
        ]
    )
    report = json.loads((built.project.reports / f"{ENV}.native.json").read_text())
    assert code == 0, json.dumps(report["checks"], indent=1)[:4000]
    release = _checks(report)["conformance"]["details"]["release"]  # type: ignore[index]
    assert release["expected"] == {"accelerator": "cpu", "rocm": None, "hip": None, "gfx": []}
    assert release["found"]["torch"] == "2.13.0+cpu"
    assert release["found"]["build"] == "cpu" and release["found"]["devices"] == []
    assert release["summary"] == "no ROCm expected (cpu env): torch 2.13.0+cpu, no GPU"


def test_activate_sets_the_env_variables_and_gives_torch(built: Built) -> None:
    act = built.venv / "bin" / "activate"
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'unset PYTHONDONTWRITEBYTECODE; . "{act}"; echo "$PYTHONDONTWRITEBYTECODE";'
            ' python -c "import torch, sys; print(torch.__version__, sys.prefix)";'
            ' deactivate; echo "${PYTHONDONTWRITEBYTECODE-unset}"',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[:3] == ["1", f"2.13.0+cpu {built.venv}", "unset"]


# --- re-running with the same lock changes nothing ---------------------------------------------


def test_rebuild_with_the_same_lock_writes_nothing(built: Built) -> None:
    before = _snapshot(built.venv)
    again = _rebuild(built)
    assert again.details["changed"] == "no"
    assert _snapshot(built.venv) == before


# --- 2. an extra package fails conformance; build syncs it away --------------------------------


def _tiny_wheel(folder: Path, name: str = "envbuilder_extra_pkg", version: str = "0.1") -> Path:
    """A minimal valid wheel, made here so the test needs no index."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def test_extra_package_fails_validate_and_build_removes_it(built: Built, tmp_path: Path) -> None:
    from envbuilder.host.pyfinder import uv_bin

    wheel = _tiny_wheel(tmp_path)
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "install",
            "--python",
            str(_python(built)),
            "--offline",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    report = _validate(built)
    assert report["status"] == "fail"
    conformance = _checks(report)["conformance"]
    assert conformance["status"] == "fail"
    assert "envbuilder-extra-pkg" in json.dumps(conformance).replace("_", "-")

    rebuilt = _rebuild(built)
    assert rebuilt.details["changed"] == "yes"
    assert rebuilt.details["changes"] == "-envbuilder-extra-pkg==0.1"
    listed = subprocess.run(
        [str(_python(built)), "-c", "import envbuilder_extra_pkg"], capture_output=True, check=False
    )
    assert listed.returncode != 0  # synced away
    assert _validate(built)["status"] == "pass"


# --- a new lock syncs: what it dropped is removed ----------------------------------------------


def _relock(project: Project, new_text: str | None = None) -> None:
    """Write a changed pylock and record its sha256 in the env lock, as `lock` would."""
    pylock = project.lockfiles / f"pylock.{ENV}-native.toml"
    if new_text is not None:
        pylock.write_text(new_text)
    env_lock = project.env_lock(ENV)
    doc: Any = tomlkit.parse(env_lock.read_text())  # Any: tomlkit's item types vary by version
    doc["targets"]["native"]["pylock_sha256"] = sha256_file(pylock)
    env_lock.write_text(tomlkit.dumps(doc))


def _drop_package(text: str, name: str) -> str:
    doc: Any = tomlkit.parse(text)
    packages = doc["packages"]
    kept = [p for p in packages if p["name"] != name]
    assert len(kept) == len(packages) - 1
    new = tomlkit.aot()
    for p in kept:
        new.append(p)
    doc["packages"] = new
    return tomlkit.dumps(doc)


def test_new_lock_syncs_and_removes_what_it_dropped(built: Built) -> None:
    pylock = built.project.lockfiles / f"pylock.{ENV}-native.toml"
    original, env_lock = pylock.read_text(), built.project.env_lock(ENV).read_text()
    try:
        _relock(built.project, new_text=_drop_package(original, "mpmath"))
        assert _rebuild(built).details["changes"] == "-mpmath==1.3.0"
        marker = json.loads((built.venv / MARKER).read_text())
        assert "mpmath" not in marker["packages"] and "torch" in marker["packages"]
    finally:
        pylock.write_text(original)
        built.project.env_lock(ENV).write_text(env_lock)
    assert _rebuild(built).details["changes"] == "+mpmath==1.3.0"
    assert "mpmath" in json.loads((built.venv / MARKER).read_text())["packages"]


# --- 3. a tampered lock is refused, the venv keeps working -------------------------------------


def _tamper_torch_hash(text: str) -> str:
    """The pylock with one hex digit of torch's wheel hash changed."""
    doc: Any = tomlkit.parse(text)
    for package in doc["packages"]:
        if package["name"] == "torch":
            for wheel in package["wheels"]:
                old = str(wheel["hashes"]["sha256"])
                wheel["hashes"]["sha256"] = ("0" if old[0] != "0" else "1") + old[1:]
    out = tomlkit.dumps(doc)
    assert out != text
    return out


@pytest.mark.parametrize("also_fix_env_lock", [False, True], ids=["pylock-edited", "hash-forged"])
def test_tampered_lock_is_refused_and_the_venv_keeps_working(
    built: Built, also_fix_env_lock: bool
) -> None:
    pylock = built.project.lockfiles / f"pylock.{ENV}-native.toml"
    original, env_lock = pylock.read_text(), built.project.env_lock(ENV).read_text()
    before = _snapshot(built.venv)
    try:
        pylock.write_text(_tamper_torch_hash(original))
        if also_fix_env_lock:
            # the forger also updates the recorded sha256: the artifact check must catch it
            _relock(built.project)
            with pytest.raises(EnvbuilderError, match=r"(?i)sha256|hash"):
                _rebuild(built)
        else:
            with pytest.raises(LockError, match="edited after locking"):
                _rebuild(built)
        assert _snapshot(built.venv) == before  # not one file touched
    finally:
        pylock.write_text(original)
        built.project.env_lock(ENV).write_text(env_lock)
    assert _validate(built)["status"] == "pass"
    assert _rebuild(built).details["changed"] == "no"


def test_validate_without_a_venv_says_to_build(built: Built, tmp_path: Path) -> None:
    from envbuilder.core.errors import ValidationError

    with pytest.raises(ValidationError, match="envbuilder build --target native --env cpu"):
        _native().validate(
            built.project,
            built.env,
            dataclasses.replace(SHORT, path=tmp_path / "none"),
            no_progress,
        )


def test_path_that_is_not_a_venv_is_not_deleted(built: Built, tmp_path: Path) -> None:
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    with pytest.raises(EnvbuilderError, match="not a venv"):
        _native().build(built.project, built.env, BuildOptions(path=precious), no_progress)
    assert (precious / "thesis.tex").read_text() == "keep me"
    assert [p.name for p in precious.iterdir()] == ["thesis.tex"]

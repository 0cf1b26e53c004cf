"""The wsl2 target end to end on the shipped cpu env (real Docker, real torch, the real probe):
build -> dist/cpu.wsl with Microsoft's rules -> the probe passes inside that very tar (docker
import) -> push, and pull back into the same `.wsl` without building. That a build without any
cache gives the same sha256 is tests/image/test_repro_build.py's cold `build --verify` against the
sha256 the committed lock records (issue 24 dropped the second uncached build here, 117 s of CI,
which showed less: two builds on one machine rather than one against a digest made elsewhere).

The project is a copy of the repository's spec, locks and rendered wsl/ in a temp folder, so
the repository's lockfiles are not touched. Heavy: one full build (about 3 minutes here), one
export of a pulled image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuilder.builders import wsl2, wsl2_run
from envbuilder.builders.lookup import builder_for
from envbuilder.core.fsutil import sha256_file
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import no_progress
from envbuilder.core.project import Project
from envbuilder.image import wsl as wsltar
from envbuilder.image.wsl import icon as wslicon
from envbuilder.lock.lockfile import load_env_lock
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry
from envbuilder.targets.base import (
    Artifact,
    BuildOptions,
    PullOptions,
    PushOptions,
    ValidateOptions,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    if not (ROOT / "lockfiles" / "cpu.lock.toml").is_file():
        pytest.fail("lockfiles/cpu.lock.toml is missing: the repository ships the cpu lock")
    root = tmp_path_factory.mktemp("wsl2-project")
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    shutil.copytree(ROOT / "wsl", root / "wsl")
    return Project.from_spec(root / "environments.toml")


@pytest.fixture(scope="module")
def cpu(project: Project) -> EnvSpec:
    return load_spec(project.spec_path).env("cpu")


@pytest.fixture(scope="module")
def target(docker_client: Any) -> wsl2.Wsl2Builder:
    return wsl2.Wsl2Builder(docker_client)


@pytest.fixture(scope="module")
def built(target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec) -> Artifact:
    return target.build(project, cpu, BuildOptions(), no_progress)


def test_registry_gives_the_wsl2_target() -> None:
    assert isinstance(builder_for(registry.get("wsl2")), wsl2.Wsl2Builder)


def test_build_writes_the_wsl_and_records_its_sha256(built: Artifact, project: Project) -> None:
    path = Path(built.reference)
    assert path == project.dist / "cpu.wsl"
    assert built.digest == sha256_file(path)
    lock = load_env_lock(project, "cpu")
    assert lock is not None
    assert lock.artifacts["wsl2"]["sha256"] == built.digest
    assert [p.name for p in project.dist.iterdir()] == ["cpu.wsl"]  # no temp/spool file left


def test_wsl_keeps_microsoft_rules(built: Artifact, project: Project) -> None:
    lock = load_env_lock(project, "cpu")
    assert lock is not None
    findings = wsltar.check_wsl_tar(Path(built.reference), source_date_epoch=lock.source_date_epoch)
    # Microsoft's modern format (validate-modern.py): not even a warning -- an icon, no
    # `[user] default`, no user with the default uid in /etc/passwd (oobe.sh creates it).
    assert [str(f) for f in findings] == []


def test_wsl_has_the_env_inside(built: Artifact) -> None:
    import tarfile

    with tarfile.open(built.reference) as tar:
        view = wsltar.TarView(tar)
        names = set(view.by_name)
        assert "opt/venv/bin/python" in names
        assert any(n.startswith("opt/venv/lib/python3.11/site-packages/torch/") for n in names)
        assert view.resolve("/sbin/init") is not None  # systemd = true in wsl.conf
        assert not [n for n in names if n.startswith("tmp/envbuilder")]  # no wheels, no lock
        icon = view.resolve("/usr/lib/wsl/envbuilder.ico")
        assert icon is not None and view.read(icon) == wslicon.icon_bytes()
    assert wsl2_run.first_launch(Path(built.reference)) == wsl2_run.FirstLaunch(
        "/usr/lib/wsl/oobe.sh", "1000"
    )


def test_build_again_is_up_to_date(
    target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec, built: Artifact
) -> None:
    again = target.build(project, cpu, BuildOptions(), no_progress)
    assert again.digest == built.digest
    assert again.details["changed"] == "no"


def test_probe_passes_inside_the_imported_wsl(
    target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec, built: Artifact
) -> None:
    options = ValidateOptions(level="quick", only=("device", "conformance"))
    report_path = target.validate(project, cpu, options, no_progress)
    assert report_path == project.report("cpu", "wsl2")
    report = json.loads(report_path.read_text())
    assert report["status"] == "pass", [c for c in report["checks"] if c["status"] != "pass"]
    assert report["labels"] == {
        "engine": "docker",
        "env": "cpu",
        "target": "wsl2",
        "wsl_sha256": built.digest,
    }
    ran = {c["name"] for c in report["checks"] if c["status"] != "skip"}
    assert ran == {"device", "conformance"}  # the others are listed as skipped (--only)


def test_validate_refuses_a_changed_wsl(
    target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec, built: Artifact
) -> None:
    from envbuilder.core.errors import ValidationError

    path = Path(built.reference)
    saved = path.with_suffix(".saved")
    shutil.copy(path, saved)
    try:
        with path.open("ab") as fh:
            fh.write(b"\0")
        with pytest.raises(ValidationError, match="build it again"):
            target.validate(project, cpu, ValidateOptions(), no_progress)
    finally:
        saved.replace(path)


def _envbuilder(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("envbuilder")
    return subprocess.run(
        [str(exe), *args], cwd=project.root, capture_output=True, text=True, timeout=900,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


def test_run_in_the_imported_wsl_and_its_print_line(project: Project, built: Artifact) -> None:
    """`envbuilder run --target wsl2` (issue 23) on Linux: the very `.wsl`, imported, as the
    distro's user through a login shell (/etc/profile.d sets the env's variables); its --print
    line, pasted into bash, does the same."""
    script = (
        "import os, torch; print(torch.__version__, os.getuid(), os.environ['PYTHONUNBUFFERED'])"
    )
    command = ["run", "--env", "cpu", "--target", "wsl2", "--", "python", "-c", script]
    result = _envbuilder(project, *command)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.13.0+cpu", "1000", "1"]
    printed = _envbuilder(project, "-q", *command[:5], "--print", *command[5:])
    assert printed.returncode == 0, printed.stderr
    pasted = subprocess.run(
        ["bash", "-c", printed.stdout.strip()], capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert pasted.stdout.split() == ["2.13.0+cpu", "1000", "1"], pasted.stderr
    code = _envbuilder(
        project, "run", "--env", "cpu", "--target", "wsl2", "--", "sh", "-c", "exit 9"
    )
    assert code.returncode == 9


@pytest.fixture
def pushed(
    target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec, built: Artifact, registry: str
) -> Iterator[str]:
    yield target.push(project, cpu, PushOptions(f"{registry}/envbuilder-test"), no_progress)


def test_pull_makes_the_same_wsl_without_building(
    target: wsl2.Wsl2Builder, project: Project, cpu: EnvSpec, built: Artifact, pushed: str
) -> None:
    assert "@sha256:" in pushed
    lock = load_env_lock(project, "cpu")
    assert lock is not None and lock.artifacts["wsl2"]["repo_digest"] == pushed
    Path(built.reference).unlink()
    result = target.pull(project, cpu, PullOptions(), no_progress)
    assert result == f"{built.reference} sha256:{built.digest}"
    assert sha256_file(Path(built.reference)) == built.digest

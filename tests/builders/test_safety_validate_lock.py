"""Issue 30, item 3: `validate` refuses an artifact that is not the lock's, as `run` does (the same
check: a venv's marker, an image's lock label, a .wsl's sha256), unless --allow-other-lock is
given; then the report records it (`other_lock`, probe-report.schema.json).

The venv cases build the one-wheel project of test_safety_venv (offline, about a second) and
run the real command line; the image case checks the docker builder's check on an image as the
engine describes it (no image is built here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_safety_venv import Tiny, envbuilder, tiny  # noqa: F401 (tiny: the fixture)

from envbuilder.builders.docker import _other_lock
from envbuilder.builders.proberun import OtherLock, refuse_other_lock, with_other_lock
from envbuilder.builders.venvfolder import MARKER
from envbuilder.core.errors import ValidationError
from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.image.engine_values import ImageInfo
from envbuilder.targets.base import ValidateOptions

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "envbuilder/data/schemas/probe-report.schema.json").read_text())
FOREIGN = "0" * 64

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the native target is Linux-only")


def _validate(project: Tiny, venv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return envbuilder(
        "validate", "--target", "native", "--env", "tiny", "--path", str(venv),
        "--only", "conformance", *extra,
        cwd=project.root,
    )  # fmt: skip


def _report(project: Tiny) -> Path:
    return project.root / "reports" / "tiny.native.json"


@pytest.fixture
def foreign_venv(tiny: Tiny, tmp_path: Path) -> tuple[Path, str]:  # noqa: F811
    """A venv envbuilder built, whose marker then names another lock; (venv, the real lock)."""
    venv = tmp_path / "venv"
    built = tiny.build(venv)
    assert built.returncode == 0, built.stderr
    marker = json.loads((venv / MARKER).read_text())
    real = marker["lock_sha256"]
    marker["lock_sha256"] = FOREIGN
    (venv / MARKER).write_text(json.dumps(marker))
    return venv, real


def test_validate_refuses_a_venv_of_another_lock_as_run_does(
    tiny: Tiny,  # noqa: F811
    foreign_venv: tuple[Path, str],
) -> None:
    venv, real = foreign_venv
    proc = _validate(tiny, venv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    said = " ".join(proc.stderr.split())
    why = (
        f"the venv at {venv} holds lock {FOREIGN}, not the current pylock.tiny-native.toml ({real})"
    )
    assert why in said and "--allow-other-lock" in said
    assert not _report(tiny).exists()
    ran = envbuilder(
        "run", "--env", "tiny", "--target", "native", "--path", str(venv), "--", "true",
        cwd=tiny.root,
    )  # fmt: skip
    assert ran.returncode == 1 and why in " ".join(ran.stderr.split())  # the same check


def test_allow_other_lock_validates_it_and_the_report_says_so(
    tiny: Tiny,  # noqa: F811
    foreign_venv: tuple[Path, str],
) -> None:
    venv, real = foreign_venv
    proc = _validate(tiny, venv, "--allow-other-lock")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(_report(tiny).read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["other_lock"] == {
        "artifact": f"the venv at {venv}",
        "artifact_lock": FOREIGN,
        "lock": real,
        "reason": report["other_lock"]["reason"],
    }
    assert "holds lock" in report["other_lock"]["reason"]


def test_the_locks_own_venv_is_validated_without_a_note(tiny: Tiny, tmp_path: Path) -> None:  # noqa: F811
    venv = tmp_path / "venv"
    assert tiny.build(venv).returncode == 0
    proc = _validate(tiny, venv)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(_report(tiny).read_text())
    jsonschema.validate(report, SCHEMA)
    assert "other_lock" not in report


def test_a_venv_without_envbuilders_marker_is_refused(tiny: Tiny, tmp_path: Path) -> None:  # noqa: F811
    venv = tmp_path / "venv"
    assert tiny.build(venv).returncode == 0
    (venv / MARKER).unlink()
    proc = _validate(tiny, venv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "has no marker of envbuilder's" in " ".join(proc.stderr.split())
    assert not _report(tiny).exists()


def _image(labels: dict[str, str]) -> ImageInfo:
    return ImageInfo.from_inspect({"Id": "sha256:" + "1" * 64, "Config": {"Labels": labels}})


def test_an_image_of_another_lock_is_refused_unless_allowed() -> None:
    lock = "a" * 64
    assert _other_lock(_image({LOCK_LABEL: lock}), "envbuilder/cpu:aaaa", lock) is None
    other = _other_lock(_image({LOCK_LABEL: FOREIGN}), "envbuilder/cpu:aaaa", lock)
    assert other is not None and (other.artifact_lock, other.lock) == (FOREIGN, lock)
    with pytest.raises(ValidationError, match=r"refusing the image envbuilder/cpu:aaaa: it was"):
        refuse_other_lock(other, ValidateOptions())
    assert refuse_other_lock(other, ValidateOptions(allow_other_lock=True)) is other
    unlabelled = _other_lock(_image({}), "envbuilder/cpu:aaaa", lock)
    assert unlabelled is not None and unlabelled.artifact_lock is None


def test_the_other_lock_field_is_valid_in_the_schema() -> None:
    report: dict[str, Any] = json.loads((ROOT / "tests/data/probe/h200-standard.json").read_text())
    stamped = json.loads(with_other_lock(json.dumps(report).encode(), None))
    assert stamped == report
    other = OtherLock("dist/cpu.wsl", None, "b" * 64, "no sha256")
    jsonschema.validate(json.loads(with_other_lock(json.dumps(report).encode(), other)), SCHEMA)
    bad = {**report, "other_lock": {"artifact": "x"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)

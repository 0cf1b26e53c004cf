"""What every builder passes to the probe when it validates an artifact: its command-line options
and the probe zipapp to copy in."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envbuilder.builders.probeargs import probe_args
from envbuilder.core.errors import ValidationError
from envbuilder.core.model import EnvSpec
from envbuilder.targets.base import ValidateOptions


def probe_options(env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]) -> list[str]:
    """The probe's command-line options for `options` and `labels`, shared by every target
    (envbuilder.builders.probeargs.probe_args: --expect defaults to the env's accelerator, a ROCm
    run carries the release check's --expect-rocm/--expect-hip/--expect-gfx). Where the probe
    runs, its --lock/--json/--timeout are the target's."""
    return probe_args(env, options, labels)


def probe_zipapp_bytes() -> bytes:
    """The probe zipapp (envbuilder.probe.build_zipapp) as bytes, to copy into an artifact."""
    from envbuilder.core.fsutil import temp_dir
    from envbuilder.probe import build_zipapp  # the probe package: imported when validating

    with temp_dir("envbuilder-probe-") as tmp:
        return build_zipapp(tmp / "probe.pyz").read_bytes()


@dataclass(frozen=True)
class OtherLock:
    """An artifact that is not the lock's, validated because the user asked
    (--allow-other-lock): the report's `other_lock` (probe-report.schema.json)."""

    artifact: str  # what was validated (the venv, the image tag, the .wsl)
    artifact_lock: str | None  # the lock it names (marker, label, sha256), None when none
    lock: str  # what the current lock records
    reason: str  # why it is not the lock's (run's refusal)

    def as_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "artifact_lock": self.artifact_lock,
            "lock": self.lock,
            "reason": self.reason,
        }


def refuse_other_lock(other: OtherLock | None, options: ValidateOptions) -> OtherLock | None:
    """`other` when the user allowed it (validate goes on, the report records it); else the
    refusal run gives (ValidationError), with the option that overrides it. None: the lock's."""
    if other is None or options.allow_other_lock:
        return other
    raise ValidationError(
        f"refusing {other.artifact}: {other.reason}. validate checks the artifact of the "
        "current lock, as run runs only it; --allow-other-lock validates it all the same "
        "and records that in the report (other_lock)"
    )


def with_other_lock(report: bytes, other: OtherLock | None) -> bytes:
    """The report with `other_lock` added when the artifact is not the lock's (unchanged
    otherwise)."""
    return report if other is None else _with_field(report, "other_lock", other.as_dict())


def with_engine(report: bytes, engine: Mapping[str, Any]) -> bytes:
    """The probe's report with an `engine` object added: which engine ran it (for an image
    target: envbuilder.image.engine_values.EngineInfo.as_dict(); probe-report.schema.json,
    optional in schema_version 1). ValidationError when the report is not a JSON object."""
    return _with_field(report, "engine", dict(engine))


def _with_field(report: bytes, key: str, value: object) -> bytes:
    try:
        data = json.loads(report)
    except ValueError as exc:
        raise ValidationError(f"the probe's report is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError("the probe's report is not a JSON object")
    data[key] = value
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8")

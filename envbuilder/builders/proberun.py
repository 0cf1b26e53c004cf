"""What every builder passes to the probe when it validates an artifact: its command-line options
and the probe zipapp to copy in."""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def with_engine(report: bytes, engine: Mapping[str, Any]) -> bytes:
    """The probe's report with an `engine` object added: which engine ran it (for an image
    target: envbuilder.image.engine.EngineInfo.as_dict(); probe-report.schema.json, optional in
    schema_version 1). ValidationError when the report is not a JSON object."""
    try:
        data = json.loads(report)
    except ValueError as exc:
        raise ValidationError(f"the probe's report is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError("the probe's report is not a JSON object")
    data["engine"] = dict(engine)
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8")

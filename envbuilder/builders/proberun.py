"""What every builder passes to the probe when it validates an artifact: its command-line options
and the probe zipapp to copy in."""

from __future__ import annotations

from collections.abc import Mapping

from envbuilder.model import EnvSpec
from envbuilder.targets.base import ValidateOptions


def probe_options(env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]) -> list[str]:
    """The probe's command-line options for `options` and `labels` (in their order), shared by
    every target: --expect defaults to the env's accelerator; --repeat is left out when 1 (the
    probe's default). Where the probe runs, its --lock/--json/--timeout are the target's."""
    args = ["--level", options.level, "--expect", options.expect or env.accelerator]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    if options.repeat != 1:
        args += ["--repeat", str(options.repeat)]
    for check in options.only:
        args += ["--only", check]
    for check in options.skip:
        args += ["--skip", check]
    return args


def probe_zipapp_bytes() -> bytes:
    """The probe zipapp (envbuilder.probe.build_zipapp) as bytes, to copy into an artifact."""
    from envbuilder.fsutil import temp_dir
    from envbuilder.probe import build_zipapp  # the probe package: imported when validating

    with temp_dir("envbuilder-probe-") as tmp:
        return build_zipapp(tmp / "probe.pyz").read_bytes()

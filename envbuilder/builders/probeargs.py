"""The probe's command-line options for an env: what every builder (docker, wsl2, venv) and the
Slurm batch script pass to the probe (`builders.proberun.probe_options` is the builders' door to
`probe_args`; `slurm.script` renders its default from it too).

Besides --level/--expect/--label/--repeat/--only/--skip/--find-batch, a ROCm env's run carries
the release check's expectation (docs/probe.md, "Release check"):

  --expect-rocm <env.rocm>      the release the env locks
  --expect-hip <major.minor>    the HIP version that release ships (rocm.toml [[hip]]); left out
                                when the data holds none (the probe then says it was not checked)
  --expect-gfx <gfx> ...        the GPU targets the lock's device code is for: for a pip-SDK
                                release the lock holds one `device-<gfx>` extra per GPU of the
                                env (pipsdk.lock_inputs), for amdgpu-install releases the env's
                                `gpu`; both are `env.gfx_targets`. With HSA_OVERRIDE_GFX_VERSION
                                set in the env, the target the runtime then reports is accepted too.

They are passed only when the run expects rocm: `--expect cpu` on a ROCm env (a WSL distro checked
on a Linux Docker host) checks no release.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from envbuilder.core.model import EnvSpec
from envbuilder.targets.base import ValidateOptions

HSA_VAR = "HSA_OVERRIDE_GFX_VERSION"


def override_target(value: str) -> str | None:
    """The gfx target HSA_OVERRIDE_GFX_VERSION=major.minor.stepping makes the runtime report:
    gfx + major (decimal) + minor and stepping (hex), as ROCm's own kfdtest script derives it
    (rocm-systems projects/rocr-runtime/libhsakmt/tests/kfdtest/scripts/run_kfdtest.sh):
    10.3.0 -> gfx1030, 9.0.10 -> gfx90a. None for a value that is not three numbers."""
    found = re.fullmatch(r"([0-9]+)\.([0-9]+)\.([0-9]+)", value.strip())
    if found is None:
        return None
    major, minor, step = (int(n) for n in found.groups())
    return f"gfx{major}{minor:x}{step:x}"


def expected_gfx(env: EnvSpec) -> tuple[str, ...]:
    """The GPU targets a visible device of this env may report (see the module docstring)."""
    targets = list(env.gfx_targets)
    override = override_target(env.env[HSA_VAR]) if HSA_VAR in env.env else None
    if override is not None and targets and override not in targets:
        targets.append(override)
    return tuple(targets)


def expectation_args(env: EnvSpec, expect: str) -> list[str]:
    """--expect-rocm/--expect-hip/--expect-gfx of a run that expects `expect`."""
    if expect != "rocm" or env.accelerator != "rocm" or not env.rocm:
        return []
    release = env.release
    # The release the lock resolved `rocm = "7.14"` to (the spec may name a line).
    args = ["--expect-rocm", release.version if release is not None else env.rocm]
    if release is not None and release.hip is not None:
        args += ["--expect-hip", release.hip]
    for gfx in expected_gfx(env):
        args += ["--expect-gfx", gfx]
    return args


def probe_args(env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]) -> list[str]:
    """The probe's command-line options for `options` and `labels` (in their order), shared by
    every target: --expect defaults to the env's accelerator, and a ROCm run carries the release
    check's expectation; --repeat is left out when 1 (the probe's default). Where the probe
    runs, its --lock/--json/--timeout are the target's."""
    expect = options.expect or env.accelerator
    args = ["--level", options.level, "--expect", expect, *expectation_args(env, expect)]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    if options.repeat != 1:
        args += ["--repeat", str(options.repeat)]
    for check in options.only:
        args += ["--only", check]
    for check in options.skip:
        args += ["--skip", check]
    if options.find_batch:
        args.append("--find-batch")
    return args

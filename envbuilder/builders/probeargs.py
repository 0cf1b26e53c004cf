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

Each is a key of `envbuilder.probe.options.ProbeOptions`, whose declarations give the flags and
their order (records.to_argv). They are passed only when the run expects rocm: `--expect cpu` on
a ROCm env (a WSL distro checked on a Linux Docker host) checks no release.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envbuilder.core import records
from envbuilder.core.model import EnvSpec
from envbuilder.probe.options import ProbeOptions
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


#: The release check's keys of ProbeOptions (a ROCm run's expectation).
EXPECTATION_KEYS = ("expect_rocm", "expect_hip", "expect_gfx")


def expectation(env: EnvSpec, expect: str) -> dict[str, Any]:
    """expect_rocm/expect_hip/expect_gfx of a run that expects `expect` (empty: none)."""
    if expect != "rocm" or env.accelerator != "rocm" or not env.rocm:
        return {}
    release = env.release
    # The release the lock resolved `rocm = "7.14"` to (the spec may name a line).
    return {
        "expect_rocm": release.version if release is not None else env.rocm,
        "expect_hip": release.hip if release is not None else None,
        "expect_gfx": expected_gfx(env),
    }


def expectation_args(env: EnvSpec, expect: str) -> list[str]:
    """--expect-rocm/--expect-hip/--expect-gfx of a run that expects `expect`."""
    options = ProbeOptions(level="quick", expect=expect, **expectation(env, expect))
    return records.to_argv(options, EXPECTATION_KEYS)


def probe_options(
    env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]
) -> ProbeOptions:
    """The probe's options for a run: `options`' values of the keys they share (but the
    timeout: where the probe runs it is the target's), --expect defaulting to the env's
    accelerator, a ROCm run's expectation, and `labels`."""
    expect = options.expect or env.accelerator
    shared = {
        k.name: getattr(options, k.name)
        for k in records.fields_of(ProbeOptions)
        if hasattr(options, k.name) and k.name != "timeout_s"
    }
    return ProbeOptions(
        **{**shared, "expect": expect, "labels": dict(labels), **expectation(env, expect)}
    )


def probe_args(env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]) -> list[str]:
    """The probe's command line for `options` and `labels` (in their order), shared by every
    target (probe_options, written as the declarations of ProbeOptions say: records.to_argv;
    --repeat is left out when 1, the probe's default). Where the probe runs, its
    --lock/--json/--timeout are the target's."""
    return records.to_argv(probe_options(env, options, labels))

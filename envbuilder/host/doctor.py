"""Host preflight: what this machine has, what an env needs, and the fix for each gap.

    diagnose(host, env=None, compat=None) -> DoctorReport
    hostfacts.Host.current(project_root)      this machine (real /dev, /proc, commands, docker)
    hostfacts.DoctorReport.to_json() -> dict  validates against schemas/doctor.schema.json

Read-only by design: it runs `rocminfo`, `nvidia-smi`, `wsl --version`, `systeminfo`, `hipInfo`
and reads files; it never changes GPU settings (no `rocm-smi --set-*`), groups or drivers.
Parsing lives in `envbuilder.host.doctor_parsers` (tested on real outputs), the machine and the
findings in `envbuilder.host.hostfacts`, the checks of the host itself in
`envbuilder.host.checks_linux` and `envbuilder.host.checks_windows`; this module holds the checks
of what an env needs and `diagnose`, which runs them all.
"""

from __future__ import annotations

from typing import Any

from envbuilder.core.compat import Compat
from envbuilder.core.compatload import load_compat
from envbuilder.core.model import EnvSpec
from envbuilder.host.checks_linux import (
    check_amd_devices,
    check_disk,
    check_docker,
    check_engine,
    check_hsa_override,
    check_nvidia,
    check_os,
    check_ram,
    check_rocminfo,
    check_wsl_devices,
    check_wsl_runtime,
    gpu_summary,
)
from envbuilder.host.checks_windows import (
    check_hip_sdk,
    check_virtualization,
    check_windows_build,
    check_wsl_version,
)
from envbuilder.host.hostfacts import DoctorReport, GpuFacts, Host, HostFinding
from envbuilder.targets import registry

# --------------------------------------------------------------------------- the env's needs


def check_python(host: Host, env: EnvSpec | None) -> HostFinding:
    if env is None:
        return HostFinding("python", "ok", f"Python {host.python} runs envbuilder")
    wants = {t: env.python_for(t) for t in env.targets if t in venv_targets(host)}
    if not wants:
        return HostFinding(
            "python", "ok", f"env {env.name} brings its own Python in its images ({env.python})"
        )
    have = ".".join(host.python.split(".")[:2])
    missing = [
        f"{t}: {v}"
        for t, v in wants.items()
        if v != have and not host.run(_python_probe(host, v), 10)
    ]
    if not missing:
        return HostFinding(
            "python",
            "ok",
            f"Python for env {env.name}: " + ", ".join(f"{t} {v}" for t, v in wants.items()),
        )
    return HostFinding(
        "python",
        "warn",
        f"env {env.name} needs Python {', '.join(missing)}; this host runs {host.python}",
        fix="uv python install "
        + " ".join(sorted(set(wants.values())))
        + " (uv's interpreter discovery finds it)",
    )


def venv_targets(host: Host) -> tuple[str, ...]:
    """The targets whose venv this host builds with a Python it has (capability `path`, built
    where this host's OS is: windows, or linux for Linux and WSL2)."""
    os_name = "windows" if host.kind == "windows" else "linux"
    return tuple(d.name for d in registry.all() if d.has("path") and os_name in d.capabilities.host)


def _python_probe(host: Host, version: str) -> list[str]:
    """How to ask for a Python X.Y: the py launcher on Windows, pythonX.Y elsewhere."""
    if host.kind == "windows":
        return ["py", f"-{version}", "--version"]
    return [f"python{version}", "--version"]


def check_env_gpu(host: Host, env: EnvSpec, facts: GpuFacts, compat: Compat) -> HostFinding:
    if env.accelerator == "cpu":
        return HostFinding("env-gpu", "ok", f"env {env.name} needs no GPU")
    if env.accelerator == "cuda":
        if facts.nvidia:
            return HostFinding("env-gpu", "ok", f"NVIDIA GPU for env {env.name}")
        return HostFinding(
            "env-gpu",
            "fail",
            f"env {env.name} needs an NVIDIA GPU; none found",
            fix="run it on a host with an NVIDIA GPU and driver (nvidia-smi)",
        )
    named = compat.gpu(env.gpu) if env.gpu else None
    want = env.gfx or (named.gfx if named else None)
    gpu = compat.gpu(want) if want else None
    host_gfx = [g for g, _ in facts.amd]
    if not host_gfx:
        return HostFinding(
            "env-gpu",
            "fail",
            f"env {env.name} needs an AMD GPU ({want or 'any'}); none found on this host",
            fix="run it on a host with that GPU; check the driver and device nodes above",
        )
    if want and want not in host_gfx:
        return HostFinding(
            "env-gpu",
            "fail",
            f"env {env.name} is built for {want}; this host has {', '.join(host_gfx)}",
            fix="set the env's gpu to this host's GPU in "
            "environments.toml (envbuilder check validates it), or use a matching "
            "host",
        )
    return _support_finding(host, env, gpu, want or host_gfx[0], compat)


def _support_finding(host: Host, env: EnvSpec, gpu: Any, gfx: str, compat: Compat) -> HostFinding:
    if gpu is None:
        return HostFinding(
            "env-gpu",
            "warn",
            f"{gfx} is not in the compatibility data",
            fix="it may work with HSA_OVERRIDE_GFX_VERSION; see envbuilder explain "
            "'invalid device function'",
        )
    if unsupported := _host_os_unsupported(host, gpu, gfx):
        return unsupported
    since = gpu.linux_official_since
    if host.kind == "linux" and env.rocm and (since is None or _older(env.rocm, since)):
        return HostFinding(
            "env-gpu",
            "warn",
            f"{gfx} is not officially supported on Linux by ROCm "
            f"{env.rocm} (since: {since or 'never'})",
            fix="use a newer release if "
            "kernels fail (envbuilder explain 'invalid device function')",
            source=gpu.source,
        )
    return HostFinding(
        "env-gpu",
        "ok",
        f"{gfx} is supported by env {env.name} (ROCm {env.rocm}, {host.kind})",
        source=gpu.source,
    )


def _host_os_unsupported(host: Host, gpu: Any, gfx: str) -> HostFinding | None:
    """The failure when AMD's stack for this host's OS (WSL, Windows) does not cover the GPU."""
    if host.kind == "wsl2" and not gpu.wsl:
        return HostFinding(
            "env-gpu",
            "fail",
            f"{gfx} is not supported by AMD's WSL stack",
            fix="use native Linux or the windows target",
            source=gpu.source,
        )
    if host.kind == "windows" and not gpu.windows:
        return HostFinding(
            "env-gpu",
            "fail",
            f"{gfx} is not covered by AMD's Windows PyTorch wheels",
            fix="use native Linux (or WSL2 for RDNA3/RDNA4)",
            source=gpu.source,
        )
    return None


def _older(version: str, than: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False


# --------------------------------------------------------------------------- entry point


def diagnose(host: Host, env: EnvSpec | None = None, compat: Compat | None = None) -> DoctorReport:
    """Run every check that applies to the host kind. Read-only; never raises for a host
    problem (each becomes a finding)."""
    compat = compat or load_compat()
    findings: list[HostFinding] = []
    facts = GpuFacts()
    if host.kind == "windows":
        findings += [check_windows_build(host), check_virtualization(host), check_wsl_version(host)]
        hip = check_hip_sdk(host)
        findings += hip
        amd = tuple((d["gfx"], d["name"]) for f in hip for d in f.details.get("gpus", []))
        facts = GpuFacts(amd)
    else:
        docker = check_docker(host, env)
        findings += [check_os(host), check_ram(host), check_disk(host), docker]
        findings += check_engine(docker)
        if host.kind == "wsl2":
            findings += check_wsl_devices(host)
            findings.append(check_wsl_runtime(host, env, compat))
        else:
            findings.append(check_amd_devices(host))
        rocm_finding, facts = check_rocminfo(host)
        findings.append(rocm_finding)
        nv_finding, nvidia = check_nvidia(host)
        if nv_finding:
            findings.append(nv_finding)
        facts = GpuFacts(facts.amd, nvidia, facts.rocminfo_error)
    findings.append(gpu_summary(facts))
    if (override := check_hsa_override(host)) is not None:
        findings.append(override)
    findings.append(check_python(host, env))
    if env is not None:
        findings.append(check_env_gpu(host, env, facts, compat))
    return DoctorReport(host.kind, env.name if env else None, tuple(findings))


def host_amd_gpus(host: Host) -> tuple[tuple[str, str], ...]:
    """The AMD GPUs doctor finds on `host`, as (gfx, marketing name): rocminfo on Linux and in
    WSL, hipInfo on Windows (empty when the tool is missing or lists none). `envbuilder init`
    starts from these."""
    if host.kind == "windows":
        return tuple(
            (d["gfx"], d["name"]) for f in check_hip_sdk(host) for d in f.details.get("gpus", [])
        )
    return check_rocminfo(host)[1].amd

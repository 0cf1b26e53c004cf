"""doctor's checks of a Linux or WSL host: OS, RAM, disk, the container engine, the AMD and NVIDIA
devices and drivers, the WSL GPU path and ROCm runtime."""

from __future__ import annotations

import platform
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuilder.core.compat import Compat, RocmRelease
from envbuilder.core.model import EnvSpec
from envbuilder.host import doctor_parsers as parse
from envbuilder.host.hostfacts import (
    GIB,
    LOW_DISK_GIB,
    MIN_DISK_GIB,
    MIN_RAM_GIB,
    PREFLIGHT_SOURCE,
    WSL_GPU_SOURCE,
    CommandResult,
    GpuFacts,
    Host,
    HostFinding,
    HostSeverity,
)
from envbuilder.targets import registry


def check_os(host: Host) -> HostFinding:
    rel = parse.parse_os_release(host.read("/etc/os-release") or "")
    kernel = (host.read("/proc/sys/kernel/osrelease") or platform.release()).strip()
    name = rel.get("PRETTY_NAME", "unknown Linux")
    return HostFinding(
        "os",
        "ok",
        f"{name}, kernel {kernel}",
        details={"os": name, "kernel": kernel, "kind": host.kind},
    )


def check_ram(host: Host) -> HostFinding:
    total = parse.parse_meminfo_total(host.read("/proc/meminfo") or "")
    if total is None:
        return HostFinding(
            "ram",
            "warn",
            "cannot read /proc/meminfo",
            fix="check the memory by hand (free -g); 16 GB or more is recommended",
        )
    gib = total / GIB
    if gib >= MIN_RAM_GIB - 0.5:  # "16 GB" machines report a little less than 16 GiB
        return HostFinding("ram", "ok", f"{gib:.1f} GiB", details={"bytes": total})
    fix = "training needs 16-32 GB or more; close other programs or add memory"
    if host.kind == "wsl2":
        fix += "; raise memory= under [wsl2] in %UserProfile%\\.wslconfig, then wsl --shutdown"
    return HostFinding(
        "ram",
        "warn",
        f"{gib:.1f} GiB (less than {MIN_RAM_GIB} GB)",
        fix=fix,
        source=PREFLIGHT_SOURCE,
        details={"bytes": total},
    )


def check_disk(host: Host) -> HostFinding:
    try:
        usage = shutil.disk_usage(host.disk_path)
    except OSError as exc:
        return HostFinding(
            "disk",
            "warn",
            f"cannot read free space of {host.disk_path}: {exc}",
            fix="check free space by hand (df -h)",
        )
    free = usage.free / GIB
    details = {"path": str(host.disk_path), "free_bytes": usage.free}
    summary = f"{free:.0f} GiB free at {host.disk_path}"
    if free >= MIN_DISK_GIB:
        return HostFinding("disk", "ok", summary, details=details)
    fix = (
        f"ROCm images are ~30 GB each and builds need room: make {MIN_DISK_GIB} GB free "
        "(docker system prune removes unused images)"
    )
    sev: HostSeverity = "fail" if free < LOW_DISK_GIB else "warn"
    return HostFinding(
        "disk",
        sev,
        summary + f" (less than {MIN_DISK_GIB} GB)",
        fix=fix,
        source=PREFLIGHT_SOURCE,
        details=details,
    )


def check_docker(host: Host, env: EnvSpec | None) -> HostFinding:
    info = host.docker()
    if isinstance(info, dict):
        product = "podman" if info.get("product") == "podman" else "Docker Engine"
        api = "Docker API" if product == "podman" else "API"
        return HostFinding(
            "docker",
            "ok",
            f"{product} {info['version']} ({api} {info['api']}, {info['os']}) at {info['host']}",
            details=info,
        )
    docker_targets = registry.with_capability("needs_docker")
    needs = [t for t in (env.targets if env else ()) if t in docker_targets]
    why = (
        f"env {env.name}'s {' and '.join(needs)} target(s) need it"
        if env and needs
        else f"the {' and '.join(docker_targets)} targets need it to build"
    )
    fix = (
        "start the engine (CI: .ci/services.sh; a workstation: sudo systemctl start docker) "
        "and make sure your user may use the socket (group docker) or set DOCKER_HOST"
    )
    if host.kind == "wsl2":
        fix += (
            "; inside WSL2 use Docker Engine in the distro (Docker Desktop does not pass /dev/dxg)"
        )
    return HostFinding("docker", "warn", f"Docker engine not reachable ({why}): {info}", fix=fix)


def check_engine(docker: HostFinding) -> list[HostFinding]:
    """What the engine of a reachable `docker` finding is (product, version, API version, image
    store, builder, rootless: envbuilder.image.engine_values.EngineInfo), as an info line; none when
    the engine was not reached."""
    detected = docker.details.get("engine")
    if not isinstance(detected, Mapping):
        return []
    return [HostFinding("engine", "ok", f"engine: {detected['summary']}", details=detected)]


def check_amd_devices(host: Host) -> HostFinding:
    """Native Linux: /dev/kfd and /dev/dri render nodes, their group, the user's groups."""
    kfd = host.path("/dev/kfd")
    renders = sorted(p.name for p in host.path("/dev/dri").glob("renderD*"))
    if not kfd.exists():
        return HostFinding(
            "amd-devices",
            "ok",
            "no /dev/kfd: no AMD GPU driver on this host (fine for cpu envs)",
            details={"kfd": False, "render_nodes": renders},
        )
    group = _group_of(kfd)
    details = {
        "kfd": True,
        "render_nodes": renders,
        "kfd_group": group,
        "user_groups": list(host.user_groups),
    }
    if can_read_write(host, kfd):
        return HostFinding(
            "amd-devices",
            "ok",
            f"/dev/kfd usable by {host.user}; render nodes: {', '.join(renders) or 'none'}",
            details=details,
        )
    return HostFinding(
        "amd-devices",
        "fail",
        f"/dev/kfd is owned by group {group}, and {host.user} (groups: "
        f"{', '.join(host.user_groups) or 'none'}) cannot open it read-write",
        fix=f"sudo usermod -aG {group or 'render'},video {host.user}; then log out and in",
        source="https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/"
        "prerequisites.html",
        details=details,
    )


def can_read_write(host: Host, path: Path) -> bool:
    """Whether host.user may open `path` read-write, from its mode bits and the user's groups
    (what the kernel checks for a device node; root always may)."""
    if host.uid == 0:
        return True
    st = path.stat()
    if st.st_mode & 0o006 == 0o006:
        return True
    if _group_of(path) in host.user_groups and st.st_mode & 0o060 == 0o060:
        return True
    return st.st_uid == host.uid and st.st_mode & 0o600 == 0o600


def _group_of(path: Path) -> str | None:
    try:
        import grp  # POSIX only

        return grp.getgrgid(path.stat().st_gid).gr_name
    except (ImportError, KeyError, OSError):
        return None


def check_rocminfo(host: Host) -> tuple[HostFinding, GpuFacts]:
    res = host.run(["rocminfo"], 60) or host.run([str(host.path("/opt/rocm/bin/rocminfo"))], 60)
    if res is None:
        return _rocminfo_not_installed(host), GpuFacts()
    info = parse.parse_rocminfo(res.text)
    amd = tuple((g.gfx or g.name, g.marketing_name) for g in info.gpus)
    if info.error or (res.returncode != 0 and not amd):
        return _rocminfo_failed(res, info, amd)
    if not amd:
        return (
            HostFinding(
                "rocminfo",
                "warn",
                "rocminfo lists no GPU agent",
                fix=_explain_fix(res.text)
                or "check the driver (dmesg | grep amdgpu) and that the GPU is supported",
                details={"wsl": info.wsl},
            ),
            GpuFacts(),
        )
    names = ", ".join(f"{gfx} ({name})" for gfx, name in amd)
    return (
        HostFinding(
            "rocminfo",
            "ok",
            f"AMD GPU(s): {names}",
            details={"gpus": [{"gfx": g, "name": n} for g, n in amd], "wsl": info.wsl},
        ),
        GpuFacts(amd),
    )


def _rocminfo_not_installed(host: Host) -> HostFinding:
    """A warning only where the kernel shows an AMD GPU: elsewhere rocminfo has nothing to list."""
    sev: HostSeverity = "warn" if _has_amd_node(host) else "ok"
    return HostFinding(
        "rocminfo",
        sev,
        "rocminfo not installed",
        fix=(
            "install ROCm's rocminfo to list the GPU's gfx target (the images bring their own ROCm)"
        )
        if sev == "warn"
        else None,
    )


def _rocminfo_failed(
    res: CommandResult, info: parse.RocmInfo, amd: tuple[tuple[str, str], ...]
) -> tuple[HostFinding, GpuFacts]:
    lines = res.text.strip().splitlines()
    err = info.error or (lines[-1] if lines else f"exit code {res.returncode}")
    return (
        HostFinding(
            "rocminfo",
            "fail",
            f"rocminfo failed: {err}",
            fix=_explain_fix(res.text) or "see `envbuilder explain` with the message",
            details={"wsl": info.wsl},
        ),
        GpuFacts(amd, rocminfo_error=err),
    )


def _has_amd_node(host: Host) -> bool:
    return host.path("/dev/kfd").exists() or host.path("/dev/dxg").exists()


def _explain_fix(text: str) -> str | None:
    from envbuilder.host.explain import match

    found = match(text)
    return f"{found.fix} (envbuilder explain: {found.title})" if found else None


def check_nvidia(host: Host) -> tuple[HostFinding | None, tuple[parse.NvidiaGpu, ...]]:
    res = host.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"], 30
    )
    if res is None:
        return None, ()  # not present: nothing to report
    gpus = tuple(parse.parse_nvidia_smi_csv(res.text))
    if res.returncode != 0 or not gpus:
        return (
            HostFinding(
                "nvidia-smi",
                "warn",
                f"nvidia-smi found but lists no GPU: {res.text.strip()[:200]}",
                fix="check the NVIDIA driver (nvidia-smi)",
            ),
            (),
        )
    names = ", ".join(f"{g.name} (driver {g.driver}, {g.memory_mib} MiB)" for g in gpus)
    return HostFinding(
        "nvidia-smi", "ok", f"NVIDIA GPU(s): {names}", details={"gpus": [g.__dict__ for g in gpus]}
    ), gpus


def gpu_summary(facts: GpuFacts) -> HostFinding:
    if facts.amd or facts.nvidia:
        n = len(facts.amd) + len(facts.nvidia)
        return HostFinding("gpu", "ok", f"{n} GPU(s) found")
    return HostFinding(
        "gpu",
        "warn",
        "no GPU found: only the cpu environments can be validated here",
        fix="run ROCm environments on a host with a supported AMD GPU (see "
        "`envbuilder doctor --env NAME` there); the cpu env works anywhere",
    )


def check_wsl_devices(host: Host) -> list[HostFinding]:
    """Inside WSL2: /dev/dxg and libdxcore.so (the GPU path through the Windows driver)."""
    out = []
    if host.path("/dev/dxg").exists():
        out.append(HostFinding("wsl-dxg", "ok", "/dev/dxg present"))
    else:
        out.append(
            HostFinding(
                "wsl-dxg",
                "fail",
                "/dev/dxg missing: WSL2 exposes no GPU",
                fix="update Windows 11, WSL (wsl --update) and the Adrenalin "
                "driver; "
                "check [gpu] enabled is not false in /etc/wsl.conf; wsl --shutdown",
                source=WSL_GPU_SOURCE,
            )
        )
    lib = host.path("/usr/lib/wsl/lib/libdxcore.so")
    if lib.exists():
        out.append(HostFinding("wsl-libdxcore", "ok", f"{lib} present"))
    else:
        out.append(
            HostFinding(
                "wsl-libdxcore",
                "fail",
                "/usr/lib/wsl/lib/libdxcore.so missing",
                fix="the Windows GPU driver mounts it: update the driver and WSL, "
                "then "
                "wsl --shutdown",
                source=WSL_GPU_SOURCE,
            )
        )
    return out


def installed_rocm(host: Host) -> str | None:
    text = host.read("/opt/rocm/.info/version")
    return text.strip().split("-")[0] if text else None


def check_wsl_runtime(host: Host, env: EnvSpec | None, compat: Compat) -> HostFinding:
    """The ROCm WSL runtime for the release: hsa-runtime-rocr4wsl (legacy) or librocdxg."""
    version = env.rocm if env and env.rocm else installed_rocm(host)
    release = compat.rocm(version) if version else None
    has_legacy = _dpkg_installed(host, "hsa-runtime-rocr4wsl-amdgpu")
    has_dxg = any(
        host.path(p).exists() for p in ("/opt/rocm/lib/librocdxg.so", "/usr/lib/librocdxg.so")
    )
    details = {"rocm": version, "legacy_runtime": has_legacy, "librocdxg": has_dxg}
    if version is None or release is None or release.wsl_stack is None:
        return _wsl_release_finding(version, release, compat, details)
    # With an env, a runtime missing here only warns: envbuilder's wsl2 distro brings its own.
    missing: HostSeverity = "warn" if env else "fail"
    if release.wsl_stack == "legacy":
        return _wsl_legacy_finding(version, release, has_legacy, missing, details)
    return _wsl_dxg_finding(host, version, release, has_dxg, missing, details)


def _wsl_release_finding(
    version: str | None, release: RocmRelease | None, compat: Compat, details: Mapping[str, Any]
) -> HostFinding:
    """No ROCm, a release envbuilder does not know, or one without a WSL runtime."""
    if version is None:
        return HostFinding(
            "wsl-rocm-runtime",
            "ok",
            "no ROCm installed in this distro (envbuilder's wsl2 distros bring their own)",
            details=details,
        )
    if release is None:
        return HostFinding(
            "wsl-rocm-runtime",
            "warn",
            f"ROCm {version} is not in the compatibility data",
            fix="use a release envbuilder knows (envbuilder check lists them)",
            details=details,
        )
    near = ", ".join(compat.nearest_wsl_releases(version)[:3])
    return HostFinding(
        "wsl-rocm-runtime",
        "fail",
        f"ROCm {version} ships no WSL runtime",
        fix=f"use a release with one: {near}",
        source=release.source,
        details=details,
    )


def _wsl_legacy_finding(
    version: str,
    release: RocmRelease,
    has_legacy: bool,
    missing: HostSeverity,
    details: Mapping[str, Any],
) -> HostFinding:
    if has_legacy:
        return HostFinding(
            "wsl-rocm-runtime",
            "ok",
            f"ROCm {version}: hsa-runtime-rocr4wsl-amdgpu installed",
            details=details,
        )
    return HostFinding(
        "wsl-rocm-runtime",
        missing,
        f"ROCm {version} needs hsa-runtime-rocr4wsl-amdgpu, not installed here",
        fix="amdgpu-install -y --usecase=wsl,rocm --no-dkms (or use "
        "envbuilder's "
        "wsl2 distro, which has it)",
        source=release.source,
        details=details,
    )


def _wsl_dxg_finding(
    host: Host,
    version: str,
    release: RocmRelease,
    has_dxg: bool,
    missing: HostSeverity,
    details: Mapping[str, Any],
) -> HostFinding:
    dxg_env = host.environ.get("HSA_ENABLE_DXG_DETECTION") == "1"
    if has_dxg and dxg_env:
        return HostFinding(
            "wsl-rocm-runtime",
            "ok",
            f"ROCm {version}: librocdxg with HSA_ENABLE_DXG_DETECTION=1",
            details=details,
        )
    return HostFinding(
        "wsl-rocm-runtime",
        missing,
        f"ROCm {version} uses librocdxg: "
        f"{'present' if has_dxg else 'missing'}, HSA_ENABLE_DXG_DETECTION="
        f"{host.environ.get('HSA_ENABLE_DXG_DETECTION', '(unset)')}",
        fix="install librocdxg and export HSA_ENABLE_DXG_DETECTION=1 (Adrenalin "
        "26.2.2+); envbuilder's wsl2 distro sets both",
        source=release.source,
        details=details,
    )


def _dpkg_installed(host: Host, package: str) -> bool:
    status = host.read("/var/lib/dpkg/status") or ""
    block = f"Package: {package}\n"
    i = status.find(block)
    return i >= 0 and "Status: install ok installed" in status[i : i + 600]


def check_hsa_override(host: Host) -> HostFinding | None:
    if "HSA_OVERRIDE_GFX_VERSION" not in host.environ:
        return None
    value = host.environ["HSA_OVERRIDE_GFX_VERSION"]
    if not value.strip():
        return HostFinding(
            "hsa-override",
            "fail",
            "HSA_OVERRIDE_GFX_VERSION is set but empty",
            fix="unset it: an empty value breaks GPU detection",
            source="envbuilder's own check: an empty value is not a gfx version",
        )
    return HostFinding(
        "hsa-override",
        "warn",
        f"HSA_OVERRIDE_GFX_VERSION={value} is set",
        fix="only GPUs missing from the wheel need it (10.3.0 for gfx1031/1032, "
        "11.0.0 "
        "for gfx1101-1103); unset it for GPUs the wheel supports such as gfx1100",
        source="https://github.com/ROCm/Tensile/issues/1907",
    )

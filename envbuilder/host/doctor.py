"""Host preflight: what this machine has, what an env needs, and the fix for each gap.

    diagnose(host, env=None, compat=None) -> DoctorReport
    Host.current(project_root) -> Host        this machine (real /dev, /proc, commands, docker)
    DoctorReport.to_json() -> dict            validates against schemas/doctor.schema.json

Read-only by design: it runs `rocminfo`, `nvidia-smi`, `wsl --version`, `systeminfo`, `hipInfo`
and reads files; it never changes GPU settings (no `rocm-smi --set-*`), groups or drivers.
Parsing lives in `envbuilder.host.doctor_parsers` (tested on real outputs).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envbuilder import __version__
from envbuilder.core.compat import Compat, RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.model import EnvSpec
from envbuilder.host import doctor_parsers as parse
from envbuilder.targets import registry

HostSeverity = Literal["ok", "warn", "fail"]
#: The OS a host runs (doctor's checks differ per OS). Not compat.HostKind: what a host hands
#: to a container (native-rocm, wsl2-legacy, ...).
HostOS = Literal["linux", "wsl2", "windows"]
SEVERITY_ORDER: dict[HostSeverity, int] = {"ok": 0, "warn": 1, "fail": 2}
GIB = 1024**3
#: Where the RAM, disk and Windows-build thresholds come from: the checks hand-written ROCm
#: setup guides make, which envbuilder replaces; AMD publishes no such minimum.
PREFLIGHT_SOURCE = "envbuilder's own preflight threshold (as ROCm setup guides check), not AMD's"
#: WSL's GPU path: /dev/dxg and the driver's libdxcore.so (what AMD's container flags pass on).
WSL_GPU_SOURCE = (
    "ROCm/librocdxg README @021a477ae052 ('Container Launch - WSL-Specific Flags': "
    "--device /dev/dxg, /usr/lib/wsl/lib/libdxcore.so)"
)
MIN_RAM_GIB = 16  # what hand-written ROCm setup guides ask for ("16-32 GB+"); AMD states none
MIN_DISK_GIB = 100  # the guides' 100 GB; a ROCm PyTorch image alone is ~30 GB
LOW_DISK_GIB = 10
MIN_WINDOWS_BUILD = 22621  # Windows 11 22H2
MIN_WSL_FOR_FILE_INSTALL = (2, 4, 4)  # `wsl --install --from-file` of a .wsl


@dataclass(frozen=True)
class HostFinding:
    """One result: `check` is a stable id, `fix` is set for every warn/fail."""

    check: str
    severity: HostSeverity
    summary: str
    fix: str | None = None
    source: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "summary": self.summary,
            "fix": self.fix,
            "source": self.source,
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return parse.decode_console(self.stdout) + parse.decode_console(self.stderr)


#: Runs argv with a timeout; None when the program is not installed or timed out.
Runner = Callable[[Sequence[str], float], CommandResult | None]


def run_command(argv: Sequence[str], timeout: float) -> CommandResult | None:
    """The real runner: no shell, bounded time, never raises for a missing tool."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def docker_engine_info() -> dict[str, Any] | str:
    """{'version', 'api', 'os', 'host', 'product', 'engine'} from the engine ('engine': what
    envbuilder.image.engine.engine_info detects, with its one-line 'summary'), or why it cannot
    be reached."""
    from envbuilder.core.errors import EngineError
    from envbuilder.image import engine

    try:
        client = engine.connect(timeout_s=5)
        try:
            found = engine.engine_info(client)
        finally:
            engine.disconnect(client)
    except EngineError as exc:
        return str(exc).splitlines()[0][:300]
    return {
        "product": found.product,
        "version": found.version,
        "api": found.api_version,
        "os": f"{found.os}/{found.arch}",
        "host": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        "engine": {**found.as_dict(), "summary": found.summary()},
    }


@dataclass(frozen=True)
class Host:
    """Everything doctor looks at, so tests can point it at a prepared tree (WSL/Windows)."""

    kind: HostOS
    root: Path  # filesystem root for /dev, /proc, /etc, /opt, /usr/lib/wsl
    environ: Mapping[str, str]
    run: Runner
    docker: Callable[[], dict[str, Any] | str]
    disk_path: Path  # where outputs and images go (the project folder)
    python: str  # "3.11.2", the interpreter running envbuilder
    user_groups: tuple[str, ...]  # names of the current user's groups
    user: str
    uid: int

    @classmethod
    def current(cls, disk_path: Path) -> Host:
        """This machine, for real."""
        return cls(
            kind=detect_kind(Path("/"), os.environ, sys.platform),
            root=Path("/"),
            environ=dict(os.environ),
            run=run_command,
            docker=docker_engine_info,
            disk_path=disk_path,
            python=platform.python_version(),
            user_groups=_groups(),
            user=_user(),
            uid=os.geteuid() if hasattr(os, "geteuid") else -1,
        )

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def read(self, p: str) -> str | None:
        try:
            return self.path(p).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None


def _groups() -> tuple[str, ...]:
    try:
        import grp  # POSIX only
    except ImportError:
        return ()
    names = []
    for gid in sorted(set(os.getgroups()) | {os.getegid()}):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return tuple(names)


def _user() -> str:
    try:
        import pwd  # POSIX only

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return os.environ.get("USER", "?")


def detect_kind(root: Path, environ: Mapping[str, str], sys_platform: str) -> HostOS:
    """windows, wsl2 (a Linux distro inside WSL) or linux."""
    if sys_platform == "win32":
        return "windows"
    osrelease = ""
    with contextlib.suppress(OSError):
        osrelease = (root / "proc/sys/kernel/osrelease").read_text().lower()
    if (
        "microsoft" in osrelease
        or "WSL_DISTRO_NAME" in environ
        or (root / "proc/sys/fs/binfmt_misc/WSLInterop").exists()
    ):
        return "wsl2"
    return "linux"


@dataclass(frozen=True)
class DoctorReport:
    host_kind: HostOS
    env: str | None
    findings: tuple[HostFinding, ...]

    @property
    def status(self) -> HostSeverity:
        worst: HostSeverity = "ok"
        for f in self.findings:
            if SEVERITY_ORDER[f.severity] > SEVERITY_ORDER[worst]:
                worst = f.severity
        return worst

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "tool": "envbuilder-doctor",
            "envbuilder_version": __version__,
            "host": {"kind": self.host_kind, "platform": sys.platform},
            "env": self.env,
            "status": self.status,
            "findings": [f.to_json() for f in self.findings],
        }


# --------------------------------------------------------------------------- GPU facts


@dataclass(frozen=True)
class GpuFacts:
    """What the host's tools say about GPUs."""

    amd: tuple[tuple[str, str], ...] = ()  # (gfx, marketing name)
    nvidia: tuple[parse.NvidiaGpu, ...] = ()
    rocminfo_error: str | None = None


# --------------------------------------------------------------------------- Linux / WSL checks


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


# --------------------------------------------------------------------------- Windows checks


def check_windows_build(host: Host) -> HostFinding:
    build = None
    res = host.run(["cmd", "/c", "ver"], 10)
    if res is not None:
        build = parse.parse_windows_build(res.text)
    if build is None:
        return HostFinding(
            "windows-build",
            "warn",
            "cannot read the Windows build (cmd /c ver)",
            fix="winver shows it; Windows 11 22H2 (build 22621) or later is needed",
        )
    if build >= MIN_WINDOWS_BUILD:
        return HostFinding(
            "windows-build", "ok", f"Windows build {build}", details={"build": build}
        )
    return HostFinding(
        "windows-build",
        "fail",
        f"Windows build {build} is older than {MIN_WINDOWS_BUILD} (Windows 11 22H2)",
        fix="update to Windows 11 22H2 or later (AMD's WSL and HIP SDK 7.x need it)",
        source=PREFLIGHT_SOURCE,
        details={"build": build},
    )


def check_virtualization(host: Host) -> HostFinding:
    res = host.run(["systeminfo"], 60)
    on = parse.parse_systeminfo_virtualization(res.text) if res else None
    if on is None:
        return HostFinding(
            "virtualization",
            "warn",
            "cannot tell whether virtualization is on",
            fix="Task Manager > Performance > CPU shows 'Virtualization: Enabled'",
        )
    if on:
        return HostFinding("virtualization", "ok", "virtualization enabled (or a hypervisor runs)")
    return HostFinding(
        "virtualization",
        "fail",
        "virtualization is disabled in the firmware",
        fix="enable SVM (AMD) / VT-x (Intel) in the BIOS/UEFI setup; WSL2 needs it",
    )


def check_wsl_version(host: Host) -> HostFinding:
    res = host.run(["wsl", "--version"], 30)
    version = parse.parse_wsl_version(res.stdout) if res else None
    if version is None:
        return HostFinding(
            "wsl-version",
            "warn",
            "wsl --version gave no version (WSL missing or the old inbox WSL)",
            fix="wsl --install (or wsl --update) from an administrator prompt",
        )
    details = {"wsl": version.wsl, "kernel": version.kernel, "windows": version.windows}
    if version.wsl_tuple >= MIN_WSL_FOR_FILE_INSTALL:
        return HostFinding(
            "wsl-version", "ok", f"WSL {version.wsl}, kernel {version.kernel}", details=details
        )
    return HostFinding(
        "wsl-version",
        "warn",
        f"WSL {version.wsl} is older than 2.4.4",
        fix="wsl --update (envbuilder's .wsl distros install with "
        "wsl --install --from-file, WSL 2.4.4+)",
        details=details,
    )


def check_hip_sdk(host: Host) -> list[HostFinding]:
    hip = host.environ.get("HIP_PATH")
    if not hip:
        return [
            HostFinding(
                "hip-path",
                "warn",
                "HIP_PATH is not set",
                fix="install AMD's HIP SDK (it sets HIP_PATH, usually "
                "C:\\Program Files\\AMD\\ROCm\\<major.minor>\\); needed for the "
                "windows "
                "target's hipInfo check, not by the PyTorch wheels themselves",
            )
        ]
    out = [HostFinding("hip-path", "ok", f"HIP_PATH={hip}")]
    res = host.run([str(Path(hip) / "bin" / "hipInfo.exe")], 60)
    devices = parse.parse_hipinfo(res.text) if res else []
    if not devices:
        out.append(
            HostFinding(
                "hipinfo",
                "warn",
                "hipInfo lists no GPU",
                fix="update the Adrenalin driver; disable the iGPU if only it shows",
            )
        )
    else:
        names = ", ".join(f"{d.gfx} ({d.name})" for d in devices)
        out.append(
            HostFinding(
                "hipinfo",
                "ok",
                f"HIP device(s): {names}",
                details={"gpus": [d.__dict__ for d in devices]},
            )
        )
    return out


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

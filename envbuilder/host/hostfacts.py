"""This machine as doctor reads it (Host: its files, environment and commands; the OS it runs) and
what doctor says about it (HostFinding, DoctorReport, GpuFacts), with the thresholds the checks
hold it to."""

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
from envbuilder.host import doctor_parsers as parse

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


@dataclass(frozen=True)
class GpuFacts:
    """What the host's tools say about GPUs."""

    amd: tuple[tuple[str, str], ...] = ()  # (gfx, marketing name)
    nvidia: tuple[parse.NvidiaGpu, ...] = ()
    rocminfo_error: str | None = None

"""Parsers for the command outputs `envbuilder doctor` reads. Pure functions on text, so each is
tested on real published outputs (tests/data/doctor/, sources in its SOURCES.md).

    parse_rocminfo(text) -> RocmInfo
    parse_nvidia_smi_csv(text) -> list[NvidiaGpu]     `nvidia-smi --query-gpu=... --format=csv`
    parse_wsl_version(raw) -> WslVersion | None        `wsl --version` (UTF-16 or UTF-8, any locale)
    parse_windows_build(text) -> int | None            `ver`, `wsl --version`'s Windows line, ...
    parse_systeminfo_virtualization(text) -> bool | None
    parse_hipinfo(text) -> list[HipDevice]             Windows HIP SDK `hipInfo.exe`
    parse_os_release(text) -> dict[str, str]
    parse_meminfo_total(text) -> int | None            bytes, from /proc/meminfo
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RocmAgent:
    name: str  # "gfx1100" for GPUs, the CPU model for CPUs
    marketing_name: str
    device_type: str  # "GPU" / "CPU"

    @property
    def gfx(self) -> str | None:
        """The gfx target of a GPU agent ("gfx1100"), without feature suffixes."""
        m = re.match(r"(gfx[0-9a-f]+)", self.name)
        return m.group(1) if m and self.device_type == "GPU" else None


@dataclass(frozen=True)
class RocmInfo:
    wsl: bool  # "WSL environment detected."
    agents: tuple[RocmAgent, ...]
    error: str | None  # the failure line, e.g. "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES..."
    kfd_loaded: bool | None  # "ROCk module is loaded" / "is NOT loaded"; None if not said

    @property
    def gpus(self) -> tuple[RocmAgent, ...]:
        return tuple(a for a in self.agents if a.device_type == "GPU")


_AGENT_FIELD = re.compile(r"^\s{2}(Name|Marketing Name|Device Type):\s*(.*?)\s*$")


def parse_rocminfo(text: str) -> RocmInfo:
    """Agents (name, marketing name, device type) from rocminfo's 'HSA Agents' section, plus the
    WSL banner, the kernel-driver banner and an HSA error line if any."""
    agents: list[RocmAgent] = []
    current: dict[str, str] = {}

    def flush() -> None:
        if current.get("Name"):
            agents.append(
                RocmAgent(
                    current["Name"],
                    current.get("Marketing Name", ""),
                    current.get("Device Type", ""),
                )
            )

    for line in text.splitlines():
        if re.match(r"^\s*Agent \d+\s*$", line):
            flush()
            current = {}
            continue
        m = _AGENT_FIELD.match(line)  # exactly two spaces: nested "Name" lines are deeper
        if m and m.group(1) not in current:
            current[m.group(1)] = m.group(2)
    flush()
    error = next((ln.strip() for ln in text.splitlines() if "Call returned" in ln), None)
    kfd: bool | None = None
    if re.search(r"ROCk module is (NOT loaded|NOT live)", text):
        kfd = False
    elif re.search(r"ROCk module (is loaded|version)", text):
        kfd = True
    if "ROCR: unsupported GPU" in text:
        error = f"ROCR: unsupported GPU; {error}" if error else "ROCR: unsupported GPU"
    return RocmInfo("WSL environment detected" in text, tuple(agents), error, kfd)


@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    driver: str
    memory_mib: int | None


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """Rows of `nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv` (header
    required; other columns may be present in any order)."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    if "name" not in header:
        return []
    gpus = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        rec = dict(zip(header, (c.strip() for c in row), strict=True))
        mem = re.match(r"(\d+)", rec.get("memory.total", ""))
        gpus.append(
            NvidiaGpu(
                rec["name"], rec.get("driver_version", ""), int(mem.group(1)) if mem else None
            )
        )
    return gpus


@dataclass(frozen=True)
class WslVersion:
    wsl: str  # "2.6.1.0"
    kernel: str | None
    windows: str | None  # "10.0.26100.6584"

    @property
    def wsl_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.wsl))

    @property
    def windows_build(self) -> int | None:
        return parse_windows_build(self.windows or "")


def decode_console(raw: bytes | str) -> str:
    """wsl.exe writes UTF-16LE to a pipe; other tools write UTF-8 or the OEM code page."""
    if isinstance(raw, str):
        return raw.replace("\x00", "")
    if raw.startswith(b"\xff\xfe") or (len(raw) > 1 and raw[1:2] == b"\x00"):
        return raw.decode("utf-16-le", errors="replace").lstrip("\ufeff")
    return raw.decode("utf-8", errors="replace")


def parse_wsl_version(raw: bytes | str) -> WslVersion | None:
    """`wsl --version`: seven 'label: value' lines in a fixed order (WSL, kernel, WSLg, MSRDC,
    Direct3D, DXCore, Windows). The labels are translated ("WSL-Version", "Kernelversion"), so
    the values are taken by position. None when the output is not that (e.g. an old wsl.exe
    printing its help text)."""
    values = []
    for line in decode_console(raw).splitlines():
        if ":" in line:
            values.append(line.split(":", 1)[1].strip())
    if len(values) < 7 or not re.fullmatch(r"\d+(\.\d+)+", values[0]):
        return None
    return WslVersion(values[0], values[1] or None, values[6] or None)


def parse_windows_build(text: str) -> int | None:
    """The build number from 'Microsoft Windows [Version 10.0.22631.4317]' or '10.0.22631'."""
    m = re.search(r"\b10\.0\.(\d{4,6})\b", text)
    return int(m.group(1)) if m else None


def parse_systeminfo_virtualization(text: str) -> bool | None:
    """From `systeminfo`: True when a hypervisor already runs or firmware virtualization is on,
    False when it is off, None when the output does not say (other locales)."""
    if "A hypervisor has been detected" in text:
        return True
    m = re.search(r"Virtualization Enabled In Firmware:\s*(Yes|No)", text, re.IGNORECASE)
    if m:
        return m.group(1).lower() == "yes"
    return None


@dataclass(frozen=True)
class HipDevice:
    index: int
    name: str
    gfx: str | None  # gcnArchName without feature flags
    total_mem_gb: float | None


def parse_hipinfo(text: str) -> list[HipDevice]:
    """Devices from hipInfo's 'device#' blocks."""
    devices: list[HipDevice] = []
    block: dict[str, str] = {}

    def flush() -> None:
        if "device#" in block:
            arch = re.match(r"(gfx[0-9a-f]+)", block.get("gcnArchName", ""))
            mem = re.match(r"([\d.]+)\s*GB", block.get("totalGlobalMem", ""))
            devices.append(
                HipDevice(
                    int(block["device#"]),
                    block.get("Name", ""),
                    arch.group(1) if arch else None,
                    float(mem.group(1)) if mem else None,
                )
            )

    for line in text.splitlines():
        m = re.match(r"^(device#|Name:|gcnArchName:|totalGlobalMem:)\s*(.*?)\s*$", line)
        if not m:
            continue
        key = m.group(1).rstrip(":")
        if key == "device#":
            flush()
            block = {}
        block.setdefault(key, m.group(2))
    flush()
    return devices


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value pairs of /etc/os-release, quotes removed."""
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def parse_meminfo_total(text: str) -> int | None:
    """MemTotal from /proc/meminfo, in bytes."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None

"""doctor's checks of a Windows host: its build, virtualization, WSL and the HIP SDK."""

from __future__ import annotations

from pathlib import Path

from envbuilder.host import doctor_parsers as parse
from envbuilder.host.hostfacts import (
    MIN_WINDOWS_BUILD,
    MIN_WSL_FOR_FILE_INSTALL,
    PREFLIGHT_SOURCE,
    Host,
    HostFinding,
)


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

"""doctor's parsers on real published command outputs (tests/data/doctor/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.host import doctor_parsers as parse

DATA = Path(__file__).parents[1] / "data" / "doctor"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_rocminfo_native_gpu() -> None:
    info = parse.parse_rocminfo(text("rocminfo-native-rx7900xtx.txt"))
    assert not info.wsl and info.error is None and info.kfd_loaded is True
    assert [(a.name, a.device_type) for a in info.agents] == [
        ("AMD Ryzen 9 5900X 12-Core Processor", "CPU"),
        ("gfx1100", "GPU"),
    ]
    (gpu,) = info.gpus
    assert gpu.gfx == "gfx1100" and gpu.marketing_name == "Radeon RX 7900 XTX"


def test_rocminfo_wsl_without_gpu() -> None:
    info = parse.parse_rocminfo(text("rocminfo-wsl-cpu-only.txt"))
    assert info.wsl and info.gpus == () and len(info.agents) == 1 and info.error is None


def test_rocminfo_wsl_unsupported_gpu() -> None:
    info = parse.parse_rocminfo(text("rocminfo-wsl-unsupported-gpu.txt"))
    assert info.wsl and info.agents == ()
    assert info.error is not None and "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in info.error
    assert "unsupported GPU" in info.error


def test_rocminfo_kernel_driver_not_loaded() -> None:
    info = parse.parse_rocminfo(text("rocminfo-rock-not-loaded.txt"))
    assert info.kfd_loaded is False and info.agents == () and info.error


def test_hipinfo() -> None:
    (dev,) = parse.parse_hipinfo(text("hipinfo-rx7900xtx.txt"))
    assert dev == parse.HipDevice(0, "AMD Radeon RX 7900 XTX", "gfx1100", 23.98)


def test_hipinfo_strips_feature_flags_and_reads_several_devices() -> None:
    one = text("hipinfo-rx7900xtx.txt").replace("gfx1100", "gfx906:sramecc+:xnack-")
    two = one + one.replace("device#                           0", "device#                  1")
    devs = parse.parse_hipinfo(two)
    assert [(d.index, d.gfx) for d in devs] == [(0, "gfx906"), (1, "gfx906")]
    assert parse.parse_hipinfo("No devices found.\n") == []


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
def test_wsl_version(encoding: str) -> None:
    raw = text("wsl-version-2.6.1.txt").replace("\n", "\r\n").encode(encoding)
    v = parse.parse_wsl_version(raw)
    assert v is not None
    assert (v.wsl, v.kernel, v.windows) == ("2.6.1.0", "6.6.87.2-1", "10.0.26100.6584")
    assert v.wsl_tuple >= (2, 4, 4) and v.windows_build == 26100


def test_wsl_version_windows10_and_translated_labels() -> None:
    old = parse.parse_wsl_version(text("wsl-version-1.2.5-win10.txt").encode("utf-16-le"))
    assert old is not None and old.wsl_tuple == (1, 2, 5, 0) and old.windows_build == 19045
    de = parse.parse_wsl_version(text("wsl-version-1.0.3-de.txt"))
    assert de is not None and de.wsl == "1.0.3.0" and de.windows_build == 22621


def test_wsl_version_rejects_help_text() -> None:
    # The inbox wsl.exe of old Windows 10 prints its usage for --version.
    assert parse.parse_wsl_version("Usage: wsl.exe [Argument] [Options...] [CommandLine]\n") is None


def test_windows_build() -> None:
    assert parse.parse_windows_build(text("ver-22621.txt")) == 22621
    assert parse.parse_windows_build(text("ver-16193.txt")) == 16193
    assert parse.parse_windows_build("nothing here") is None


def test_systeminfo_virtualization() -> None:
    enabled = text("systeminfo-hyperv-enabled.txt")
    assert parse.parse_systeminfo_virtualization(enabled) is True
    assert (
        parse.parse_systeminfo_virtualization(enabled.replace("Firmware: Yes", "Firmware: No"))
        is False
    )
    assert parse.parse_systeminfo_virtualization(text("systeminfo-hypervisor-running.txt")) is True
    assert parse.parse_systeminfo_virtualization("Host Name: PC\n") is None


def test_nvidia_smi_csv() -> None:
    gpus = parse.parse_nvidia_smi_csv(text("nvidia-smi-query.csv"))
    assert gpus == [parse.NvidiaGpu("NVIDIA L40", "580.126.09", 46068)] * 2
    assert parse.parse_nvidia_smi_csv("") == []
    assert parse.parse_nvidia_smi_csv("No devices were found\n") == []


def test_os_release_and_meminfo_of_this_machine() -> None:
    # The Linux probes run for real here.
    rel = parse.parse_os_release(Path("/etc/os-release").read_text())
    assert rel.get("PRETTY_NAME")
    total = parse.parse_meminfo_total(Path("/proc/meminfo").read_text())
    assert total is not None and total > 256 * 1024**2

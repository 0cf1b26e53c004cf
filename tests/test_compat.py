"""The shipped compatibility data: loaded strictly, every fact of the reference present."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

from envbuilder import compat as compat_mod
from envbuilder.compat import HOST_KINDS, _Reader, load_compat
from envbuilder.errors import CompatDataError

C = load_compat()

REFERENCE_GPUS = {
    "MI355X": "gfx950", "MI350X": "gfx950", "MI325X": "gfx942", "MI300X": "gfx942",
    "MI300A": "gfx942", "MI250X": "gfx90a", "MI250": "gfx90a", "MI210": "gfx90a",
    "MI100": "gfx908", "RX 9070 XT": "gfx1201", "RX 9070": "gfx1201", "RX 9070 GRE": "gfx1201",
    "AI PRO R9700": "gfx1201", "RX 9060 XT": "gfx1200", "RX 9060": "gfx1200",
    "RX 7900 XTX": "gfx1100", "RX 7900 XT": "gfx1100", "RX 7900 GRE": "gfx1100",
    "PRO W7900": "gfx1100", "W7800": "gfx1100", "RX 7800 XT": "gfx1101",
    "RX 7700 XT": "gfx1101", "PRO W7700": "gfx1101", "RX 7600": "gfx1102",
    "RX 7600 XT": "gfx1102", "Radeon 780M": "gfx1103", "Ryzen AI Max": "gfx1151",
    "RX 6950 XT": "gfx1030", "RX 6900 XT": "gfx1030", "RX 6800 XT": "gfx1030",
    "RX 6800": "gfx1030", "PRO W6800": "gfx1030", "RX 6750 XT": "gfx1031",
    "RX 6700 XT": "gfx1031", "RX 6650 XT": "gfx1032", "RX 6600 XT": "gfx1032",
    "RX 6600": "gfx1032",
}


@pytest.mark.parametrize(("name", "gfx"), REFERENCE_GPUS.items())
def test_every_reference_gpu(name: str, gfx: str) -> None:
    gpu = C.gpu(name)
    assert gpu is not None and gpu.gfx == gfx


def test_gpu_lookup_spellings() -> None:
    assert C.gpu("AMD Radeon RX 7900 XTX") == C.gpu("rx7900xtx") == C.gpu("gfx1100")
    assert C.gpu("7900 XTX") == C.gpu("Radeon PRO W7900") == C.gpu("w7900") == C.gpu("GFX1100")
    assert C.gpu("MI300X") == C.gpu("AMD Instinct MI300X") != C.gpu("MI250X")
    assert C.gpu("RX 7900") is None and C.gpu("gfx9999") is None


def test_gpu_facts() -> None:
    xtx, rx6800, rx6700 = C.gpu("RX 7900 XTX"), C.gpu("RX 6800"), C.gpu("RX 6700 XT")
    assert xtx and xtx.wsl and xtx.windows and xtx.hsa_override is None
    assert xtx.linux_official_since == "6.0"
    assert rx6800 and not rx6800.wsl and not rx6800.windows
    assert rx6700 and rx6700.hsa_override == "10.3.0"
    for name in ("RX 9070 XT", "RX 7800 XT", "MI355X"):
        g = C.gpu(name)
        assert g and g.linux_official_since in ("6.4.1", "7.0")
    assert all(g.source for g in C.gpus)


def test_releases() -> None:
    r613, r633, r641 = C.rocm("6.1.3"), C.rocm("6.3.3"), C.rocm("6.4.1")
    assert r613 and r613.ubuntu == ("22.04",) and r613.libhsa_fix == "copy"
    assert r613.amdgpu_install == "6.1.60103-1" and r613.wsl_stack == "legacy"
    assert r633 and r633.wsl_stack is None
    assert r641 and r641.libhsa_fix == "delete" and r641.amdgpu_install == "6.4.60401-1"
    assert r641.amdgpu_install_url("noble") == (
        "https://repo.radeon.com/amdgpu-install/6.4.1/ubuntu/noble/"
        "amdgpu-install_6.4.60401-1_all.deb")
    assert r641.docker_images["24.04"] == "rocm/dev-ubuntu-24.04:6.4.1"
    for v in ("7.0", "7.0.2"):
        rel = C.rocm(v)
        assert rel and rel.wsl_stack is None
    r720, r721 = C.rocm("7.2.0"), C.rocm("7.2.1")
    assert r720 and r720.wsl_stack == "legacy" and r720.amdgpu_install == "7.2.70200-1"
    assert r721 and r721.wsl_stack == "rocdxg"
    assert C.rocm("6.4") == r641 and C.rocm("nonsense") is None and C.rocm("5.0") is None
    # copy up to 6.3.4, delete from 6.4.1
    for rel in C.releases:
        major_minor = tuple(int(x) for x in rel.version.split(".")[:2])
        assert rel.libhsa_fix == ("copy" if major_minor <= (6, 3) else "delete"), rel.version


def test_nearest_wsl_releases() -> None:
    assert C.nearest_wsl_releases("6.3.3")[:2] == ["6.3.4", "6.4.1"]
    assert C.nearest_wsl_releases("7.0.2")[0] == "7.2.0"
    assert all(C.rocm(v) and C.rocm(v).wsl_stack for v in C.nearest_wsl_releases("7.0"))  # type: ignore[union-attr]


@pytest.mark.parametrize(("torch", "indexes", "python_ok", "python_bad"), [
    ("2.1.2", ["rocm5.6"], "3.11", "3.12"),
    ("2.2.2", ["rocm5.7"], "3.8", "3.12"),
    ("2.3.1", ["rocm6.0"], "3.11", "3.12"),
    ("2.4.1", ["rocm6.1"], "3.12", "3.13"),
    ("2.5.1", ["rocm6.1", "rocm6.2"], "3.12", "3.8"),
    ("2.6.0", ["rocm6.1", "rocm6.2.4"], "3.13", "3.8"),
    ("2.7.1", ["rocm6.3"], "3.13", "3.14"),
    ("2.8.0", ["rocm6.4"], "3.9", "3.14"),
    ("2.9.1", ["rocm6.4"], "3.14", "3.9"),
    ("2.10.0", ["rocm7.1"], "3.10", "3.9"),
    ("2.13.0", ["rocm7.2", "cpu"], "3.11", "3.9"),
])
def test_torch_matrix(torch: str, indexes: list[str], python_ok: str, python_bad: str) -> None:
    rows = C.torch_indexes(torch)
    assert [r.index for r in rows] == indexes
    for r in rows:
        assert r.python.contains(python_ok) and not r.python.contains(python_bad)
        assert r.serves(SpecifierSet(f"=={torch}"))
        assert r.url == f"https://download.pytorch.org/whl/{r.index}"
        assert r.source


def test_local_labels() -> None:
    (row,) = C.index_rows("https://download.pytorch.org/whl/cpu/")
    assert row.serves(SpecifierSet("==2.13.0+cpu")) and not row.serves(SpecifierSet("==2.13.0+cu1"))
    assert C.torch_indexes("2.9.1+rocm6.4")[0].index == "rocm6.4"


def test_index_rows_by_url() -> None:
    assert [r.index for r in C.index_rows("https://download.pytorch.org/whl/rocm6.4/")] == [
        "rocm6.4", "rocm6.4"]
    assert [r.index for r in C.index_rows("https://mirror.example/pytorch/whl/rocm6.1")] == [
        "rocm6.1", "rocm6.1", "rocm6.1"]
    assert C.index_rows("https://mirror.example/simple") == []


def test_wheel_gfx() -> None:
    assert "gfx1100" in C.wheel_gfx("rocm6.4") and "gfx1151" not in C.wheel_gfx("rocm6.4")
    assert "gfx1151" in C.wheel_gfx("rocm7.2")
    assert "gfx1031" not in C.wheel_gfx("rocm7.2")


def test_device_flags() -> None:
    assert set(C.flags) == set(HOST_KINDS)
    native = C.device_flags("native-rocm")
    assert native.devices == ("/dev/kfd", "/dev/dri")
    assert "seccomp=unconfined" in native.security_opt and "render" in native.group_add
    legacy = C.device_flags("wsl2-legacy")
    assert legacy.devices == ("/dev/dxg",)
    assert ("/usr/lib/wsl/lib/libdxcore.so", "/usr/lib/libdxcore.so") in legacy.volumes
    rocdxg = C.device_flags("wsl2-rocdxg")
    assert rocdxg.environment == {"HSA_ENABLE_DXG_DETECTION": "1"}
    assert C.device_flags("nvidia").gpu_request
    cpu = C.device_flags("cpu")
    assert not cpu.devices and not cpu.gpu_request
    with pytest.raises(CompatDataError):
        C.device_flags("bogus")  # type: ignore[arg-type]


def test_rccl_knobs() -> None:
    assert C.rccl.misspelled == {"RCCL_ALGO": "NCCL_ALGO", "RCCL_NTHREADS": "NCCL_NTHREADS"}
    for name in ("NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS",
                 "RCCL_MSCCL_ENABLE", "RCCL_MSCCLPP_ENABLE", "RCCL_ENABLE_CLIQUE"):
        assert name in C.rccl.known
    assert "RCCL_ALGO" not in C.rccl.known


def test_windows_wheels() -> None:
    w = C.windows_wheels[0]
    assert w.rocm == "6.4.4" and w.python.contains("3.12") and not w.python.contains("3.11")
    assert w.unverified and w.wheel_urls()[0].endswith("cp312-cp312-win_amd64.whl")


def test_base_images() -> None:
    b = C.base_image("debian:bookworm-slim")
    assert b is not None and b.python == "3.11"
    b = C.base_image("rocm/dev-ubuntu-22.04:6.1.3")
    assert b is not None and b.python == "3.10"
    assert C.base_image("alpine:3") is None


def test_load_is_cached() -> None:
    assert load_compat() is load_compat()


@pytest.mark.parametrize(("table", "call", "message"), [
    ({"a": 1}, lambda r: r.get("a", str), "expected str, got int"),
    ({}, lambda r: r.get("a", str), "missing"),
    ({"a": ["x", 1]}, lambda r: r.strs("a"), "expected a list of strings"),
    ({"a": ">>1"}, lambda r: r.spec("a"), "t.toml: row.a"),
])
def test_reader_is_strict(table: dict[str, Any], call: Any, message: str) -> None:
    with pytest.raises(CompatDataError, match=message):
        call(_Reader("t.toml", "row", table))


def test_reader_refuses_unknown_keys() -> None:
    r = _Reader("t.toml", "row", {"a": "x", "b": "y"})
    r.get("a", str)
    with pytest.raises(CompatDataError, match=r"row\.b: unknown key"):
        r.done()


def test_malformed_data_file_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    real = compat_mod._read

    def broken(file: str) -> dict[str, Any]:
        data = real(file)
        if file == "gpus.toml":
            data["gpu"][0]["gfx"] = "rdna3"
        return data

    monkeypatch.setattr(compat_mod, "_read", broken)
    load_compat.cache_clear()
    try:
        with pytest.raises(CompatDataError, match=r"gpus.toml: gpu\[0\].gfx: not a gfx target"):
            load_compat()
    finally:
        monkeypatch.undo()
        load_compat.cache_clear()


def test_wsl_units() -> None:
    """wsl.toml: Microsoft's validator list, plus the timer the Dockerfile masks too."""
    units = load_compat().wsl_units
    assert len(units.discouraged) == 10
    assert {"systemd-resolved.service", "tmp.mount", "NetworkManager.service"} <= set(
        units.discouraged)
    assert units.masked == tuple(sorted((*units.discouraged, "systemd-tmpfiles-clean.timer")))
    assert "validate-modern.py" in units.source


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t["systemd"].update(extra=1), r"wsl.toml: systemd.extra: unknown key"),
    (lambda t: t["systemd"]["also_masked"].append("resolved"),
     r"wsl.toml: systemd.also_masked: expected distinct systemd unit names, got \['resolved'\]"),
    (lambda t: t["systemd"]["discouraged_units"].append("tmp.mount"),
     r"systemd.discouraged_units: expected distinct"),
    (lambda t: t.update(units={}), r"wsl.toml: unknown table \[units\]"),
    (lambda t: t["systemd"].pop("source"), r"wsl.toml: systemd.source: missing"),
])
def test_malformed_wsl_data_is_reported(monkeypatch: pytest.MonkeyPatch, change: Any,
                                        message: str) -> None:
    real = compat_mod._read

    def broken(file: str) -> dict[str, Any]:
        data = real(file)
        if file == "wsl.toml":
            change(data)
        return data

    monkeypatch.setattr(compat_mod, "_read", broken)
    load_compat.cache_clear()
    try:
        with pytest.raises(CompatDataError, match=message):
            load_compat()
    finally:
        monkeypatch.undo()
        load_compat.cache_clear()

"""The shipped compatibility data: loaded strictly, every fact of the reference present.

The reference is shared/docs/rocm-2026.md (it supersedes rocm-reference.md): its corrections of
sections 2 - 7 are asserted here one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuilder.core import compat as compat_mod
from envbuilder.core import compatload
from envbuilder.core.compat import HOST_KINDS
from envbuilder.core.compatload import _Reader, load_compat
from envbuilder.core.errors import CompatDataError

C = load_compat()

REFERENCE_GPUS = {
    "MI355X": "gfx950",
    "MI350X": "gfx950",
    "MI325X": "gfx942",
    "MI300X": "gfx942",
    "MI300A": "gfx942",
    "MI250X": "gfx90a",
    "MI250": "gfx90a",
    "MI210": "gfx90a",
    "MI100": "gfx908",
    "RX 9070 XT": "gfx1201",
    "RX 9070": "gfx1201",
    "RX 9070 GRE": "gfx1201",
    "AI PRO R9700": "gfx1201",
    "RX 9060 XT": "gfx1200",
    "RX 9060": "gfx1200",
    "RX 7900 XTX": "gfx1100",
    "RX 7900 XT": "gfx1100",
    "RX 7900 GRE": "gfx1100",
    "PRO W7900": "gfx1100",
    "W7800": "gfx1100",
    "RX 7800 XT": "gfx1101",
    "RX 7700 XT": "gfx1101",
    "PRO W7700": "gfx1101",
    "RX 7600": "gfx1102",
    "RX 7600 XT": "gfx1102",
    "Radeon 780M": "gfx1103",
    "Ryzen AI Max": "gfx1151",
    "RX 6950 XT": "gfx1030",
    "RX 6900 XT": "gfx1030",
    "RX 6800 XT": "gfx1030",
    "RX 6800": "gfx1030",
    "PRO W6800": "gfx1030",
    "RX 6750 XT": "gfx1031",
    "RX 6700 XT": "gfx1031",
    "RX 6650 XT": "gfx1032",
    "RX 6600 XT": "gfx1032",
    "RX 6600": "gfx1032",
    # rocm-2026.md section 6: missing from the data before
    "Radeon 890M": "gfx1150",
    "Radeon 880M": "gfx1150",
    "Radeon 860M": "gfx1152",
    "Radeon 840M": "gfx1152",
    "Radeon 820M": "gfx1153",
    "MI50": "gfx906",
    "MI60": "gfx906",
    "Radeon VII": "gfx906",
    "PRO V620": "gfx1030",
    "PRO V710": "gfx1101",
    "AI PRO R9600D": "gfx1201",
    "Ryzen AI Max+ 395": "gfx1151",
    "gfx1250": "gfx1250",
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


def test_gfx1030_consumer_cards_never_official_on_linux() -> None:
    """rocm-2026.md section 6: only PRO W6800 and PRO V620 are; 6.0 was wrong for the RX 6800."""
    for name in ("RX 6950 XT", "RX 6900 XT", "RX 6800 XT", "RX 6800"):
        g = C.gpu(name)
        assert g and g.linux_official_known and g.linux_official_since is None, name
    w6800, v620 = C.gpu("PRO W6800"), C.gpu("PRO V620")
    assert w6800 and w6800.linux_official_since == "6.0"
    assert v620 and not v620.linux_official_known  # official, but since when is not given


def test_apu_facts() -> None:
    halo, point, krackan = C.gpu("Strix Halo"), C.gpu("Radeon 890M"), C.gpu("Radeon 860M")
    assert halo and halo.wsl and halo.windows and not halo.unverified  # drop 'unverified'
    assert point and point.wsl and point.wsl_since == "7.2.0"
    assert krackan and krackan.wsl and krackan.wsl_since == "7.13"
    assert halo.hsa_override is None and not halo.hsa_override_known
    mi50 = C.gpu("MI50")
    assert mi50 and mi50.hsa_override is None and mi50.hsa_override_known


# --- releases ---------------------------------------------------------------------------------


def test_releases() -> None:
    r613, r633, r641 = C.rocm("6.1.3"), C.rocm("6.3.3"), C.rocm("6.4.1")
    assert r613 and r613.ubuntu == ("22.04",) and r613.libhsa_fix == "copy"
    assert r613.amdgpu_install == "6.1.60103-1" and r613.wsl_stack == "legacy"
    assert r633 and r633.wsl_stack is None
    assert r641 and r641.libhsa_fix == "delete" and r641.amdgpu_install == "6.4.60401-1"
    assert r641.amdgpu_install_url("noble") == (
        "https://repo.radeon.com/amdgpu-install/6.4.1/ubuntu/noble/"
        "amdgpu-install_6.4.60401-1_all.deb"
    )
    assert r641.docker_images["24.04"] == "rocm/dev-ubuntu-24.04:6.4.1"
    for v in ("7.0", "7.0.1", "7.0.2"):
        rel = C.rocm(v)
        assert rel and rel.wsl_stack is None
    r720, r721 = C.rocm("7.2.0"), C.rocm("7.2.1")
    assert r720 and r720.wsl_stack == "legacy" and r720.amdgpu_install == "7.2.70200-1"
    assert r721 and r721.wsl_stack == "rocdxg"
    # "6.4" is the newest 6.4.x known: 6.4.4 now that 6.4.2.1 and 6.4.4 are in the data
    assert C.rocm("6.4") == C.rocm("6.4.4") and C.rocm("6.4.2.1") is not None
    assert C.rocm("nonsense") is None and C.rocm("5.0") is None
    # copy up to 6.3.4, delete from 6.4.1 (amdgpu-install releases; 7.14+ have no libhsa fix)
    for rel in C.releases:
        if rel.install_model != "amdgpu-install":
            assert rel.libhsa_fix is None, rel.version
            continue
        major_minor = tuple(int(x) for x in rel.version.split(".")[:2])
        assert rel.libhsa_fix == ("copy" if major_minor <= (6, 3) else "delete"), rel.version


def test_every_missing_release_is_added() -> None:
    """rocm-2026.md section 1: 'Missing from the data today: ...'."""
    missing = {
        "6.4.2.1",
        "6.4.4",
        "7.0.1",
        "7.1.0",
        "7.1.1",
        "7.2.2",
        "7.2.3",
        "7.2.4",
        "7.14.0",
        "7.14.1",
        "10.0.0",
        "10.1.0",
    }
    assert missing <= {r.version for r in C.releases}
    assert all(r.source for r in C.releases)


@pytest.mark.parametrize(
    ("version", "model"),
    [
        ("10.1.0", "pip-sdk"),
        ("10.0.0", "pip-sdk"),
        ("7.14.1", "pip-sdk"),
        ("7.14.0", "pip-sdk"),
        ("7.2.4", "amdgpu-install"),
        ("6.4.2.1", "amdgpu-install"),
        ("6.1.3", "amdgpu-install"),
    ],
)
def test_install_model(version: str, model: str) -> None:
    rel = C.rocm(version)
    assert rel is not None and rel.install_model == model
    if model == "pip-sdk":
        assert "amdrocm" in rel.install and rel.pip_index and rel.amdgpu_install is None
        assert rel.amdgpu_install_url("noble") is None
    else:
        assert rel.pip_index is None and rel.amdgpu_install_url("noble")


def test_the_7_14_pip_sdk_index() -> None:
    for v in ("7.14.0", "7.14.1"):
        rel = C.rocm(v)
        assert rel and rel.pip_index == "https://repo.amd.com/rocm/whl-multi-arch/"


@pytest.mark.parametrize(
    ("version", "codename", "url"),
    [
        (
            "7.0.2",
            "noble",
            "https://repo.radeon.com/amdgpu-install/7.0.2/ubuntu/noble/"
            "amdgpu-install_7.0.2.70002-1_all.deb",
        ),
        (
            "7.0.2",
            "jammy",
            "https://repo.radeon.com/amdgpu-install/7.0.2/ubuntu/jammy/"
            "amdgpu-install_7.0.2.70002-1_all.deb",
        ),
        (
            "7.2.1",
            "noble",
            "https://repo.radeon.com/amdgpu-install/7.2.1/ubuntu/noble/"
            "amdgpu-install_7.2.1.70201-1_all.deb",
        ),
        (
            "6.4.2.1",
            "noble",
            "https://repo.radeon.com/amdgpu-install/6.4.2.1/ubuntu/noble/"
            "amdgpu-install_6.4.60402-1_all.deb",
        ),
        (
            "7.2.4",
            "jammy",
            "https://repo.radeon.com/amdgpu-install/7.2.4/ubuntu/jammy/"
            "amdgpu-install_7.2.4.70204-1_all.deb",
        ),
    ],
)
def test_amdgpu_install_urls(version: str, codename: str, url: str) -> None:
    """rocm-2026.md section 2: patch releases' packages carry the full version (the data wrote
    7.0.70002-1 and 7.2.70201-1, which 404)."""
    rel = C.rocm(version)
    assert rel is not None and rel.amdgpu_install_url(codename) == url


def test_patch_release_packages_carry_the_full_version_from_7_0_1() -> None:
    for rel in C.releases:
        v = Version(rel.version)
        if rel.amdgpu_install and v >= Version("7.0.1") and v.micro:
            assert rel.amdgpu_install.startswith(rel.version + "."), rel.version


def test_image_tags() -> None:
    """rocm-2026.md section 2: '-complete' became '-full' at 7.14, no bare tag; 26.04 rows."""
    for v in ("7.14.0", "7.14.1", "10.0.0", "10.1.0"):
        rel = C.rocm(v)
        assert rel and rel.docker_images["24.04"] == f"rocm/dev-ubuntu-24.04:{v}-full"
    r714 = C.rocm("7.14.0")
    assert r714 and r714.docker_images["26.04"] == "rocm/dev-ubuntu-26.04:7.14.0-full"
    b = C.base_image("rocm/dev-ubuntu-26.04:10.0.0-full")
    assert b is not None and b.python == "3.14"


def test_nearest_wsl_releases() -> None:
    assert C.nearest_wsl_releases("6.3.3")[:2] == ["6.3.4", "6.4.1"]
    assert C.nearest_wsl_releases("7.0.2")[0] == "7.2.0"
    for v in C.nearest_wsl_releases("7.14.1"):  # only what the wsl2 target can install
        rel = C.rocm(v)
        assert rel and rel.wsl_stack and rel.install_model == "amdgpu-install"
    assert C.nearest_wsl_releases("10.1.0")[0] == "7.2.4"


# --- torch / index / Python ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "indexes", "python_ok", "python_bad"),
    [
        ("2.1.2", ["rocm5.5", "rocm5.6"], "3.11", "3.12"),
        ("2.2.0", ["rocm5.6", "rocm5.7"], "3.12", "3.13"),
        ("2.2.2", ["rocm5.6", "rocm5.7"], "3.8", "3.13"),
        ("2.3.1", ["rocm5.7", "rocm6.0"], "3.12", "3.13"),
        ("2.4.1", ["rocm6.0", "rocm6.1"], "3.12", "3.13"),
        ("2.5.1", ["rocm6.1", "rocm6.2"], "3.12", "3.8"),
        ("2.6.0", ["rocm6.1", "rocm6.2.4"], "3.13", "3.8"),
        ("2.7.1", ["rocm6.2.4", "rocm6.3"], "3.13", "3.14"),
        ("2.8.0", ["rocm6.3", "rocm6.4"], "3.9", "3.14"),
        ("2.9.1", ["rocm6.3", "rocm6.4"], "3.14", "3.9"),
        ("2.10.0", ["rocm7.0", "rocm7.1"], "3.10", "3.9"),
        ("2.11.0", ["rocm7.1", "rocm7.2"], "3.14", "3.9"),
        ("2.12.1", ["rocm7.1", "rocm7.2"], "3.10", "3.15"),
        ("2.13.0", ["rocm7.1", "rocm7.2", "cpu"], "3.11", "3.9"),
        ("2.14.1", ["rocm7.2", "rocm7.14", "cpu"], "3.14", "3.9"),
    ],
)
def test_torch_matrix(torch: str, indexes: list[str], python_ok: str, python_bad: str) -> None:
    """rocm-2026.md section 3, row by row (pytorch/test-infra build-matrix history)."""
    rows = [r for r in C.torch_indexes(torch) if r.url.startswith("https://download.pytorch")]
    assert [r.index for r in rows] == indexes
    for r in rows:
        assert r.python.contains(python_ok) and not r.python.contains(python_bad)
        assert r.serves(SpecifierSet(f"=={torch}"))
        assert r.url == f"https://download.pytorch.org/whl/{r.index}"
        assert r.source


def test_local_labels() -> None:
    (row,) = C.index_rows("https://download.pytorch.org/whl/cpu/")
    assert row.serves(SpecifierSet("==2.13.0+cpu")) and not row.serves(SpecifierSet("==2.13.0+cu1"))
    assert row.rocm is None
    assert C.torch_indexes("2.9.1+rocm6.4")[0].index == "rocm6.3"
    r63 = [
        r
        for r in C.index_rows("https://download.pytorch.org/whl/rocm6.3")
        if r.serves(SpecifierSet("==2.9.1+rocm6.3"))
    ]
    assert len(r63) == 1 and r63[0].rocm == "6.3"


def test_amd_multi_arch_index() -> None:
    rows = C.index_rows("https://repo.amd.com/rocm/whl-multi-arch")
    assert {r.local for r in rows} == {"rocm7.14.0", "rocm7.14.1"}
    assert any(r.serves(SpecifierSet("==2.12.0+rocm7.14.1")) for r in rows)
    assert all(r.python.contains("3.11") for r in rows)
    # both rows' torch versions are confirmed by public installs from the index (torch.toml)
    assert {r.local: r.unverified for r in rows} == {"rocm7.14.0": False, "rocm7.14.1": False}
    assert any(r.serves(SpecifierSet("==2.11.0+rocm7.14.0")) for r in rows)
    whl_next = C.index_rows("https://stable.repo.amd.com/rocm/whl-next/")
    assert {r.local for r in whl_next} == {"rocm10.0.0", "rocm10.1.0"}
    assert any(r.serves(SpecifierSet("==2.14.0+rocm10.1.0")) for r in whl_next)
    # the nightly index is another one: its rows are not the stable index's
    assert C.index_rows("https://rocm.nightlies.amd.com/whl-multi-arch/") == []


def test_amd_torch_rows_missing_from_the_data_cite_amds_install_pages() -> None:
    """Issue 35 item 5: torch 2.10.0 and 2.11.0 on 7.14.x and 2.13.0 on 10.1.0 were left out.
    AMD's install pages offer 2.11.0 for every target on Linux; 2.10.0 only for the four Instinct
    targets (a row and gfx set of its own, so a Radeon spec on it gets the missing-target finding);
    2.13.0+rocm10.1.0 for every target, Windows too."""
    rows = C.index_rows("https://repo.amd.com/rocm/whl-multi-arch/")
    for release in ("7.14.0", "7.14.1"):
        (r211,) = [r for r in rows if r.serves(SpecifierSet(f"==2.11.0+rocm{release}"))]
        assert "gfx1100" in r211.gfx and not r211.unverified
        (r210,) = [r for r in rows if r.serves(SpecifierSet(f"==2.10.0+rocm{release}"))]
        assert r210.gfx == ("gfx908", "gfx90a", "gfx942", "gfx950") and not r210.unverified
        assert f"rocm{release}-pip-install.rst at" in r210.source and "Linux only" in r210.source
    assert r210.gfx_set and "pytorch-ver=2.10.0 is offered for device-all" in r210.gfx_set.source
    whl_next = C.index_rows("https://stable.repo.amd.com/rocm/whl-next/")
    (r101,) = [r for r in whl_next if r.serves(SpecifierSet("==2.13.0+rocm10.1.0"))]
    assert r101.rocm == "10.1.0" and "at 6b89dd4450b6 and at fee8a5012291" in r101.source


_LEGACY_714 = "bc2e763e075cf8bbe929461c2d156cb63f021666"
_AMD_714 = (
    "gfx950", "gfx942", "gfx90a", "gfx908", "gfx1201", "gfx1200", "gfx1100", "gfx1101",
    "gfx1102", "gfx1103", "gfx1030", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
)  # fmt: skip


def test_amd_714_rows_carry_the_targets_of_amds_install_pages() -> None:
    """Issue 35 item 2: the 7.14 rows used TheRock's nightly list (26 targets); AMD's 7.14.0 and
    7.14.1 install pages offer device extras for 15 (read upstream: AMD-Ecosystem/ai-ecosystem's
    PyTorch pages, ROCm/legacy-rocm-build's ROCm page, not a fork). The nightly set stays, used by
    no row; torch 2.10.0 keeps its Instinct-only set."""
    stable = C.gfx_sets["amd-multi-arch-714"]
    assert stable.targets == _AMD_714 and not stable.unverified
    for cited in (
        "rocm7.14.0-pip-install.rst@58d78bbc159cf1034dd984cdc09e776b84b287ab",
        "rocm7.14.1-pip-install.rst@0d8e34901f8e01a99be64abab8584da529f5a222",
        f"200-install.rst@{_LEGACY_714}",
        "rocm[libraries,device-<gfx>]==7.14.0",
        ", ".join(("gfx950", "gfx942", "gfx90a", "gfx908", "gfx1200", "gfx1201")),
    ):
        assert cited in stable.source, cited
    rows = C.index_rows("https://repo.amd.com/rocm/whl-multi-arch/")
    assert {r.gfx_set.name for r in rows if r.gfx_set} == {
        "amd-multi-arch-714",
        "amd-multi-arch-torch210",
    }
    for row in rows:
        assert set(row.gfx) <= set(_AMD_714), row.local
    nightly = C.gfx_sets["amd-multi-arch"]
    assert len(nightly.targets) == 26 and {"gfx900", "gfx1010", "gfx1036"} <= set(nightly.targets)
    assert not [r for r in C.torch_matrix if r.gfx_set is nightly]
    for name, table in C.gfx_sets.items():
        assert "richardokonicha" not in table.source, name


def test_the_cpu_index_row_has_no_unconfirmed_2_14_0() -> None:
    """Issue 35 item 5: 2.14.0+cpu is named only by public files the index does not attribute to a
    repository, so it is not added; the row keeps saying so."""
    (cpu,) = C.index_rows("https://download.pytorch.org/whl/cpu/")
    assert "2.14.0" not in cpu.versions and "2.14.0+cpu not" in cpu.source


def test_index_rows_by_url() -> None:
    assert [r.index for r in C.index_rows("https://download.pytorch.org/whl/rocm6.4/")] == [
        "rocm6.4",
        "rocm6.4",
    ]
    assert [r.index for r in C.index_rows("https://mirror.example/pytorch/whl/rocm6.1")] == [
        "rocm6.1",
        "rocm6.1",
        "rocm6.1",
    ]
    assert C.index_rows("https://mirror.example/simple") == []


@pytest.mark.parametrize(
    ("index", "torch", "gfx", "has"),
    [
        # rocm-2026.md section 3: an RX 7800 XT (gfx1101) needs the override on rocm6.2, not 6.3
        ("rocm6.2", "2.5.1", "gfx1101", False),
        ("rocm6.3", "2.7.1", "gfx1101", True),
        ("rocm6.0", "2.4.1", "gfx942", True),
        ("rocm6.1", "2.4.1", "gfx1101", False),  # gfx1101 came with torch 2.6 (pytorch#141667)
        ("rocm6.1", "2.6.0", "gfx1101", True),
        ("rocm5.7", "2.3.1", "gfx942", False),  # gfx942 only for ROCm >= 6.0
        ("rocm6.4", "2.9.1", "gfx1201", True),
        ("rocm6.4", "2.9.1", "gfx1151", False),
        ("rocm7.0", "2.10.0", "gfx1151", True),  # gfx950, 1150, 1151 from rocm7.0 (torch 2.10)
        ("rocm7.1", "2.12.1", "gfx1103", False),
        ("rocm7.2", "2.13.0", "gfx1103", True),  # gfx1103 from torch 2.13
        ("rocm7.14", "2.14.0", "gfx906", False),
        # AMD's 7.14 index: the 15 targets of its install pages (gfx1031 not among them)
        ("amd-whl-multi-arch", "2.12.0", "gfx1031", False),
        ("amd-whl-multi-arch", "2.12.0", "gfx1030", True),
        ("amd-whl-multi-arch", "2.11.0", "gfx1153", True),
        ("amd-whl-next", "2.13.0", "gfx1031", True),  # whl-next's stable set has it
    ],
)
def test_wheel_gfx_per_index_and_torch(index: str, torch: str, gfx: str, has: bool) -> None:
    assert (gfx in C.wheel_gfx(index, torch)) is has
    assert "gfx1031" not in C.wheel_gfx("rocm7.2", "2.13.0")


def test_every_rocm_row_has_a_gfx_set_with_a_source() -> None:
    for row in C.torch_matrix:
        if row.rocm is None:
            assert row.gfx == () and row.gfx_set is None
        else:
            assert row.gfx_set is not None and row.gfx_set.source and row.gfx, row.index
    assert C.indexes_with_gfx("gfx1103")[:2] == ["rocm7.1", "rocm7.2"]


# --- Windows -----------------------------------------------------------------------------------


def test_windows_wheels() -> None:
    w644 = C.windows_set("6.4.4")
    assert w644 and w644.python.contains("3.12") and not w644.python.contains("3.11")
    assert not w644.unverified  # rocm-2026.md section 4: the URLs are right
    assert w644.wheel_urls()[0].endswith("cp312-cp312-win_amd64.whl")
    w72, w721 = C.windows_set("7.2.0"), C.windows_set("7.2.1")
    assert (
        w72
        and w72.rocm == "7.2"
        and w72.sdk_urls()[0]
        == (
            "https://repo.radeon.com/rocm/windows/rocm-rel-7.2/"
            "rocm_sdk_core-7.2.0.dev0-py3-none-win_amd64.whl"
        )
    )
    assert w72.wheel_urls()[0].endswith("/torch-2.9.1+rocmsdk20260116-cp312-cp312-win_amd64.whl")
    assert (
        w721
        and w721.driver == "Adrenalin 26.2.2"
        and w721.wheel_urls()[0]
        == (
            "https://repo.radeon.com/rocm/windows/rocm-rel-7.2.1/"
            "torch-2.9.1+rocm7.2.1-cp312-cp312-win_amd64.whl"
        )
    )
    w714 = C.windows_set("7.14.1")
    assert w714 and w714.index and w714.python.contains("3.14") and w714.python.contains("3.11")
    rx6800 = C.gpu("RX 6800")
    assert rx6800 and w714.covers(rx6800) and not w721.covers(rx6800)  # RDNA2 from 7.14
    # AMD's 7.14 pages give Windows commands for the Radeon and Ryzen targets of the 15 only
    w7140 = C.windows_set("7.14.0")
    radeon_ryzen = tuple(sorted(t for t in _AMD_714 if t.startswith("gfx1")))
    for w in (w7140, w714):
        assert w and tuple(sorted(w.gfx)) == radeon_ryzen and "pip-install.rst@" in w.source
    rx6700 = C.gpu("RX 6700 XT")
    assert rx6700 and rx6700.gfx == "gfx1031" and not w714.covers(rx6700)
    assert C.windows_set("6.4.1") == w644 and C.windows_set("6.1.3") is None


# --- WSL ---------------------------------------------------------------------------------------


def test_librocdxg() -> None:
    dxg = C.dxg
    assert dxg is not None
    assert dxg.needs_detection_env("7.2.4") and not dxg.needs_detection_env("7.14.0")
    assert dxg.dids_conf_host == "/opt/rocm/share/rocdxg/dids.conf"
    assert dxg.dids_conf_container == "/usr/share/rocdxg/dids.conf"
    assert dxg.ubuntu == ("22.04", "24.04", "26.04")
    libs = {lib.version: lib for lib in C.librocdxg}
    assert not libs["1.2.0"].dids_conf and libs["1.2.1"].dids_conf
    assert libs["1.2.1"].rocm == "7.14"
    assert libs["1.2.2"].deb == "rocdxg-roct_1.2.2_amd64.deb" and libs["1.2.2"].sha256
    assert all(lib.source for lib in libs.values())


def test_wsl_units() -> None:
    """wsl.toml: Microsoft's validator list (14 units, 2026-08), plus the timer."""
    units = load_compat().wsl_units
    assert len(units.discouraged) == 14
    assert {
        "systemd-vconsole-setup.service",
        "NetworkManager-wait-online.service",
        "console-getty.service",
        "hypervkvpd.service",
        "systemd-resolved.service",
        "tmp.mount",
        "NetworkManager.service",
    } <= set(units.discouraged)
    assert units.masked == tuple(sorted((*units.discouraged, "systemd-tmpfiles-clean.timer")))
    assert "validate-modern.py" in units.source


# --- Docker, RCCL, images ----------------------------------------------------------------------


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
    """rocm-2026.md section 7: the RCCL_PARAM names of RCCL's source, NCCL_* names RCCL reads,
    and the two PyTorch names that are not RCCL's."""
    assert C.rccl.misspelled == {
        "RCCL_ALGO": "NCCL_ALGO",
        "RCCL_NTHREADS": "NCCL_NTHREADS",
        "RCCL_PROTO": "NCCL_PROTO",
    }
    for name in (
        "NCCL_DEBUG",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_NTHREADS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_P2P_LEVEL",
        "NCCL_NET_GDR_LEVEL",
        "RCCL_MSCCL_ENABLE",
        "RCCL_MSCCLPP_ENABLE",
        "RCCL_ENABLE_CLIQUE",
        "RCCL_P2P_NET_DISABLE",
        "RCCL_LL128_FORCE_ENABLE",
        "RCCL_ENABLE_SIGNALHANDLER",
        "RCCL_KERNEL_COLL_TRACE_ENABLE",
        "RCCL_FORCE_ENABLE_GDRDMA",
    ):
        assert name in C.rccl.known, name
    assert len(C.rccl.rccl) == 24  # every RCCL_PARAM at ROCm/rccl 0cbce2a
    for name in ("RCCL_ALGO", "RCCL_PROTO", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT"):
        assert name not in C.rccl.known, name
    assert C.rccl.pytorch == {
        "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    }


def test_base_images() -> None:
    b = C.base_image("debian:bookworm-slim")
    assert b is not None and b.python == "3.11"
    b = C.base_image("rocm/dev-ubuntu-22.04:6.1.3")
    assert b is not None and b.python == "3.10"
    assert C.base_image("alpine:3") is None


def test_load_is_cached() -> None:
    assert load_compat() is load_compat()


# --- strict loading ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "call", "message"),
    [
        ({"a": 1}, lambda r: r.get("a", str), "expected str, got int"),
        ({}, lambda r: r.get("a", str), "missing"),
        ({"a": ["x", 1]}, lambda r: r.strs("a"), "expected a list of strings"),
        ({"a": ">>1"}, lambda r: r.spec("a"), "t.toml: row.a"),
        ({"a": "seven"}, lambda r: r.version("a"), "not a version: 'seven'"),
        ({"a": ["gfx1100", "rdna3"]}, lambda r: r.gfx_list("a"), "expected distinct gfx targets"),
    ],
)
def test_reader_is_strict(table: dict[str, Any], call: Any, message: str) -> None:
    with pytest.raises(CompatDataError, match=message):
        call(_Reader("t.toml", "row", table))


def test_reader_refuses_unknown_keys() -> None:
    r = _Reader("t.toml", "row", {"a": "x", "b": "y"})
    r.get("a", str)
    with pytest.raises(CompatDataError, match=r"row\.b: unknown key"):
        r.done()


def _broken(
    monkeypatch: pytest.MonkeyPatch,
    file: str,
    change: Callable[[dict[str, Any]], Any],
    message: str,
) -> None:
    """load_compat() with one real data file changed in memory must fail with `message`."""
    real = compatload._read

    def broken(name: str) -> dict[str, Any]:
        data = real(name)
        if name == file:
            change(data)
        return data

    monkeypatch.setattr(compatload, "_read", broken)
    load_compat.cache_clear()
    try:
        with pytest.raises(CompatDataError, match=message):
            load_compat()
    finally:
        monkeypatch.undo()
        load_compat.cache_clear()


def _release(data: dict[str, Any], version: str) -> dict[str, Any]:
    return next(r for r in data["release"] if r["version"] == version)


def _row(data: dict[str, Any], index: str) -> dict[str, Any]:
    return next(r for r in data["index"] if r["index"] == index)


@pytest.mark.parametrize(
    ("file", "change", "message"),
    [
        ("gpus.toml", lambda d: d["gpu"][0].update(gfx="rdna3"), r"gpu\[0\].gfx: not a gfx target"),
        ("gpus.toml", lambda d: d["gpu"][0].update(wsl_since="soon"), r"wsl_since: not a version"),
        (
            "rocm.toml",
            lambda d: _release(d, "7.2.4").update(install=["apt"]),
            r"install: expected distinct install models out of amdgpu-install, amdrocm, pip-sdk",
        ),
        (
            "rocm.toml",
            lambda d: _release(d, "7.0.2").update(amdgpu_install="7.0.70002-1"),
            r"amdgpu_install_path: does not end in amdgpu-install_7.0.70002-1_all.deb",
        ),
        (
            "rocm.toml",
            lambda d: _release(d, "7.14.1").update(pip_index=""),
            r"pip_index: a pip-sdk release needs pip_index",
        ),
        (
            "rocm.toml",
            lambda d: _release(d, "7.14.1").update(amdgpu_install="7.14.1-1"),
            r"amdgpu_install: set, but install is \['pip-sdk', 'amdrocm'\]",
        ),
        (
            "rocm.toml",
            lambda d: _release(d, "6.1.3").update(amdgpu_install_path="https://x/a.deb"),
            r"a path with \{codename\}",
        ),
        (
            "torch.toml",
            lambda d: _row(d, "rocm6.3").update(gfx="rocm99"),
            r"index\[\d+\].gfx: no \[gfx_set.rocm99\]",
        ),
        (
            "torch.toml",
            lambda d: d["gfx_set"]["rocm6"]["targets"].append("gfx1100"),
            r"gfx_set.rocm6.targets: expected distinct gfx targets",
        ),
        ("torch.toml", lambda d: d.update(gfx={}), r"torch.toml: unknown table \[gfx\]"),
        (
            "torch.toml",
            lambda d: d["windows"][0].update(index=True),
            r"windows\[0\].url: expected a folder URL",
        ),
        (
            "rccl.toml",
            lambda d: d["pytorch"]["map"].update(NCCL_DEBUG="TORCH_NCCL_DEBUG"),
            r"NCCL_DEBUG is also listed as a name RCCL reads",
        ),
        (
            "rccl.toml",
            lambda d: d["rccl"]["names"].append("NCCL_ALGO"),
            r"rccl.names: expected distinct RCCL_\* names",
        ),
        (
            "wsl.toml",
            lambda d: d["librocdxg"][2].update(sha256="abc"),
            r"librocdxg\[2\].sha256: expected 64 lower-case hex digits",
        ),
        (
            "wsl.toml",
            lambda d: d["dxg"].update(detection_default_from="soon"),
            r"dxg.detection_default_from: not a version",
        ),
    ],
)
def test_malformed_data_is_reported(
    monkeypatch: pytest.MonkeyPatch,
    file: str,
    change: Callable[[dict[str, Any]], Any],
    message: str,
) -> None:
    _broken(monkeypatch, file, change, message)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t["systemd"].update(extra=1), r"wsl.toml: systemd.extra: unknown key"),
        (
            lambda t: t["systemd"]["also_masked"].append("resolved"),
            r"wsl.toml: systemd.also_masked: expected distinct systemd unit names, "
            r"got \['resolved'\]",
        ),
        (
            lambda t: t["systemd"]["discouraged_units"].append("tmp.mount"),
            r"systemd.discouraged_units: expected distinct",
        ),
        (lambda t: t.update(units={}), r"wsl.toml: unknown table \[units\]"),
        (lambda t: t["systemd"].pop("source"), r"wsl.toml: systemd.source: missing"),
    ],
)
def test_malformed_wsl_data_is_reported(
    monkeypatch: pytest.MonkeyPatch, change: Any, message: str
) -> None:
    _broken(monkeypatch, "wsl.toml", change, message)


def test_the_wsl_runtime_error_names_every_release_rocm_toml_gives_a_wsl_runtime() -> None:
    """errors.toml's no-wsl-runtime-package names each release rocm.toml models with the legacy
    WSL runtime (7.2.0 was missing), and cites the public report for 7.2.0's WSL use case
    (ROCm/legacy-rocm-build#5903, where ROCm/ROCm's issues now live)."""
    import tomllib
    from pathlib import Path

    data = Path(compat_mod.__file__).resolve().parents[1] / "data"
    rocm = tomllib.loads((data / "rocm.toml").read_text(encoding="utf-8"))
    errors = tomllib.loads((data / "errors.toml").read_text(encoding="utf-8"))
    entry = next(e for e in errors["error"] if e["id"] == "no-wsl-runtime-package")
    legacy = [r["version"] for r in rocm["release"] if r.get("wsl_stack") == "legacy"]
    assert "7.2.0" in legacy
    listed = entry["cause"].split("published for WSL (", 1)[1].split(";", 1)[0]
    for version in legacy:
        assert version in listed.replace(" and ", ", ").split(", "), version
    assert "https://github.com/ROCm/legacy-rocm-build/issues/5903" in entry["sources"]


def test_mi325x_first_release_is_6_3_1_from_the_release_notes() -> None:
    """Issue 35 item 4: MI325X was given 6.0 with MI300X/MI300A, but the 6.0 - 6.2.4 tables of its
    own cited source do not list it. ROCm/ROCm's RELEASE.md at the tag rocm-6.3.1: 'ROCm 6.3.1
    enables support for AMD Instinct MI325X accelerator'."""
    mi325x, mi300x = C.gpu("MI325X"), C.gpu("MI300X")
    assert mi325x and mi300x and mi325x is not mi300x
    assert mi325x.gfx == "gfx942" and mi325x.linux_official_since == "6.3.1"
    assert "ROCm/ROCm RELEASE.md@deb4895b11b9b13b1d55b456356c5f22bd0e8a98" in mi325x.source
    assert "tag rocm-6.3.1" in mi325x.source
    assert mi300x.linux_official_since == "6.0"


_MATRIX_641 = (
    "ROCm/legacy-rocm-build docs/compatibility/compatibility-matrix.rst@"
    "076345c0f63f3620110f552cf2dc7c48a5ad06c5"
)
_MATRIX_72 = (
    "ROCm/legacy-rocm-build docs/compatibility/compatibility-matrix.rst@"
    "fff7efbd0c870e1bfba278faa91d517996b7a33a"
)
_NOTES_641 = "ROCm 6.4.1 introduces support for the RDNA4 architecture-based Radeon AI PRO R9700"


def test_rx_7700_xt_is_official_from_6_4_2_not_6_4_1() -> None:
    """Issue 35 item 4: AMD's 6.4.1 matrix and release notes name only RX 7800 XT and PRO W7700 for
    gfx1101; AMD's 6.4.3 matrix puts the RX 7700 XT footnote on the 6.4.2 column too. That matrix
    was read only in a copy whose repository the index does not name (the personal fork cited
    before is gone), so the row stays unverified and says why."""
    rx7700 = C.gpu("RX 7700 XT")
    assert rx7700 and rx7700.gfx == "gfx1101" and rx7700.unverified
    assert rx7700.linux_official_since == "6.4.2"
    assert _MATRIX_641 in rx7700.source and "hanzoai" not in rx7700.source
    assert "'6.4.3', '6.4.2', '6.3.0'" in rx7700.source
    assert "[#7700XT-OS] Radeon RX 7700 XT (gfx1101) is supported only on" in rx7700.source
    assert "the 6.4.2 column is read only in that copy" in rx7700.source


def test_gfx950_gfx1101_gfx1200_first_releases_cite_amds_matrix() -> None:
    """Issue 35 item 5: the first releases of gfx950 (7.0), gfx1101 and gfx1200 (6.4.1) cite AMD's
    compatibility matrix upstream (ROCm/legacy-rocm-build), no longer a personal fork: gfx950 is in
    no column up to 6.4.1 and in every column from 7.1.0; 7.0 itself from ROCprofiler-SDK's
    changelog ("for ROCm release 7.0": MI350X/MI355X support added) and AMD's 7.0.0 and 6.4.3
    matrix text, read in copies the index does not attribute, which the row says."""
    mi355x = C.gpu("MI355X")
    assert mi355x and mi355x.linux_official_since == "7.0" and not mi355x.unverified
    assert _MATRIX_641 in mi355x.source and _MATRIX_72 in mi355x.source
    assert "'7.0.0', '6.4.3', '6.3.0'" in mi355x.source
    assert "whose repository the index does not name" in mi355x.source
    # an attributed source for 7.0 itself: a ROCm 7.0 component's changelog adds MI350X/MI355X
    assert "ROCm/rocprofiler-sdk CHANGELOG.md@6ab6ecc325d0" in mi355x.source
    for name in ("RX 7800 XT", "PRO W7700", "RX 9060 XT"):
        g = C.gpu(name)
        assert g and g.linux_official_since == "6.4.1" and not g.unverified, name
        assert _MATRIX_641 in g.source and _NOTES_641 in g.source, name
    assert "legacy-rocm-build pull request #4875" in (C.gpu("RX 7800 XT") or mi355x).source
    assert not any("hanzoai" in g.source for g in C.gpus)


def test_the_wsl_runtime_error_cites_4406_where_it_lives_now() -> None:
    """Issue 35 item 5: ROCm/ROCm#4406 ('hsa-runtime-rocr4wsl-amdgpu in 6.3.3 not release'; AMD
    staff: 'there is no ROCm 6.3.3 release for WSL') now lives under ROCm/legacy-rocm-build; the
    error and the 6.3.3 row that rests on it cite it there, and 6.3.3 has no WSL runtime."""
    import tomllib
    from pathlib import Path

    data = Path(compat_mod.__file__).resolve().parents[1] / "data"
    rocm = tomllib.loads((data / "rocm.toml").read_text(encoding="utf-8"))
    errors = tomllib.loads((data / "errors.toml").read_text(encoding="utf-8"))
    entry = next(e for e in errors["error"] if e["id"] == "no-wsl-runtime-package")
    assert "https://github.com/ROCm/legacy-rocm-build/issues/4406" in entry["sources"]
    assert not any("github.com/ROCm/ROCm/issues/4406" in s for s in entry["sources"])
    assert "6.3.3" in entry["cause"]
    r633 = next(r for r in rocm["release"] if r["version"] == "6.3.3")
    assert r633["wsl_stack"] == "none" and "ROCm/legacy-rocm-build#4406" in r633["source"]


def test_error_sources_link_rocm_issues_where_they_live_now() -> None:
    """Issue 35 item 5: ROCm/ROCm's issues now live under ROCm/legacy-rocm-build (same numbers);
    no error entry links the old place, and the numbers re-read there are the ones cited."""
    import tomllib
    from pathlib import Path

    data = Path(compat_mod.__file__).resolve().parents[1] / "data"
    errors = tomllib.loads((data / "errors.toml").read_text(encoding="utf-8"))["error"]
    links = [s for e in errors for s in e["sources"]]
    assert not [s for s in links if s.startswith("https://github.com/ROCm/ROCm/issues/")]
    moved = "https://github.com/ROCm/legacy-rocm-build/issues/"
    cited = {s.removeprefix(moved) for s in links if s.startswith(moved)}
    for number in ("4749", "4068", "4215", "4435", "2767", "1794", "5106", "3561", "6323"):
        assert number in cited, number


def test_gfx1201_cards_first_releases_follow_amds_release_notes() -> None:
    """Issue 35 item 2: AMD's 6.4.1 release notes introduce the RX 9070 and RX 9070 GRE with the
    RX 9070 XT and AI PRO R9700, its 6.4.1 system requirements list them, and AMD staff said so on
    ROCm/legacy-rocm-build#4485; the matrix's OS footnote that left them out is an omission, not
    the supported list. The AI PRO R9600D is in none of these (its first release stays unknown)."""
    for name in ("RX 9070 XT", "AI PRO R9700", "RX 9070", "RX 9070 GRE"):
        g = C.gpu(name)
        assert g and g.gfx == "gfx1201" and g.linux_official_since == "6.4.1", name
        assert not g.unverified and _NOTES_641 in g.source, name
        assert "ROCm/legacy-rocm-build#4485" in g.source, name
    rx9070 = C.gpu("RX 9070 GRE")
    assert rx9070 and "rocm-install-on-linux pull requests #462" in rx9070.source
    assert "#467 '[docs/6.4.1] Add RX 9070 GRE to supported GPUs list (#466)'" in rx9070.source
    assert "Not a conflict, an omission" in rx9070.source
    r9600d = C.gpu("AI PRO R9600D")
    assert r9600d and r9600d.gfx == "gfx1201" and not r9600d.linux_official_known
    assert "RELEASE.md@0570461363aac86950b2a7ffdacd57b45d7dc54b" in r9600d.source


def test_rx_9060_first_release_is_unverified_where_amds_matrices_disagree() -> None:
    """Issue 35 item 2: the RX 9060 (not XT) is named only in copies of AMD's 7.0.x matrices whose
    repository the index does not name, and the 7.0.0 one leaves it out: 7.0 line, unverified,
    the reason in the row (so check warns and init refuses it)."""
    rx9060 = C.gpu("RX 9060")
    assert rx9060 and rx9060.gfx == "gfx1200" and rx9060.linux_official_since == "7.0"
    assert rx9060.unverified and rx9060.source.startswith("unverified: the first release")
    assert "'For ROCm 7.0.0'" in rx9060.source and "'For ROCm 7.0.x'" in rx9060.source
    assert C.gpu("gfx1200") is C.gpu("RX 9060 XT")


def test_gfx115x_rows_cite_amds_install_pages_upstream_not_a_fork() -> None:
    """Issue 35 (citations to forks): the gfx115x rows cited AMD's 7.14.0 install page as read in
    a personal fork; they now cite AMD's own repositories (ROCm/legacy-rocm-build for 7.14.0,
    ROCm/rocm-docs for 7.14.1 and 10.0.0). The first Linux release stays unknown: those pages
    show support from 7.14.0 on, not where it began."""
    for gfx in ("gfx1150", "gfx1151", "gfx1152", "gfx1153"):
        g = C.gpu(gfx)
        assert g and g.gfx == gfx and not g.linux_official_known, gfx
        assert "richardokonicha" not in g.source, gfx
        assert "200-install.rst@bc2e763e075cf8bbe929461c2d156cb63f021666" in g.source, gfx
        assert "@50600d8da151e4ca8ce7fec9f68fa3048cc5bd85" in g.source, gfx
        assert "@0c31064a09a061b708758cc5bc9f74a9ede6c14f" in g.source, gfx
        assert f"rocm[libraries,device-{gfx}]==7.14.0" in g.source, gfx


def test_714_install_page_facts_cite_amds_repository_where_it_says_the_same() -> None:
    """Issue 35 (citations to forks): the pip SDK's 7.14.0 command, the WSL Ubuntu releases and
    librocdxg 1.2.1's install commands cite AMD's page upstream (ROCm/legacy-rocm-build), which
    has them word for word. Only 7.14.0's runfile -7 and amdgpu-install 31.40.1 still rest on the
    fork's revision (upstream's has -6 and 31.40); rocm.toml's comment says so."""
    import tomllib
    from pathlib import Path

    page = "ROCm/legacy-rocm-build docs/install/include/200-install.rst@" + _LEGACY_714
    data = Path(compat_mod.__file__).resolve().parents[1] / "data"
    wsl = tomllib.loads((data / "wsl.toml").read_text(encoding="utf-8"))
    (r121,) = [r for r in wsl["librocdxg"] if r["version"] == "1.2.1"]
    for source in (C.pip_sdk.source, wsl["dxg"]["ubuntu_source"], r121["source"]):
        assert page in source and "richardokonicha" not in source
    assert "rocm[libraries,device-gfxNNNN]==7.14.0, without devel" in C.pip_sdk.source
    assert "sudo apt install ./rocdxg-roct_1.2.1_amd64.deb" in r121["source"]
    rocm = (data / "rocm.toml").read_text(encoding="utf-8")
    assert "@bc2e763e075cf8bbe929461c2d156cb63f021666" in rocm
    assert "the runfile -7 and amdgpu-install 31.40.1 (31.40.1.314001-1) are read in a" in rocm


def test_ryzen_ai_max_pro_400_parts_are_gfx1151_from_7_14_0_unverified() -> None:
    """Issue 35 item 5: the Ryzen AI Max PRO 400 parts AMD's 7.14.0 notes add (read upstream as
    the ROCm/legacy-rocm-build release page of rocm-7.14.0), as a row of their own so that the
    lead on their WSL and Windows coverage does not mark Strix Halo's."""
    release = "https://github.com/ROCm/legacy-rocm-build/releases/tag/rocm-7.14.0"
    for name in ("Ryzen AI Max+ PRO 495", "Ryzen AI Max PRO 490", "Ryzen AI Max PRO 485"):
        g = C.gpu(name)
        assert g and g.gfx == "gfx1151" and g.linux_official_since == "7.14.0", name
        assert g.unverified and "ROCm 7.14.0 adds support for the following AMD APUs" in g.source
        assert release in g.source and "native-Windows coverage" in g.source
    strix = C.gpu("Ryzen AI Max+ 395")
    assert strix and not strix.unverified and C.gpu("gfx1151") is strix

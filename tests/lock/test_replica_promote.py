"""AMD's release promotion, by TheRock's own promote_packages.py (tests/replica/promote.py): the
7.14.0 release candidate that TheRock's packaging code builds (7.14.0rc1) is promoted to 7.14.0
with a keep list of GPU targets, and the real uv locks the result from a replica index on
127.0.0.1, as the other replica tests lock the stand-ins.

The keep list is the data's: envbuilder/data/torch.toml [gfx_set.amd-multi-arch-714], the 15
targets whose extras AMD's 7.14.0 and 7.14.1 install pages offer (gfx950, gfx942, gfx90a, gfx908,
gfx1201, gfx1200, gfx1100-gfx1103, gfx1030, gfx1150-gfx1153, in the pages' order; the set's
source cites them), so `check` and this promotion agree on what the 7.14 index carries.
Whether AMD's promotion of 7.14.0 passed that list is not known (a public report counted 25
rocm-sdk-device wheels on the index): the test shows what the script does with such a list,
not which list AMD used. Device wheels are built for gfx1010 (dropped; the build's
DEFAULT_TARGET_FAMILY), gfx1100 and gfx942 (kept)."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from replica.catalog import load_catalog
from replica.promote import Promotion, promote_release, promoted_catalog, sdist_member
from replica.server import ReplicaServer, serve
from replica.uvcompile import LINUX, CompileRequest, CompileResult, compile_pylock

from envbuilder.core.compatload import load_compat

RELEASE = "7.14.0"
RC = f"{RELEASE}rc1"
DEVICES = ("gfx1010", "gfx1100", "gfx942")
DROPPED, KEPT = "gfx1010", ("gfx1100", "gfx942")
KEEP = load_compat().gfx_sets["amd-multi-arch-714"].targets
# promote_packages.py repoints DEFAULT_TARGET_FAMILY and the generic `device` extra at the first
# kept target with 3+ digits: the data lists gfx950 first, as AMD's pages do
FIRST = KEEP[0]
WHEEL_TAG = "py3-none-linux_x86_64"
BOOTSTRAP = "rocm_bootstrap-1.0.0+replica-py3-none-any.whl"
APPEND = re.compile(r"^AVAILABLE_TARGET_FAMILIES\.append\('(gfx\w+)'\)$", re.M)
DEFAULT = re.compile(r"^DEFAULT_TARGET_FAMILY = ['\"](gfx\w+)['\"]$", re.M)


@pytest.fixture(scope="module")
def promotion() -> Promotion:
    amd = {f.filename: f.data for f in load_catalog().files if f.index == "amd"}
    return promote_release(RELEASE, 1, DEVICES, KEEP, extra_files={BOOTSTRAP: amd[BOOTSTRAP]})


def _wheel_text(data: bytes, suffix: str) -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name).decode()


def _version(metadata: str) -> str:
    found = re.search(r"^Version: (.+)$", metadata, re.M)
    assert found is not None
    return found.group(1)


def test_the_release_candidate_is_promoted_to_the_release(promotion: Promotion) -> None:
    sdk = ("rocm_sdk_core", "rocm_sdk_libraries", *(f"rocm_sdk_device_{d}" for d in KEPT))
    assert set(promotion.before) == {
        f"rocm-{RC}.tar.gz",
        *(f"{n}-{RC}-{WHEEL_TAG}.whl" for n in sdk),
        f"rocm_sdk_device_{DROPPED}-{RC}-{WHEEL_TAG}.whl",
        BOOTSTRAP,
    }
    assert set(promotion.after) == {
        f"rocm-{RELEASE}.tar.gz",
        *(f"{n}-{RELEASE}-{WHEEL_TAG}.whl" for n in sdk),
        BOOTSTRAP,
    }
    for name in sdk:
        data = promotion.after[f"{name}-{RELEASE}-{WHEEL_TAG}.whl"]
        metadata = _wheel_text(data, f"{name}-{RELEASE}.dist-info/METADATA")
        assert _version(metadata) == RELEASE and RC not in metadata, name
    # a device wheel's pin of the libraries wheel follows
    device = promotion.after[f"rocm_sdk_device_gfx1100-{RELEASE}-{WHEEL_TAG}.whl"]
    assert f"Requires-Dist: rocm-sdk-libraries=={RELEASE}" in _wheel_text(device, "/METADATA")
    sdist = promotion.after[f"rocm-{RELEASE}.tar.gz"]
    for member in ("PKG-INFO", "src/rocm.egg-info/PKG-INFO", "src/rocm.egg-info/requires.txt"):
        assert RC not in sdist_member(sdist, member), member
    assert _version(sdist_member(sdist, "PKG-INFO")) == RELEASE
    assert f"__version__ = '{RELEASE}'" in sdist_member(sdist, "src/rocm_sdk/_dist_info.py")


def test_the_keep_list_drops_a_target_everywhere(promotion: Promotion) -> None:
    before = promotion.before[f"rocm-{RC}.tar.gz"]
    after = promotion.after[f"rocm-{RELEASE}.tar.gz"]
    # the sdist's _dist_info.py (what its setup.py builds the extras from at install time)
    old, new = (sdist_member(s, "src/rocm_sdk/_dist_info.py") for s in (before, after))
    assert DEFAULT.findall(old) == [DROPPED] and DEFAULT.findall(new) == [FIRST] == ["gfx950"]
    assert len(APPEND.findall(old)) == 26 and sorted(APPEND.findall(new)) == sorted(KEEP)
    # its static metadata: no extra of the dropped target; the generic `device` repointed
    pkg_info = sdist_member(after, "PKG-INFO")
    assert f"device-{DROPPED}" not in pkg_info and f"device-{DROPPED}" in sdist_member(
        before, "PKG-INFO"
    )
    assert f'rocm-sdk-device-{FIRST}=={RELEASE}; extra == "device"' in pkg_info
    assert f"[device-{DROPPED}]" not in sdist_member(after, "src/rocm.egg-info/requires.txt")
    # the multi-arch SDK wheels' _dist_info.py too
    for name in ("rocm_sdk_core", "rocm_sdk_libraries"):
        data = promotion.after[f"{name}-{RELEASE}-{WHEEL_TAG}.whl"]
        dist_info = _wheel_text(data, f"{name}/_dist_info.py")
        assert DEFAULT.findall(dist_info) == [FIRST], name
        assert sorted(APPEND.findall(dist_info)) == sorted(KEEP), name
    assert "Skipping per-gfx wheel for non-kept arch" in promotion.log


def test_rocm_bootstrap_is_left_as_it_is(promotion: Promotion) -> None:
    assert promotion.after[BOOTSTRAP] == promotion.before[BOOTSTRAP]
    skipped = rf"^Skipping rocm_bootstrap file: .*/{re.escape(BOOTSTRAP)}$"
    assert re.search(skipped, promotion.log, re.M)


# --- the promoted release through the real resolution path -------------------------------------


@pytest.fixture(scope="module")
def promoted(
    promotion: Promotion, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicaServer]:
    amd = load_catalog().indexes["amd"]
    catalog = promoted_catalog(promotion.after, amd)
    with serve(catalog, tmp_path_factory.mktemp("promoted")) as server:
        yield server


def _lock(server: ReplicaServer, work: Path, packages: tuple[str, ...]) -> CompileResult:
    """Recipe A's shape (every ROCm-family name pinned to AMD's index and listed), the `rocm`
    sdist built by TheRock's setup.py in this Python (setuptools, no build isolation: the
    replica's PyPI holds no real setuptools)."""
    names = {p.split("[")[0].split("=")[0] for p in packages}
    request = CompileRequest(
        packages=packages,
        platform=LINUX,
        pins=dict.fromkeys(names, "amd"),
        explicit={"amd": server.url("amd")},
        extra_args=("--no-build-isolation",),
    )
    return compile_pylock(
        request, work, default_index=server.url("pypi"), cache=work.parent / "uv-cache"
    )


def test_uv_locks_the_promoted_release(promoted: ReplicaServer, tmp_path: Path) -> None:
    wanted = ("rocm[libraries,device-gfx1100]", "rocm-sdk-core", "rocm-sdk-libraries")
    result = _lock(promoted, tmp_path / "run", (*wanted, "rocm-sdk-device-gfx1100"))
    assert result.ok, result.stderr
    assert result.versions() == {
        "rocm": RELEASE,
        "rocm-sdk-core": RELEASE,
        "rocm-sdk-libraries": RELEASE,
        "rocm-sdk-device-gfx1100": RELEASE,
    }
    rocm = result.packages()["rocm"]
    assert rocm.kinds == ("sdist",) and rocm.indexes() == {"amd"}


def test_the_dropped_target_and_the_candidate_are_not_served(
    promoted: ReplicaServer, tmp_path: Path
) -> None:
    base = ("rocm[libraries]", "rocm-sdk-core", "rocm-sdk-libraries")
    dropped = _lock(promoted, tmp_path / "dropped", (*base, f"rocm-sdk-device-{DROPPED}"))
    assert not dropped.ok and f"rocm-sdk-device-{DROPPED}" in dropped.stderr
    candidate = _lock(promoted, tmp_path / "candidate", (f"rocm=={RC}", "rocm-sdk-core"))
    assert not candidate.ok and RC in candidate.stderr
    # the dropped target's extra is gone from the sdist uv builds: asking for it locks no device
    with_extra = (f"rocm[libraries,device-{DROPPED}]", *base[1:])
    extra = _lock(promoted, tmp_path / "extra", with_extra)
    assert extra.ok, extra.stderr
    assert not [n for n in extra.packages() if n.startswith("rocm-sdk-device-")]

"""The replica cannot drift from AMD's packaging: its stand-ins' dependency metadata
(Requires-Dist, Provides-Extra, markers) is diffed against what AMD's own code makes.

  * the `rocm` sdist and the rocm-sdk-core, -libraries and -device-<t> wheels: the metadata
    ROCm/TheRock's build tools write at the commit of each release (7.14.0: tag therock-7.14;
    7.14.1: release/therock-7.14; 10.1.0: release/bkc/therock-10.1-20260811), recorded with its
    sources in tests/data/replica/therock-metadata.toml, which that code (vendored in
    tests/data/therock/) remakes in tests/lock/test_therockmeta.py;
  * torch's host and device wheels: the rules of rocm_kpack's wheel splitter computed with AMD's
    rocm-bootstrap (from PyPI), themselves checked against the METADATA lines the splitter's own
    tests expect (ROCm/rocm-systems shared/kpack/tests/test_wheel_splitter.py).

Device wheels are recorded for two targets (gfx1100, gfx942); the replica makes every target's
from the same template."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from replica.amdcode import (
    kpack_device_requirements,
    kpack_host_requirements,
    metadata_fields,
    therock_metadata,
)
from replica.catalog import Catalog, StandinFile, load_catalog
from replica.distributions import BUILD_HOST_TARGET

DEVICES = ("gfx1100", "gfx942")
#: release -> (replica index, torch version, the bundles above target level its split found)
RELEASES = {
    "7.14.0": ("amd", "2.12.0+rocm7.14.0", ("gfx11",)),
    "7.14.1": ("amd", "2.12.0+rocm7.14.1", ("gfx11",)),
    "10.1.0": ("amd-next", "2.14.0+rocm10.1.0", ("gfx110x", "gfx115x", "gfx12_0")),
}
PREFIX = "amd-torch-device"


def normalized(line: str) -> tuple[str, str, tuple[str, ...], str]:
    """A requirement in a form two spellings of it share (spaces, marker parentheses)."""
    req = Requirement(line)
    marker = str(req.marker).replace("(", "").replace(")", "") if req.marker else ""
    assert " or " not in marker, line  # parentheses only ever group `and`s here
    name = str(canonicalize_name(req.name))
    return name, str(req.specifier), tuple(sorted(req.extras)), marker


def dependencies(text: str) -> tuple[set[tuple[str, str, tuple[str, ...], str]], set[str]]:
    fields = metadata_fields(text)
    requires = {normalized(r) for r in fields.get("Requires-Dist", [])}
    return requires, set(fields.get("Provides-Extra", []))


def standin_metadata(f: StandinFile) -> str:
    """A stand-in's METADATA; for the `rocm` sdist, what its build gives with no target asked
    for (its backend puts DEFAULT_TARGET_FAMILY where the build host's target goes)."""
    if f.filename.endswith(".tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(f.data)) as tar:
            files = {m.name.split("/", 1)[1]: tar.extractfile(m) for m in tar.getmembers()}
            read = {k: v.read().decode() for k, v in files.items() if v is not None}
        return read["METADATA.in"].replace(BUILD_HOST_TARGET, read["DEFAULT_TARGET_FAMILY"].strip())
    with zipfile.ZipFile(io.BytesIO(f.data)) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name).decode()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _standin(catalog: Catalog, index: str, filename: str) -> StandinFile:
    found = [f for f in catalog.files if f.index == index and f.filename == filename]
    assert found, f"the replica's {index} index has no {filename} (AMD's code makes it)"
    return found[0]


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_sdk_standins_carry_the_metadata_therocks_code_makes(
    release: str, catalog: Catalog
) -> None:
    index = RELEASES[release][0]
    made = therock_metadata(release)
    assert set(made) == {
        f"rocm-{release}.tar.gz",
        f"rocm_sdk_core-{release}-py3-none-linux_x86_64.whl",
        f"rocm_sdk_libraries-{release}-py3-none-linux_x86_64.whl",
        *(f"rocm_sdk_device_{d}-{release}-py3-none-linux_x86_64.whl" for d in DEVICES),
    }
    for filename, text in made.items():
        ours = standin_metadata(_standin(catalog, index, filename))
        assert dependencies(ours) == dependencies(text), filename
    # what the diff covers: the sdist's every per-target extra, with markers
    requires, extras = dependencies(made[f"rocm-{release}.tar.gz"])
    assert {"device-all", "device-gfx1100", "libraries", "devel"} <= extras
    assert (
        "rocm-sdk-device-gfx942",
        f"=={release}",
        (),
        'sys_platform == "linux" and extra == "device-gfx942"',
    ) in requires


def test_the_kpack_rules_give_the_lines_the_splitters_own_tests_expect() -> None:
    """rocm-systems shared/kpack/tests/test_wheel_splitter.py: a split that found gfx1100 and
    its family gfx11 (version 2.10.0+rocm7.1) writes these four lines into the host METADATA."""
    extras, requires = kpack_host_requirements(PREFIX, "2.10.0+rocm7.1", {"gfx1100", "gfx11"})
    expected = [
        'amd-torch-device-gfx1100 == 2.10.0+rocm7.1; extra == "device-gfx1100"',
        'amd-torch-device-gfx11 == 2.10.0+rocm7.1; extra == "device-gfx1100"',
        'amd-torch-device-gfx11 == 2.10.0+rocm7.1; extra == "device-all"',
        'amd-torch-device-gfx1100 == 2.10.0+rocm7.1; extra == "device-all"',
    ]
    assert set(expected) <= set(requires) and extras == ["device-gfx1100", "device-all"]


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_torch_standins_carry_the_metadata_of_amds_split(
    release: str, catalog: Catalog
) -> None:
    index, version, families = RELEASES[release]
    for platform, tag in (("linux", "manylinux_2_28_x86_64"), ("windows", "win_amd64")):
        keys = {*catalog.targets[platform], *families}
        extras, requires = kpack_host_requirements(PREFIX, version, keys)
        host = _standin(catalog, index, f"torch-{version}-cp312-cp312-{tag}.whl")
        ours_requires, ours_extras = dependencies(standin_metadata(host))
        device_lines = {r for r in ours_requires if r[0] in ("rocm-bootstrap",)}
        device_lines |= {r for r in ours_requires if r[0].startswith(PREFIX)}
        assert device_lines == {normalized(r) for r in requires}, (release, platform)
        assert ours_extras == set(extras), (release, platform)
        for key in ("gfx1100", *families):
            sdk = f"rocm-sdk-device-@GFXARCH@ == {release}"
            name, lines = kpack_device_requirements("torch", version, PREFIX, key, [sdk], keys)
            filename = f"{name.replace('-', '_')}-{version}-cp312-cp312-{tag}.whl"
            ours, _ = dependencies(standin_metadata(_standin(catalog, index, filename)))
            assert ours == {normalized(r) for r in lines}, filename

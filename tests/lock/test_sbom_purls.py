"""The SBOM's purls as purl-spec's types say (issue 34): deb purls with `arch` and `distro`,
`repository_url` on a pypi purl whose package comes from a named index, the base image as
`pkg:oci` with its digest and `repository_url`; each parsed back with packageurl-python, the
document valid against the CycloneDX 1.6 schema and the same bytes for the same lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from envbuilder.core.project import Project
from envbuilder.lock import lockfile
from envbuilder.lock.sbom import (
    _distro,
    deb_purl,
    dpkg_architectures,
    image_parts,
    oci_purl,
    pypi_purl,
    sbom_bytes,
)
from envbuilder.lock.wheelcache import LockedFile, locked_files
from envbuilder.targets.base import Artifact

ROOT = Path(__file__).resolve().parents[2]


def _shipped_cpu_docker() -> tuple[Project, dict[str, Any]]:
    project = Project.from_spec(ROOT / "environments.toml")
    artifact = Artifact("docker", "cpu", "ref", "sha256:" + "1" * 64)
    data = sbom_bytes(project, "cpu", "docker", artifact)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    assert sbom_bytes(project, "cpu", "docker", artifact) == data  # same lock, same bytes
    return project, json.loads(data)


def test_every_purl_of_the_shipped_cpu_sbom_parses_and_carries_its_qualifiers() -> None:
    project, doc = _shipped_cpu_docker()
    lock = lockfile.load_env_lock(project, "cpu")
    assert lock is not None
    t = lock.targets["docker"]
    purls = {c["bom-ref"]: PackageURL.from_string(c["purl"]) for c in doc["components"]}
    assert all(p.to_string() == c["purl"] for c in doc["components"] for p in [purls[c["bom-ref"]]])
    debs = [p for p in purls.values() if p.type == "deb"]
    assert debs and all(
        p.namespace == "debian" and p.qualifiers == {"arch": "amd64", "distro": "debian-12"}
        for p in debs
    )
    (python3,) = [p for p in debs if p.name == "python3"]
    assert python3.to_string() == "pkg:deb/debian/python3@3.11.2-1%2Bb1?arch=amd64&distro=debian-12"
    (oci,) = [p for p in purls.values() if p.type == "oci"]
    assert t.base_image is not None
    assert (oci.name, oci.version) == ("debian", t.base_image.partition("@")[2])
    assert oci.qualifiers == {"repository_url": "docker.io/library/debian", "tag": "bookworm-slim"}
    files = {f.name: f for f in locked_files(project.lockfiles / t.pylock, t.platform, t.python)}
    pypi = {p.name: p for p in purls.values() if p.type == "pypi"}
    assert set(pypi) == set(files)
    for name, purl in pypi.items():
        index = files[name].index  # torch's: the named index; the rest: the default one
        assert purl.qualifiers == ({"repository_url": index.rstrip("/")} if index else {})
    assert pypi["torch"].qualifiers["repository_url"].endswith("/whl/cpu")


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("debian:bookworm-slim@sha256:" + "a" * 64, ("debian", "debian-12")),
        ("debian:trixie", ("debian", "debian-13")),
        ("debian:12", ("debian", "debian-12")),
        ("debian:sid", ("debian", "sid")),  # no number: the codename, as purl-spec allows
        ("ubuntu:24.04", ("ubuntu", "ubuntu-24.04")),
        ("ubuntu:noble", ("ubuntu", "noble")),
        ("rocm/dev-ubuntu-22.04:6.4@sha256:" + "b" * 64, ("ubuntu", "ubuntu-22.04")),
        ("debian", ("debian", None)),
        (None, ("debian", None)),
    ],
)
def test_distro_of_a_base_image(base: str | None, expected: tuple[str, str | None]) -> None:
    assert _distro(base) == expected


def test_image_parts_resolve_short_names_as_the_engine_does() -> None:
    digest = "sha256:" + "c" * 64
    assert image_parts(f"debian:bookworm-slim@{digest}") == (
        "docker.io",
        "library/debian",
        "bookworm-slim",
        digest,
    )
    assert image_parts("rocm/pytorch:latest") == ("docker.io", "rocm/pytorch", "latest", None)
    assert image_parts(f"ghcr.io/org/img@{digest}") == ("ghcr.io", "org/img", None, digest)
    assert image_parts("localhost:5000/x:1") == ("localhost:5000", "x", "1", None)
    purl = oci_purl(f"ghcr.io/Org/Img:v1@{digest}")
    assert purl is not None
    assert PackageURL.from_string(purl.to_string()).to_dict()["qualifiers"] == {
        "repository_url": "ghcr.io/Org/Img",
        "tag": "v1",
    }
    assert purl.name == "img"  # purl-spec: the last fragment, lowercased
    assert oci_purl("debian:bookworm-slim") is None  # no digest, no oci purl


def test_deb_and_pypi_purls_of_other_platforms_and_indexes() -> None:
    target = lockfile.TargetLock(
        platform="aarch64-manylinux_2_28",
        python="3.12",
        pylock="p.toml",
        pylock_sha256="0" * 64,
        base_image="ubuntu:24.04",
    )
    assert deb_purl("libc6:arm64", "2.39-0ubuntu8", target).to_string() == (
        "pkg:deb/ubuntu/libc6@2.39-0ubuntu8?arch=arm64&distro=ubuntu-24.04"
    )
    f = LockedFile("rocm", "7.0", "rocm-7.0.tar.gz", "https://x/rocm-7.0.tar.gz", "0" * 64, 1)
    assert pypi_purl(f).to_string() == "pkg:pypi/rocm@7.0"
    named = LockedFile(**{**f.__dict__, "index": "https://repo.example/rocm/simple/"})
    assert PackageURL.from_string(pypi_purl(named).to_string()).qualifiers == {
        "repository_url": "https://repo.example/rocm/simple"
    }


# --- `arch` from the built artifact's dpkg status -----------------------------------------------

#: A dpkg status as an image's /var/lib/dpkg/status holds it: an arch-independent package, an
#: arch-dependent one, one Multi-Arch: same package installed for two archs, a removed one whose
#: conffiles stay (not installed: skipped), multi-line fields.
DPKG_STATUS = b"""\
Package: tzdata
Status: install ok installed
Priority: required
Architecture: all
Multi-Arch: foreign
Version: 2025b-0+deb12u2
Description: time zone and daylight-saving time data
 This package contains data required for the implementation of
 standard local time for many representative locations around the globe.

Package: python3
Status: install ok installed
Architecture: amd64
Version: 3.11.2-1+b1
Depends: python3.11 (>= 3.11.2-1~)

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u13

Package: libc6
Status: install ok installed
Architecture: i386
Version: 2.36-9+deb12u13

Package: media-types
Status: deinstall ok config-files
Architecture: all
Version: 10.0.0
Conffiles:
 /etc/mime.types 0123456789abcdef0123456789abcdef
"""


def _debian_target() -> lockfile.TargetLock:
    return lockfile.TargetLock(
        platform="x86_64-manylinux_2_28",
        python="3.11",
        pylock="p.toml",
        pylock_sha256="0" * 64,
        base_image="debian:bookworm-slim",
    )


def test_dpkg_status_parser_reads_each_installed_packages_architecture() -> None:
    assert dpkg_architectures(DPKG_STATUS) == {
        ("tzdata", "2025b-0+deb12u2"): frozenset({"all"}),
        ("python3", "3.11.2-1+b1"): frozenset({"amd64"}),
        ("libc6", "2.36-9+deb12u13"): frozenset({"amd64", "i386"}),
    }
    assert dpkg_architectures(b"") == {}


@pytest.mark.parametrize(
    "broken",
    [
        DPKG_STATUS.replace(b"Architecture: all\n", b""),  # an installed package without it
        DPKG_STATUS.replace(b"Architecture: all", b"Architecture: All Arches"),
        DPKG_STATUS.replace(b"Version: 3.11.2-1+b1", b"Version: "),
        DPKG_STATUS.replace(b"Package: python3", b"Package python3"),  # no field
        DPKG_STATUS.replace(b"Package: tzdata", b" continued"),  # continuation of nothing
        DPKG_STATUS.replace(b"Priority: required", b"Version: 1"),  # a field twice
        DPKG_STATUS + DPKG_STATUS.split(b"\n\n")[1] + b"\n",  # python3 listed twice
        b"\x00\xff\xfe garbage",
    ],
)
def test_a_malformed_dpkg_status_gives_no_answer(broken: bytes) -> None:
    assert dpkg_architectures(broken) is None


def test_deb_purl_says_the_installed_architecture_all_for_tzdata() -> None:
    target = _debian_target()
    installed = dpkg_architectures(DPKG_STATUS)
    tzdata = deb_purl("tzdata", "2025b-0+deb12u2", target, installed)
    assert tzdata.to_string() == "pkg:deb/debian/tzdata@2025b-0%2Bdeb12u2?arch=all&distro=debian-12"
    assert deb_purl("python3", "3.11.2-1+b1", target, installed).qualifiers["arch"] == "amd64"
    assert deb_purl("libc6:i386", "2.36-9+deb12u13", target, installed).qualifiers["arch"] == "i386"
    assert deb_purl("libc6", "2.36-9+deb12u13", target, installed).qualifiers["arch"] == "amd64"
    # not in the status (another version, another package), or no status: the lock's arch
    assert deb_purl("tzdata", "2024a-1", target, installed).qualifiers["arch"] == "amd64"
    assert deb_purl("tzdata", "2025b-0+deb12u2", target).qualifiers["arch"] == "amd64"


def test_the_shipped_cpu_sbom_says_arch_all_from_a_dpkg_status() -> None:
    """media-types (pinned in the cpu lock) is `Architecture: all`: with the image's dpkg
    status its purl says so; a malformed status gives the lock-only bytes, not a crash."""
    project = Project.from_spec(ROOT / "environments.toml")
    lock = lockfile.load_env_lock(project, "cpu")
    assert lock is not None
    pins = {n: v for stage in lock.targets["docker"].apt.values() for n, v in stage.items()}
    status = "".join(
        f"Package: {n}\nStatus: install ok installed\nVersion: {v}\nArchitecture: {arch}\n\n"
        for n, v in pins.items()
        for arch in ["all" if n == "media-types" else "amd64"]
    ).encode()
    artifact = Artifact("docker", "cpu", "ref", "sha256:" + "1" * 64)
    data = sbom_bytes(project, "cpu", "docker", artifact, status)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    debs = {
        p.name: p.qualifiers["arch"]
        for c in json.loads(data)["components"]
        for p in [PackageURL.from_string(c["purl"])]
        if p.type == "deb"
    }
    assert debs.pop("media-types") == "all"
    assert debs and set(debs.values()) == {"amd64"}
    lock_only = sbom_bytes(project, "cpu", "docker", artifact)
    assert sbom_bytes(project, "cpu", "docker", artifact, b"Package python3\n") == lock_only
    assert data != lock_only

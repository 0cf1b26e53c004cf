"""Licenses in the SBOM (issue 34): each Python package's, as its own wheel's core metadata
declares it, read from the wheel cache (keyed by the locked sha256, so the locked file itself);
nothing inferred, nothing for a package whose wheel is not there, none for apt packages."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from packaging.metadata import RawMetadata

from envbuilder.core.project import Project
from envbuilder.lock.lockfile import load_env_lock
from envbuilder.lock.sbom import declared_licenses, sbom_bytes, wheel_metadata
from envbuilder.lock.wheelcache import cache_path, locked_files
from envbuilder.targets.base import Artifact

ROOT = Path(__file__).resolve().parents[2]


def said(metadata: RawMetadata) -> list[tuple[str, str]]:
    """declared_licenses as (kind, value) pairs: ("expression", ...), ("id", ...), ("name", ...)."""
    out: list[tuple[str, str]] = []
    for lic in declared_licenses(metadata):
        assert lic.acknowledgement is not None and lic.acknowledgement.value == "declared"
        if isinstance(lic, LicenseExpression):
            out.append(("expression", lic.value))
        else:
            assert isinstance(lic, DisjunctiveLicense)
            out.append(("id", lic.id) if lic.id else ("name", str(lic.name)))
    return out


BSD = "License :: OSI Approved :: BSD License"


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        # PEP 639: the expression is the whole answer; License and classifiers are ignored
        (
            {"license_expression": "mit or apache-2.0", "license": "GPL", "classifiers": [BSD]},
            [("expression", "MIT OR Apache-2.0")],
        ),
        # an invalid expression states nothing; the other fields still do
        ({"license_expression": "Apache 2.0", "classifiers": [BSD]}, [("name", BSD)]),
        ({"license": "apache-2.0"}, [("id", "Apache-2.0")]),
        ({"license": "MIT OR Apache-2.0"}, [("expression", "MIT OR Apache-2.0")]),
        # a name as written (mpmath, sympy), with the most specific classifier of a chain
        (
            {"license": "BSD", "classifiers": ["License :: OSI Approved", BSD, "Topic :: X"]},
            [("name", "BSD"), ("name", BSD)],
        ),
        ({"license": "UNKNOWN"}, []),
        ({"license": "Copyright (c) 2010 Someone\n\nPermission is hereby granted..."}, []),
        ({"license": "x" * 101}, []),
        ({}, []),
    ],
)
def test_declared_licenses(metadata: RawMetadata, expected: list[tuple[str, str]]) -> None:
    assert said(metadata) == expected


def make_wheel(path: Path, name: str, version: str, headers: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as whl:
        meta = f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n{headers}"
        whl.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        whl.writestr(f"{name}/__init__.py", "")
    return path


def test_wheel_metadata_reads_a_wheel_only(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "a-1.0-py3-none-any.whl", "a", "1.0", "License-Expression: MIT\n")
    assert (wheel_metadata(wheel) or {}).get("license_expression") == "MIT"
    assert wheel_metadata(tmp_path / "missing-1.0-py3-none-any.whl") is None
    (tmp_path / "bad-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    assert wheel_metadata(tmp_path / "bad-1.0-py3-none-any.whl") is None
    (tmp_path / "a-1.0.tar.gz").write_bytes(b"")  # an sdist: its license stays unknown
    assert wheel_metadata(tmp_path / "a-1.0.tar.gz") is None


def test_the_sbom_lists_the_licenses_of_the_wheels_in_the_cache(tmp_path: Path) -> None:
    """The shipped cpu docker SBOM with a wheel cache that holds two of its files (wheels made
    here, stored under the locked sha256 as `build` would): those two carry their declared
    licenses, every other package none, and the document still validates and is stable."""
    project = Project.from_spec(ROOT / "environments.toml", cache=tmp_path / "cache")
    lock = load_env_lock(project, "cpu")
    assert lock is not None
    t = lock.targets["docker"]
    files = {f.name: f for f in locked_files(project.lockfiles / t.pylock, t.platform, t.python)}
    for name, headers in (
        ("filelock", "License-Expression: MIT\n"),
        ("jinja2", f"Classifier: {BSD}\n"),
    ):
        f = files[name]
        make_wheel(cache_path(project, f.sha256, f.filename), name, f.version, headers)
    artifact = Artifact("docker", "cpu", "ref", "sha256:" + "1" * 64)
    data = sbom_bytes(project, "cpu", "docker", artifact)  # validates, or raises
    assert sbom_bytes(project, "cpu", "docker", artifact) == data
    components = json.loads(data)["components"]
    licensed = {c["name"]: c["licenses"] for c in components if "licenses" in c}
    assert licensed == {
        "filelock": [{"expression": "MIT", "acknowledgement": "declared"}],
        "jinja2": [{"license": {"name": BSD, "acknowledgement": "declared"}}],
    }
    assert any(c.get("purl", "").startswith("pkg:deb/") for c in components)  # apt: none

"""AMD's copies of PyPI's files on its whl-next index, made by TheRock's own dependency mirroring.

ROCm/TheRock's `build_tools/third_party/s3_management/update_dependencies.py` (vendored,
unmodified, in tests/data/therock/deps/; SOURCE.md there) copies the wheels of torch's and the
SDK's pure dependencies (its `PACKAGES_PER_PROJECT`) from PyPI into AMD's bucket, byte for byte,
where the aggregate whl-next index serves them (`rocm_whl_next_ownership.yaml`: owner
`core/whl-next`). Here its `upload_missing_whls` runs as TheRock's structured mode calls it
(`structured=True, index="whl-next"`), reading the replica's PyPI instead of PyPI (its
`download` replaced) and "uploading" into a bucket that keeps the files in memory (`boto3` and
`botocore` are stand-ins while it is imported). What it uploads is what the replica's whl-next
serves as AMD's copies.
"""

from __future__ import annotations

import contextlib
import html
import importlib.machinery
import importlib.util
import io
import sys
import types
import urllib.error
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

DEPS = Path(__file__).resolve().parent.parent / "data" / "therock" / "deps"
SCRIPT = DEPS / "build_tools" / "third_party" / "s3_management" / "update_dependencies.py.txt"


class _ClientError(Exception):
    """botocore's ClientError as update_dependencies.py reads it (`exc.response`)."""

    def __init__(self, response: Mapping[str, Any], operation: str) -> None:
        super().__init__(operation)
        self.response = response


class MemoryBucket:
    """The S3 bucket the script writes to: `objects` maps each key to the bytes put there."""

    name = "replica"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.meta = types.SimpleNamespace(client=self)

    def head_object(self, Bucket: str, Key: str) -> None:
        if Key not in self.objects:
            raise _ClientError({"Error": {"Code": "404"}}, "HeadObject")

    def Object(self, key: str) -> Any:
        def put(ContentType: str, Body: bytes) -> None:
            self.objects[key] = Body

        return types.SimpleNamespace(put=put)


def _standins() -> dict[str, types.ModuleType]:
    modules = {n: types.ModuleType(n) for n in ("boto3", "boto3.resources", "boto3.resources.base")}
    modules["boto3.resources.base"].ServiceResource = object  # type: ignore[attr-defined]
    modules["botocore"] = types.ModuleType("botocore")
    modules["botocore.exceptions"] = types.ModuleType("botocore.exceptions")
    modules["botocore.exceptions"].ClientError = _ClientError  # type: ignore[attr-defined]
    return modules


def load_update_dependencies() -> types.ModuleType:
    """TheRock's update_dependencies.py as a module (its S3 imports stood in for)."""
    loader = importlib.machinery.SourceFileLoader("therock_update_dependencies", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, _standins()):
        loader.exec_module(module)
    return module


def _wheel_version(filename: str) -> Version:
    return Version(str(parse_wheel_filename(filename)[1]))


def _pypi_reader(pypi: Mapping[str, bytes]) -> Any:
    """`download(url)` over the replica's PyPI files (file name -> bytes): a project page for
    `.../simple/<project>` (links in version order, as PyPI lists uploads), else the file the
    link names. A project the replica's PyPI lacks answers 404, as PyPI would."""
    by_project: dict[str, list[str]] = {}
    for filename in pypi:
        if filename.endswith(".whl"):
            name = str(parse_wheel_filename(filename)[0])
            by_project.setdefault(name, []).append(filename)

    def download(url: str) -> bytes:
        path = urlsplit(url).path
        if "/simple/" in path:
            project = str(canonicalize_name(path.rstrip("/").rsplit("/", 1)[-1]))
            if project not in by_project:
                raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)  # type: ignore[arg-type]
            files = sorted(by_project[project], key=_wheel_version)
            links = "\n".join(f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in files)
            return f"<html><body>\n{links}\n</body></html>\n".encode("ascii")
        return pypi[path.rsplit("/", 1)[-1]]

    return download


def mirror_packages(module: types.ModuleType, projects: Sequence[str]) -> dict[str, dict[str, Any]]:
    """TheRock's `PACKAGES_PER_PROJECT` entries of `projects` (its own selection function)."""
    chosen: dict[str, dict[str, Any]] = {}
    for project in projects:
        chosen.update(module.get_selected_packages(package=project))
    return chosen


def mirrored_files(
    pypi: Mapping[str, bytes], projects: Sequence[str], skip: Collection[str] = ()
) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of every wheel TheRock's mirroring copies from `pypi` (the replica's
    PyPI: file name -> bytes) into core/whl-next for `projects`, less the packages of `skip`."""
    module = load_update_dependencies()
    bucket = MemoryBucket()
    with mock.patch.object(module, "download", _pypi_reader(pypi)):
        for name, info in mirror_packages(module, projects).items():
            if str(canonicalize_name(name)) in skip:
                continue
            for version in info["versions"]:
                with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
                    module.upload_missing_whls(
                        bucket, name, target_version=version, structured=True, index="whl-next"
                    )
    for key, data in sorted(bucket.objects.items()):
        yield key.rsplit("/", 1)[-1], data

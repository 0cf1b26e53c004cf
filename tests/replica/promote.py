"""AMD's release promotion of the ROCm pip SDK, run by TheRock's own promote_packages.py on the
pre-release that TheRock's own packaging code builds.

Source: ROCm/TheRock `build_tools/packaging/promote_packages.py` and what it imports,
`build_tools/third_party/change_wheel_version/change_wheel_version.py` (AMD's modified copy of
hauntsaninja/change_wheel_version), at commit 89553ce3746eda74ade42557470d25e37c91b6f0 (main,
2026-08-22: the commit of the replica's dependency mirroring, tests/data/therock/deps/). Both are
vendored unmodified in tests/data/therock/promote/, with their licences (TheRock's MIT LICENSE;
change_wheel_version's own MIT LICENSE) and SOURCE.md (paths, sha256). The script did not exist at
the 7.14 commits (tag therock-7.14, release/therock-7.14), which predate it; AMD runs it from its
main branch on downloaded release candidates (build_tools/packaging/how_to_do_release.md).

What runs (`promote_release`):
  1. the pre-release: tests/therockmeta.py's run of TheRock's packaging code at the release's
     commit (tests/data/therock/<release>/), with build_python_packages' --version set to
     `<release>rc<N>`, as compute_rocm_package_version.py makes it for a prerelease build: the
     `rocm` sdist and the rocm-sdk-core, -libraries and -device-<t> wheels, tiny (no payload but
     one stand-in file, below), plus the replica's rocm-bootstrap stand-in as a file that the
     download step would bring along;
  2. `promote_packages.main(dir, delete=True, src_version_type="rc", multi_arch_targets=keep)`,
     i.e. `promote_packages.py --input-dir=dir --delete-old-on-success
     [--multi-arch-targets=...]` (how_to_do_release.md step 2): rc -> final in each wheel's
     METADATA, dist-info name, `_dist_info.py` and the sdist's PKG-INFO, egg-info and
     `_dist_info.py`; with a keep list, the device wheels of other targets deleted, their
     `device-<t>` extras dropped from the aggregator metadata (the sdist's PKG-INFO and
     requires.txt), their AVAILABLE_TARGET_FAMILIES entries dropped from every multi-arch
     `_dist_info.py`, and DEFAULT_TARGET_FAMILY and the generic `device` extra repointed when
     they named a dropped target; files named `rocm_bootstrap*` skipped (left as they are).

Stand-ins: the core wheel's `_rocm_sdk_core/share/therock/therock_manifest.json` (the build's
manifest, from its base artifact: promote_packages rewrites the version in it, and fails without
it) is a one-line JSON holding the one key build_python_packages.py reads from it. The script's
third-party imports (pkginfo, installer, wheel, packaging: its requirements.txt) are the genuine
packages, test dependencies of this project.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from unittest import mock

from packaging.utils import parse_sdist_filename, parse_wheel_filename
from therockmeta import (
    _build_environment,
    _populated_packages,
    load_py_packaging,
    replica_targets,
    therock_tree,
)

from replica.catalog import Catalog, IndexInfo, StandinFile

#: The folder of tests/data/therock/ that holds TheRock's promotion code.
PROMOTE = "promote"
#: The manifest promote_packages.py rewrites in the core wheel (path inside its package tree).
CORE_MANIFEST = Path("platform/_rocm_sdk_core/share/therock/therock_manifest.json")


def load_promote_packages(tree: Path) -> ModuleType:
    """TheRock's promote_packages.py from `tree` (laid out by therock_tree): it loads
    change_wheel_version.py from ../third_party relative to itself."""
    path = tree / "build_tools" / "packaging" / "promote_packages.py"
    spec = importlib.util.spec_from_file_location("therock_promote_packages", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Promotion:
    """The files before and after promotion (file name -> bytes), and the script's output."""

    before: dict[str, bytes]
    after: dict[str, bytes]
    log: str


def prerelease_build(
    release: str,
    version: str,
    dest: Path,
    devices: Sequence[str],
    targets: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """TheRock's packaging code at `release`'s commit, building `version` (e.g. 7.14.0rc1) for
    the replica's targets with device wheels of `devices`, into `dest`/dist (returned)."""
    targets = targets if targets is not None else replica_targets()
    (dest / "no-tools").mkdir(parents=True)
    env = _build_environment(dest / "no-tools")
    py_packaging = load_py_packaging(therock_tree(release, dest / "therock"))
    wheels, sdist = _populated_packages(py_packaging, dest / "packages", version, targets, devices)
    (core,) = [w for w in wheels if w.name == "rocm-sdk-core"]
    manifest = core / CORE_MANIFEST
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"flags": {"KPACK_SPLIT_ARTIFACTS": True}}) + "\n")
    dist = dest / "dist"
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(io.StringIO()):
        py_packaging.build_packages(dest / "packages", package_dirs=[*wheels, sdist], dist_dir=dist)
    return dist


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def promote_release(
    release: str,
    rc: int,
    devices: Sequence[str],
    keep: Sequence[str] | None,
    extra_files: Mapping[str, bytes] | None = None,
) -> Promotion:
    """Build `<release>rc<rc>` with TheRock's code, add `extra_files` (file name -> bytes) to the
    download folder, and promote it to `release` with TheRock's promote_packages.py, keeping the
    targets `keep` (None: no --multi-arch-targets, every target stays)."""
    with tempfile.TemporaryDirectory(prefix="therock-promote-") as tmp:
        work = Path(tmp)
        dist = prerelease_build(release, f"{release}rc{rc}", work / "build", devices)
        for name, data in (extra_files or {}).items():
            (dist / name).write_bytes(data)
        before = _files(dist)
        script = load_promote_packages(therock_tree(PROMOTE, work / "promote"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            script.main(
                dist,
                delete=True,
                src_version_type="rc",
                dest_version="release",
                multi_arch_targets=list(keep) if keep is not None else None,
            )
        return Promotion(before, _files(dist), out.getvalue())


def sdist_member(data: bytes, member: str) -> str:
    """The text of `member` (a path under the sdist's top folder) of an sdist."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (top,) = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        extracted = tar.extractfile(f"{top}/{member}")
        assert extracted is not None, member
        return extracted.read().decode()


def _name_version(filename: str) -> tuple[str, str]:
    if filename.endswith(".whl"):
        name, version, _, _ = parse_wheel_filename(filename)
    else:
        name, version = parse_sdist_filename(filename)
    return str(name), str(version)


def promoted_catalog(files: Mapping[str, bytes], amd: IndexInfo) -> Catalog:
    """A replica catalog whose index `amd` serves `files` (what promotion left) and whose
    default index (`pypi`) holds nothing."""
    served = [StandinFile(amd.key, *_name_version(n), n, data, 1) for n, data in files.items()]
    indexes = {amd.key: amd, "pypi": IndexInfo("pypi", "default", 404)}
    targets = {p: tuple(t) for p, t in replica_targets().items()}
    return Catalog(indexes, tuple(served), (), targets)

"""Runs ROCm/TheRock's own packaging code on tiny inputs and returns the dependency metadata it
writes, in the structure of tests/data/replica/therock-metadata.toml.

TheRock's files are vendored, unmodified, under tests/data/therock/<release>/ (each folder's
SOURCE.md gives the commit, paths and sha256; MIT, LICENSE next to it). They are stored with a
`.txt` suffix so that this project's ruff and mypy, which check every `.py` under tests/, leave
TheRock's code alone; `therock_tree` lays them out again under their own names, where
py_packaging.py finds its templates relative to itself.

What runs, per release, is what TheRock's build_python_packages.py `_run_kpack_split` does for
the multi-arch release, less its payload:
  * `Parameters(...)`, with the replica's Linux and Windows target lists as the release
    workflow's `--linux/windows-amdgpu-families` (already expanded to targets) and kpack-split
    mode: it writes each package's `_dist_info.py` (version, DEFAULT_TARGET_FAMILY, the target
    lists, the arch-neutral libraries name);
  * `PopulatedDistPackage(...)` for core, libraries, the device wheel of each target recorded,
    and the `rocm` meta package, populated from an empty artifact catalog (no build tree);
  * `build_packages(...)`: TheRock's setup.py templates build the wheels (`setup.py
    bdist_wheel`, tiny: no files) and the `rocm` sdist (`setup.py sdist`);
  * the `rocm` sdist's metadata as uv gets it when it locks: the PEP 517 hook
    `prepare_metadata_for_build_wheel` of the backend its pyproject.toml names, run in the
    package's tree with no GPU target asked for (no ROCM_SDK_TARGET_FAMILY, no offload-arch).

Stand-ins (py_packaging.py imports modules the metadata does not need): TheRock's
`_therock_utils.artifacts` (an artifact catalog of a build; here one that holds no files),
`_therock_utils.exe_stub_gen` and `magic` (file typing and launchers for binaries; never called,
as there are no files). They exist only while py_packaging.py is imported.

Needs setuptools (the templates' build requirement, setuptools>=70.2.0) in the running Python.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from email.parser import HeaderParser
from importlib.metadata import version as installed_version
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
#: TheRock's files of each release, vendored (tests/data/therock/<release>/SOURCE.md).
VENDORED = HERE / "data" / "therock"
#: The suffix the vendored files are stored under (not `.py`: see the module docstring).
STORED_SUFFIX = ".txt"
#: What TheRock's code made, as tests/lock/test_replica_amdcode.py reads it.
RECORD = HERE / "data" / "replica" / "therock-metadata.toml"
#: The replica's target lists ([targets] linux, windows).
PACKAGES_TOML = HERE / "data" / "replica" / "packages.toml"
RELEASES = ("7.14.0", "7.14.1", "10.1.0")
#: The device wheels recorded (the replica makes every target's from the same template).
DEVICE_TARGETS = ("gfx1100", "gfx942")
#: ROCM_SDK_WHEEL_PLATFORM_TAG of TheRock's wheel templates: the Linux wheels' platform tag
#: (publish_rocm_to_release_buckets.py names them `..-py3-none-linux_x86_64.whl`), set so the
#: file names do not depend on the machine that runs the tests.
WHEEL_PLATFORM_TAG = "linux_x86_64"

#: Runs a PEP 517 backend's metadata hook in the current directory (argv: backend, out dir).
_METADATA_HOOK = (
    "import importlib, sys\n"
    "importlib.import_module(sys.argv[1]).prepare_metadata_for_build_wheel(sys.argv[2])\n"
)

Metadata = dict[str, Any]  # name, version, provides_extra, requires_dist


def replica_targets(path: Path = PACKAGES_TOML) -> dict[str, list[str]]:
    """platform (linux, windows) -> the replica's GPU targets."""
    with path.open("rb") as f:
        targets = tomllib.load(f)["targets"]
    return {platform: list(targets[platform]) for platform in ("linux", "windows")}


def therock_tree(release: str, dest: Path) -> Path:
    """The vendored files of `release` under their TheRock paths in `dest` (its root)."""
    source = VENDORED / release
    for stored in sorted(source.rglob(f"*{STORED_SUFFIX}")):
        relative = stored.relative_to(source).as_posix().removesuffix(STORED_SUFFIX)
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stored, target)
    return dest


class _NoFiles:
    """An artifact catalog's path matcher (`catalog.pm`) that matches no file."""

    def matches(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        return iter(())


class StandinArtifactCatalog:
    """The part of TheRock's ArtifactCatalog (_therock_utils/artifacts.py, which indexes the
    artifact directories of a build) that py_packaging reads: the target families the build's
    artifacts hold, and their files, of which there are none here."""

    def __init__(
        self,
        artifact_dir: Path,
        *,
        target_families: Sequence[str] = (),
        **_filters: object,  # filter_artifacts' filter/includes/excludes: nothing to filter
    ) -> None:
        self.artifact_dir = artifact_dir
        self.all_target_families = set(target_families)
        self.artifact_names: list[str] = []
        self.artifact_basedirs: list[tuple[object, Path]] = []
        self.pm = _NoFiles()


class StandinArtifactName:
    """TheRock's ArtifactName, named in py_packaging's annotations only."""


def _never_called(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("py_packaging handled a file, but the stand-in catalog holds none")


def _standin_modules(utils_dir: Path) -> dict[str, ModuleType]:
    """The modules py_packaging.py imports that are not vendored, by import name."""
    package = ModuleType("_therock_utils")
    package.__path__ = [str(utils_dir)]
    artifacts = ModuleType("_therock_utils.artifacts")
    artifacts.ArtifactCatalog = StandinArtifactCatalog  # type: ignore[attr-defined]
    artifacts.ArtifactName = StandinArtifactName  # type: ignore[attr-defined]
    exe_stub_gen = ModuleType("_therock_utils.exe_stub_gen")
    exe_stub_gen.generate_exe_link_stub = _never_called  # type: ignore[attr-defined]
    magic = ModuleType("magic")  # python-magic: libmagic file typing of build outputs
    magic.from_file = _never_called  # type: ignore[attr-defined]
    modules = (package, artifacts, exe_stub_gen, magic)
    return {m.__name__: m for m in modules}


def load_py_packaging(tree: Path) -> ModuleType:
    """TheRock's build_tools/_therock_utils/py_packaging.py from `tree`, imported with the
    stand-ins in sys.modules for the duration of the import only."""
    utils_dir = tree / "build_tools" / "_therock_utils"
    spec = importlib.util.spec_from_file_location(
        "_therock_utils.py_packaging", utils_dir / "py_packaging.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, _standin_modules(utils_dir)):
        spec.loader.exec_module(module)
    return module


def _build_environment(no_tools: Path) -> dict[str, str]:
    """The environment TheRock's builds run in here: no GPU target asked for, and no
    `offload-arch` to find one (PATH holds only the empty `no_tools`; the rocm setup.py also
    looks in this Python's scripts directory), the Linux wheels' platform tag."""
    scripts = sysconfig.get_path("scripts")
    if shutil.which("offload-arch", path=scripts):
        raise RuntimeError(f"{scripts} has offload-arch: the rocm sdist would use this GPU")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_SDK_")}
    env["PATH"] = str(no_tools)
    env["ROCM_SDK_WHEEL_PLATFORM_TAG"] = WHEEL_PLATFORM_TAG
    return env


def _populated_packages(
    py_packaging: ModuleType,
    dest: Path,
    release: str,
    targets: Mapping[str, Sequence[str]],
    devices: Sequence[str] = DEVICE_TARGETS,
) -> tuple[list[Path], Path]:
    """(the wheels' package trees, the `rocm` sdist's tree), populated the way
    build_python_packages.py `run` and `_run_kpack_split` do, from no artifact files, at version
    `release` (a release's own, or a pre-release of it such as 7.14.0rc1: build_python_packages'
    --version, which compute_rocm_package_version.py makes `<release>rc<N>` for a prerelease)."""
    empty = StandinArtifactCatalog(dest / "artifacts", target_families=targets["linux"])
    params = py_packaging.Parameters(
        dest_dir=dest,
        version=release,
        version_suffix="",  # build_python_packages.py's default
        artifacts=empty,
        kpack_split=True,
        linux_target_families=list(targets["linux"]),
        windows_target_families=list(targets["windows"]),
    )
    populated = py_packaging.PopulatedDistPackage
    core = populated(params, logical_name="core").populate_runtime_files(empty)
    libraries = populated(params, logical_name="libraries", target_family=None)
    libraries.populate_runtime_files(empty)
    device_packages = [
        populated(params, logical_name="device", target_family=t).populate_device_files(empty)
        for t in devices
    ]
    meta = populated(params, logical_name="meta", target_family=None)
    return [core.path, libraries.path, *(d.path for d in device_packages)], meta.path


def metadata_of(text: str) -> Metadata:
    """The recorded fields of a core-metadata document (Provides-Extra sorted, Requires-Dist
    in the order the metadata lists them)."""
    message = HeaderParser().parsestr(text)
    return {
        "name": message["Name"],
        "version": message["Version"],
        "provides_extra": sorted(message.get_all("Provides-Extra") or []),
        "requires_dist": list(message.get_all("Requires-Dist") or []),
    }


def _wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name).decode()


def _check_build_requirements(tree: Path) -> str:
    """The PEP 517 backend the package's pyproject.toml names, after checking that the running
    Python has the setuptools it requires (the only backend TheRock's templates use)."""
    with (tree / "pyproject.toml").open("rb") as f:
        system = tomllib.load(f)["build-system"]
    backend = str(system["build-backend"])
    assert backend == "setuptools.build_meta", (tree, backend)
    for line in system["requires"]:
        req = Requirement(line)
        assert canonicalize_name(req.name) == "setuptools", (tree, line)
        have = installed_version("setuptools")
        assert req.specifier.contains(have), f"{tree.name} needs {req}; this Python has {have}"
    return backend


def _metadata_as_uv_builds_it(tree: Path, out: Path, env: Mapping[str, str]) -> str:
    """The sdist's core metadata the way a frontend gets it before installing or locking: the
    backend's prepare_metadata_for_build_wheel hook, in the package's tree."""
    backend = _check_build_requirements(tree)
    out.mkdir()
    hook = [sys.executable, "-c", _METADATA_HOOK, backend, str(out)]
    done = subprocess.run(hook, cwd=tree, env=dict(env), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{backend} failed in {tree}:\n{done.stdout}{done.stderr}")
    (dist_info,) = out.glob("*.dist-info")
    return (dist_info / "METADATA").read_text()


def _sdist_name(dist: Path) -> str:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:  # the sdist is what AMD publishes: it must hold PKG-INFO
        assert any(m.name.endswith("/PKG-INFO") for m in tar.getmembers()), sdist
    return sdist.name


def generate(
    release: str, targets: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Metadata]:
    """file name -> metadata of each package TheRock's code at `release`'s commit builds for
    the replica's targets: the rocm-sdk-core, -libraries and -device-<t> wheels (their
    METADATA) and the `rocm` sdist (what building it gives with no GPU target asked for)."""
    targets = targets if targets is not None else replica_targets()
    with tempfile.TemporaryDirectory(prefix="therock-") as tmp:
        work = Path(tmp)
        (work / "no-tools").mkdir()
        env = _build_environment(work / "no-tools")
        py_packaging = load_py_packaging(therock_tree(release, work / "therock"))
        wheels, sdist = _populated_packages(py_packaging, work / "packages", release, targets)
        for tree in [*wheels, sdist]:
            _check_build_requirements(tree)
        dist = work / "dist"
        with mock.patch.dict(os.environ, env, clear=True):
            py_packaging.build_packages(
                work / "packages", package_dirs=[*wheels, sdist], dist_dir=dist
            )
        made = {w.name: metadata_of(_wheel_metadata(w)) for w in sorted(dist.glob("*.whl"))}
        sdist_metadata = _metadata_as_uv_builds_it(sdist, work / "sdist-metadata", env)
        made[_sdist_name(dist)] = metadata_of(sdist_metadata)
    return made


def recorded(release: str, path: Path = RECORD) -> dict[str, Metadata]:
    """The record of `release` in therock-metadata.toml."""
    with path.open("rb") as f:
        return dict(tomllib.load(f)[release])

"""The replica's catalog: tests/data/replica/packages.toml read and expanded into concrete files.

One [[package]] entry becomes one file per tag (a wheel) or one sdist; `for_each_target`
entries become one package per GPU target. The metadata of each file is what the real file
carries, as far as SOURCES.md confirms it (see the data file's header)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from replica.depmirror import mirrored_files
from replica.distributions import (
    metadata_text,
    sdist_bytes,
    sdist_filename,
    wheel_bytes,
    wheel_filename,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "replica" / "packages.toml"
PLATFORMS = ("linux", "windows")


@dataclass(frozen=True)
class IndexInfo:
    """One replicated index: its key in the data, its canonical URL, what it answers for a
    project it does not hold."""

    key: str
    canonical: str
    unknown_project_status: int


@dataclass(frozen=True)
class StandinFile:
    """One stand-in file of one index."""

    index: str
    name: str  # as published (not normalized)
    version: str
    filename: str
    data: bytes = field(repr=False)
    round: int


@dataclass(frozen=True)
class Link:
    """Project pages of `index` that list files of `target_index` (no hashes on the links)."""

    index: str
    target_index: str
    names: tuple[str, ...]
    hashes: bool


@dataclass(frozen=True)
class Catalog:
    indexes: dict[str, IndexInfo]
    files: tuple[StandinFile, ...]
    links: tuple[Link, ...]
    targets: dict[str, tuple[str, ...]]  # platform -> targets

    def files_of(self, index: str, round_: int) -> list[StandinFile]:
        """The files `index` holds in round `round_` (a later round adds files)."""
        return [f for f in self.files if f.index == index and f.round <= round_]


def tag_platform(tag: str) -> tuple[str, ...]:
    """The platforms a wheel tag installs on (`any` wheels: all of them)."""
    if tag.endswith("-any"):
        return PLATFORMS
    if "win" in tag.split("-")[-1]:
        return ("windows",)
    return ("linux",)


def _platform_marker(target: str, targets: Mapping[str, Sequence[str]]) -> str:
    """`; sys_platform == ...` for a target published on one platform only (TheRock's
    get_target_family_platform_marker), else nothing."""
    on_linux, on_windows = target in targets["linux"], target in targets["windows"]
    if on_linux and not on_windows:
        return '; sys_platform == "linux"'
    if on_windows and not on_linux:
        return '; sys_platform == "win32"'
    return ""


def parent_bundles(
    target: str, wanted: Sequence[str], bundles: Mapping[str, Sequence[str]]
) -> list[str]:
    """The bundles of `wanted` (in their order: sub-family before family) that hold `target`:
    the rest of its packaging chain (rocm-bootstrap's packaging_chain(target)[1:])."""
    return [b for b in wanted if target in bundles[b]]


def _target_extras(
    spec: Mapping[str, Any],
    version: str,
    platform: str | None,
    targets: Mapping[str, Sequence[str]],
    bundles: Mapping[str, Sequence[str]],
) -> dict[str, list[str]]:
    """Per-target extras plus the all-targets extra. `platform` None: every target, with
    platform markers when the spec asks for them (the rocm sdist); else the targets of that
    platform only (a wheel built for that platform: torch). With `bundles` in the spec (torch,
    rocm_kpack's splitter), each target's extra also requires the wheel of every bundle of its
    packaging chain that the split produced, and the all-targets extra requires every wheel,
    sorted by name."""
    if platform is None:
        chosen = sorted(set(targets["linux"]) | set(targets["windows"]))
    else:
        chosen = sorted(targets[platform])
    extras: dict[str, list[str]] = {}
    everything: list[str] = []
    for target in chosen:
        names = [target, *parent_bundles(target, spec.get("bundles", []), bundles)]
        reqs = [str(spec["requirement"]).format(target=n, version=version) for n in names]
        if platform is None and spec.get("platform_markers"):
            reqs = [r + _platform_marker(target, targets) for r in reqs]
        extras[f"{spec['prefix']}{target}"] = reqs
        everything += [r for r in reqs if r not in everything]
    extras[str(spec["all"])] = sorted(everything) if spec.get("bundles") else everything
    return extras


def _expand_tags(entry: Mapping[str, Any]) -> list[str]:
    tags: list[str] = []
    for tag in entry.get("tags", []):
        if "{py}" in tag:
            tags += [tag.format(py=py) for py in entry["pythons"]]
        else:
            tags.append(tag)
    return tags


def _files_of_entry(
    entry: Mapping[str, Any],
    name: str,
    target: str | None,
    targets: Mapping[str, Sequence[str]],
    bundles: Mapping[str, Sequence[str]],
) -> Iterator[StandinFile]:
    version = str(entry["version"])
    fmt = {"target": target or "", "version": version}
    requires = [str(r).format(**fmt) for r in entry.get("requires_dist", [])]
    if target is not None and "parents" in entry:  # a device wheel's parent-bundle wheels
        parents = parent_bundles(target, entry["parents"]["bundles"], bundles)
        requires += [str(entry["parents"]["requirement"]).format(bundle=b, **fmt) for b in parents]
    extras = {
        k: [str(r).format(**fmt) for r in v] for k, v in dict(entry.get("extras", {})).items()
    }
    round_ = int(entry.get("round", 1))
    index = str(entry["index"])
    platform_requires: Mapping[str, Sequence[str]] = entry.get("platform_requires", {})
    if entry.get("kind") == "sdist":
        if "target_extras" in entry:
            extras.update(_target_extras(entry["target_extras"], version, None, targets, bundles))
        data = sdist_bytes(name, version, requires, extras, str(entry["default_target_family"]))
        yield StandinFile(index, name, version, sdist_filename(name, version), data, round_)
        return
    for tag in _expand_tags(entry):
        platforms = tag_platform(tag)
        if target is not None and not any(target in targets[p] for p in platforms):
            continue  # this target is not published for this platform
        wheel_extras = dict(extras)
        if "target_extras" in entry:
            spec = entry["target_extras"]
            platform = platforms[0] if spec.get("per_platform") and len(platforms) == 1 else None
            wheel_extras.update(_target_extras(spec, version, platform, targets, bundles))
        # A requirement only one platform's build has (TheRock builds triton for Linux only)
        own = [str(r).format(**fmt) for p in platforms for r in platform_requires.get(p, [])]
        meta = metadata_text(name, version, [*requires, *own], wheel_extras)
        data = wheel_bytes(name, version, tag, meta)
        yield StandinFile(index, name, version, wheel_filename(name, version, tag), data, round_)


def load_catalog(path: Path = DATA) -> Catalog:
    """Read the data file and build every stand-in file in memory (a few KiB each)."""
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    targets = {p: tuple(raw["targets"][p]) for p in PLATFORMS}
    bundles = {k: tuple(v) for k, v in raw.get("bundles", {}).items() if k != "sources"}
    all_targets = sorted(set(targets["linux"]) | set(targets["windows"]))
    indexes = {
        key: IndexInfo(key, str(v["canonical"]), int(v["unknown_project_status"]))
        for key, v in raw["indexes"].items()
    }
    files: list[StandinFile] = []
    for entry in raw["package"]:
        if entry.get("for_each_target"):
            for target in all_targets:
                name = str(entry["name"]).format(target=target)
                files += _files_of_entry(entry, name, target, targets, bundles)
        else:
            files += _files_of_entry(entry, str(entry["name"]), None, targets, bundles)
    links = []
    for link in raw.get("link", []):
        names: list[str] = []
        for name in link["names"]:
            names += [name.format(target=t) for t in all_targets] if "{target}" in name else [name]
        links.append(
            Link(link["index"], link["target_index"], tuple(names), bool(link.get("hashes", True)))
        )
    for mirror in raw.get("mirror", []):
        files += _mirrored(mirror, files)
    _check_unique(files)
    return Catalog(indexes, tuple(files), tuple(links), targets)


def _mirrored(mirror: Mapping[str, Any], files: Sequence[StandinFile]) -> list[StandinFile]:
    """The files TheRock's dependency mirroring copies from one index of the replica into
    another in round `round` ([[mirror]] in the data; replica.depmirror runs TheRock's code)."""
    round_ = int(mirror["round"])
    source = {f.filename: f.data for f in files if f.index == mirror["from"] and f.round <= round_}
    copied = mirrored_files(source, mirror["projects"], mirror.get("skip", ()))
    out: list[StandinFile] = []
    for filename, data in copied:
        name, version, _, _ = parse_wheel_filename(filename)
        out.append(StandinFile(str(mirror["index"]), name, str(version), filename, data, round_))
    return out


def _check_unique(files: Sequence[StandinFile]) -> None:
    seen: set[tuple[str, str]] = set()
    for f in files:
        key = (f.index, f.filename)
        if key in seen:
            raise ValueError(f"the replica data defines {f.filename} twice in index {f.index}")
        seen.add(key)


def project_name(name: str) -> str:
    """The PEP 503 normalized project name."""
    return str(canonicalize_name(name))

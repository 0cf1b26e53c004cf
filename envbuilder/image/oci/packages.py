"""Layers by package: a layer that installs Python distributions (the venv's `COPY`) split into
one layer per distribution, so that a one-package bump changes one layer (issue 31).

A layer is split when it holds a `*.dist-info/RECORD` in a `site-packages` folder and no
whiteout (a dist-info deeper down is a vendored copy, such as setuptools' `_vendor`: its files
stay with the distribution that vendors it). Each path a RECORD lists (its first column,
relative to the site-packages folder; `../../../bin/x` for a script) belongs to that
distribution; a folder belongs to the one
distribution that owns everything below it; the rest (`pyvenv.cfg`, the interpreter links,
`activate`, the ROCm root link, folders shared by several distributions, empty folders) are the
venv's own files, in a last layer. A hard link goes with its target (tar needs both in one
layer). Each layer also carries every folder above its entries, as the whole layer has them
(the classic store's applier makes a missing parent 0755 root: envbuilder.image.oci.canonical).

Order: the distributions' layers by installed size, largest first (ties by name), then the
venv's own files. Docker's classic store pulls every layer above the first one it lacks again
(it stores layers by chain: moby's distribution/xfer/download.go), so the small packages that
are bumped most sit on top and torch at the bottom: bumping a small package re-fetches it and
the smaller ones above it there; the containerd store and every registry push go by each
layer's own digest.

More distributions than the image can have layers (`budget`, from LAYER_LIMIT): the largest
keep a layer each and the rest go to BUCKETS layers by a hash of their name, so a package stays
in its bucket whatever else the lock holds.
"""

from __future__ import annotations

import csv
import hashlib
import io
import posixpath
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from envbuilder.image.oci.layers import LayerStats, ReadLayer, is_whiteout
from envbuilder.image.tar import Entry

#: Layers an image may have in all, base included: overlayfs takes at most 128 lower folders
#: (Docker's overlay2 driver refuses more: moby's daemon/graphdriver/overlay2 maxDepth = 128);
#: envbuilder stays well under it.
LAYER_LIMIT = 100
#: Layers that hold the smaller distributions when there are more than the budget.
BUCKETS = 16
_SITE = "/site-packages/"
_RECORD = ".dist-info/RECORD"
#: The owner of the venv's own files (no RECORD lists them).
_OWN = ""


@dataclass(frozen=True)
class Dist:
    """One installed distribution: its dist-info folder, name and version."""

    info: str  # "opt/venv/lib/python3.11/site-packages/torch-2.13.0.dist-info"
    name: str
    version: str


@dataclass(frozen=True)
class Part:
    """One layer of a split: what it holds (`label`: "torch 2.13.0", "the venv's own files")."""

    label: str
    layer: ReadLayer
    size: int  # bytes of file data in it


def split_by_package(layer: ReadLayer, budget: int) -> list[Part]:
    """The layers `layer` becomes: one per distribution it installs (or per bucket, beyond
    `budget` layers), then the venv's own files; `[layer]` as one part when it installs no
    distribution, holds a whiteout, or `budget` is below 2."""
    dists = installed(layer)
    if not dists or budget < 2 or any(is_whiteout(n) for n in layer.entries):
        return [Part("", layer, _data_size(layer.entries.values()))]
    owner = _owners(layer, dists)
    groups = _group(owner, dists, layer.entries, budget)
    own = [n for n, o in owner.items() if o == _OWN]
    if own:
        groups.append(("the venv's own files", own))
    last = len(groups) - 1
    return [_part(layer, label, names, i == last) for i, (label, names) in enumerate(groups)]


def installed(layer: ReadLayer) -> list[Dist]:
    """The distributions whose RECORD the layer holds, sorted by their dist-info folder."""
    out = []
    for name in sorted(layer.entries):
        entry = layer.entries[name]
        if entry.type != tarfile.REGTYPE or not name.endswith(_RECORD):
            continue
        info = name[: -len("/RECORD")]
        if not f"{info.rpartition('/')[0]}/".endswith(_SITE):
            continue  # a vendored copy (setuptools/_vendor/...): its files are its host's
        stem = info.rpartition("/")[2][: -len(".dist-info")]
        dist_name, _, version = stem.partition("-")
        out.append(Dist(info, dist_name, version))
    return out


def record_paths(data: bytes, info: str) -> list[str]:
    """The image paths (no leading "/") a RECORD lists, resolved against the site-packages
    folder that holds `info`; paths that leave the image's root are ignored (they name nothing
    the layer can hold)."""
    site = info.rpartition("/")[0]
    text = data.decode("utf-8", "surrogateescape")
    out = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        raw = row[0]
        path = posixpath.normpath(raw if raw.startswith("/") else posixpath.join(site, raw))
        path = path.lstrip("/")
        if path and path != "." and not path.startswith("../"):
            out.append(path)
    return out


def _owners(layer: ReadLayer, dists: list[Dist]) -> dict[str, str]:
    """Entry name -> the dist-info folder that owns it (_OWN: the venv's own)."""
    owner: dict[str, str] = {}
    for dist in dists:  # sorted: the first RECORD that lists a path keeps it
        record = layer.entries[f"{dist.info}/RECORD"]
        for path in record_paths(layer.spool.read(record), dist.info):
            if path in layer.entries and layer.entries[path].type != tarfile.DIRTYPE:
                owner.setdefault(path, dist.info)
    for name, entry in layer.entries.items():
        if entry.type == tarfile.LNKTYPE:  # with its target: tar needs both in one layer
            owner[name] = owner.get(entry.linkname, _OWN)
    files = {n: owner.get(n, _OWN) for n, e in layer.entries.items() if e.type != tarfile.DIRTYPE}
    return {**files, **_folder_owners(layer.entries, files)}


def _folder_owners(entries: Mapping[str, Entry], files: Mapping[str, str]) -> dict[str, str]:
    """A folder's owner: the one owner of every file below it; _OWN when several or none."""
    below: dict[str, set[str]] = {}
    for name, who in files.items():
        folder = name.rpartition("/")[0]
        while folder:
            below.setdefault(folder, set()).add(who)
            folder = folder.rpartition("/")[0]
    out = {}
    for name, entry in entries.items():
        if entry.type == tarfile.DIRTYPE:
            whose = below.get(name, set())
            out[name] = next(iter(whose)) if len(whose) == 1 else _OWN
    return out


def _group(
    owner: Mapping[str, str], dists: list[Dist], entries: Mapping[str, Entry], budget: int
) -> list[tuple[str, list[str]]]:
    """(label, entry names) per distribution layer, largest first; beyond `budget` layers the
    smaller distributions share BUCKETS layers by their name's hash."""
    names: dict[str, list[str]] = {d.info: [] for d in dists}
    for name, who in owner.items():
        if who != _OWN:
            names[who].append(name)
    size = {d.info: _data_size(entries[n] for n in names[d.info]) for d in dists}
    ranked = sorted(dists, key=lambda d: (-size[d.info], d.name, d.info))
    room = budget - 1  # the venv's own files take one
    if len(ranked) <= room:
        return [(f"{d.name} {d.version}", names[d.info]) for d in ranked]
    buckets = min(BUCKETS, room)
    alone, rest = ranked[: room - buckets], ranked[room - buckets :]
    groups = [(f"{d.name} {d.version}", names[d.info]) for d in alone]
    shared: dict[int, list[Dist]] = {}
    for dist in rest:
        shared.setdefault(_bucket(dist.name, buckets), []).append(dist)
    for key in sorted(shared, key=lambda k: (-sum(size[d.info] for d in shared[k]), k)):
        members = shared[key]
        label = f"group {key + 1} of {buckets}: " + ", ".join(d.name for d in members)
        groups.append((label, [n for d in members for n in names[d.info]]))
    return groups


def _bucket(name: str, buckets: int) -> int:
    """A distribution's bucket: a function of its name only (stable across locks)."""
    return int.from_bytes(hashlib.sha256(name.lower().encode()).digest()[:8], "big") % buckets


def _part(layer: ReadLayer, label: str, names: Iterable[str], with_stats: bool) -> Part:
    """The layer of `names` and every folder above them; `with_stats`: it carries the whole
    layer's stats (what normalising dropped or rewrote; the last part does)."""
    picked: dict[str, Entry] = {}
    for name in names:
        picked[name] = layer.entries[name]
        folder = name.rpartition("/")[0]
        while folder and folder not in picked:
            if folder in layer.entries:
                picked[folder] = layer.entries[folder]
            folder = folder.rpartition("/")[0]
    stats = layer.stats if with_stats else LayerStats()
    part = ReadLayer(picked, layer.spool, stats, {})
    return Part(label, part, _data_size(picked.values()))


def _data_size(entries: Iterable[Entry]) -> int:
    return sum(e.size for e in entries if e.type == tarfile.REGTYPE)

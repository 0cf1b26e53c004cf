"""One canonical diff per layer, whichever engine and storage driver computed it.

Engines record the same build step as different layer tars. Docker 20.10's overlay2 driver
writes every directory it created as opaque (`.wh..wh..opq`) and every file a step rewrote, even
with the same bytes (apt's `var/cache/debconf/*.dat`, `var/lib/dpkg/lock-frontend`, `/tmp`); the
containerd snapshotter (Docker 25+ with the containerd store) compares contents and writes only
what changed; a directory removed and made again is an opaque marker for one and a whiteout per
removed file for the other. Each is a valid diff of the same two filesystems, with another
digest (issue 29: the same lock gave sha256:2ebfa3ac... on Docker 20.10 and sha256:9944e2f6...
on Docker 28's containerd store, the apt layer alone differing).

So a layer above the base is rewritten as the one diff that is a function of the filesystems
before and after it only:

* `lower` is the view of every layer below (path -> metadata and content digest; mtimes are
  left out: the writer sets them all to one time above the base, LAYER_EPOCH);
* applying the engine's layer to `lower` (whiteouts and opaque markers as the OCI image spec
  defines them) gives `upper`;
* the canonical layer holds each entry of `upper` that `lower` lacks or holds otherwise (type,
  mode, owner, content, link target, device numbers, xattrs), and a whiteout `.wh.NAME` for each
  topmost path of `lower` that `upper` lacks, in a directory `upper` still has. No opaque marker
  is ever written (it is the same as a whiteout per removed child).

Hard links and their targets are kept as the engine recorded them (a link needs its target in
the same tar). Every folder above a kept entry is written too, as `upper` has it (see
`_add_parents`: the classic store's applier needs them); any other folder identical to the one
below is dropped.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envbuilder.core.errors import BuildError
from envbuilder.image.oci.layers import WHITEOUT_PREFIX, ReadLayer, is_whiteout
from envbuilder.image.tar import CHUNK, Entry, clean_name, entry_of

OPAQUE = ".wh..wh..opq"
#: The reason canonicalise gives for an entry it leaves out (LayerStats.dropped).
UNCHANGED = "the same as in the layers below"
#: Mode, owner of the whiteouts envbuilder writes (engines differ: 0644, 0600, 0755 seen).
WHITEOUT_MODE = 0o644


@dataclass(frozen=True)
class Meta:
    """What a path is, for comparing two layers' views of it (no mtime)."""

    type: bytes
    mode: int
    uid: int
    gid: int
    content: str  # sha256 of a file's bytes, a symlink's target, "" otherwise
    devmajor: int = 0
    devminor: int = 0
    xattrs: tuple[tuple[str, str], ...] = ()


View = dict[str, Meta]


def _meta(entry: Entry, content: str) -> Meta:
    kind = tarfile.REGTYPE if entry.type == tarfile.LNKTYPE else entry.type
    return Meta(
        kind,
        entry.mode,
        entry.uid,
        entry.gid,
        content,
        entry.devmajor,
        entry.devminor,
        entry.xattrs,
    )


def _sha_of(fh: IO[bytes], offset: int, size: int) -> str:
    sha = hashlib.sha256()
    fh.seek(offset)
    left = size
    while left > 0:
        chunk = fh.read(min(CHUNK, left))
        if not chunk:
            break
        sha.update(chunk)
        left -= len(chunk)
    return sha.hexdigest()


# ----------------------------------------------------------------------------- the view below


def add_raw_layer(view: View, path: Path) -> None:
    """Apply a layer tar as the engine saved it (a base layer) to `view`."""
    what = "a base image layer"
    with path.open("rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
        members = tar.getmembers()
        changes: dict[str, Meta] = {}
        whiteouts: list[str] = []
        for member in members:
            name = clean_name(member.name, what)
            if not name:
                continue
            if is_whiteout(name):
                whiteouts.append(name)
                continue
            entry = entry_of(member, name, what)
            changes[name] = _member_meta(fh, member, entry, changes)
    _apply(view, whiteouts, changes)


def _member_meta(
    fh: IO[bytes], member: tarfile.TarInfo, entry: Entry, seen: dict[str, Meta]
) -> Meta:
    if entry.type == tarfile.REGTYPE:
        return _meta(entry, _sha_of(fh, member.offset_data, member.size))
    if entry.type == tarfile.LNKTYPE:
        target = seen.get(entry.linkname)
        return _meta(entry, target.content if target is not None else "")
    return _meta(entry, entry.linkname if entry.type == tarfile.SYMTYPE else "")


def _apply(view: View, whiteouts: Iterable[str], changes: dict[str, Meta]) -> None:
    """Apply one layer to `view` in place: its whiteouts (to the layers below), then its
    entries (a non-directory over a directory replaces the directory's subtree too)."""
    for name in whiteouts:
        folder, _, base = name.rpartition("/")
        if base == OPAQUE:
            _remove_below(view, folder)
        else:
            gone = f"{folder}/{base[len(WHITEOUT_PREFIX) :]}".lstrip("/")
            view.pop(gone, None)
            _remove_below(view, gone)
    for name, meta in changes.items():
        old = view.get(name)
        if old is not None and old.type == tarfile.DIRTYPE and meta.type != tarfile.DIRTYPE:
            _remove_below(view, name)
        view[name] = meta


def _remove_below(view: View, folder: str) -> None:
    prefix = f"{folder}/" if folder else ""
    for name in [n for n in view if n.startswith(prefix) and n != folder]:
        del view[name]


# ----------------------------------------------------------------------------- one layer


def canonicalise(layer: ReadLayer, lower: View) -> None:
    """Rewrite `layer` (normalised, its pyc headers final) as the canonical diff against
    `lower`, and apply it to `lower` (which becomes the view for the next layer)."""
    whiteouts = [n for n in layer.entries if is_whiteout(n)]
    changes = _layer_metas(layer)
    upper = dict(lower)
    _apply(upper, whiteouts, changes)
    linked = _hardlinked(layer.entries)
    for name in whiteouts:
        del layer.entries[name]
    for name, meta in changes.items():
        if name not in linked and lower.get(name) == meta:
            del layer.entries[name]
            layer.stats.dropped[name] = UNCHANGED
    for name in _removed(lower, upper):
        layer.entries[name] = Entry(name, tarfile.REGTYPE, WHITEOUT_MODE, 0, 0)
    _add_parents(layer, upper)
    lower.clear()
    lower.update(upper)


def _add_parents(layer: ReadLayer, upper: View) -> None:
    """Every folder above an entry of the layer, as `upper` has it. The classic store's
    overlay2 applier extracts a layer into an empty folder and makes each missing parent 0755
    root: a parent left out would turn /root (0700) or /run/lock (1777) into 0755 there, while
    the containerd applier keeps the lower folder's mode. With every parent in the tar, both
    give the same filesystem (seen: the same cpu lock's `.wsl` differed in exactly those two
    modes between Docker 20.10 and Docker 28's containerd store)."""
    for name in list(layer.entries):
        folder = name.rpartition("/")[0]
        while folder and folder not in layer.entries:
            meta = upper.get(folder)
            if meta is None or meta.type != tarfile.DIRTYPE:
                meta = Meta(tarfile.DIRTYPE, 0o755, 0, 0, "")
            layer.entries[folder] = Entry(
                folder, tarfile.DIRTYPE, meta.mode, meta.uid, meta.gid, xattrs=meta.xattrs
            )
            layer.stats.dropped.pop(folder, None)
            folder = folder.rpartition("/")[0]


def _layer_metas(layer: ReadLayer) -> dict[str, Meta]:
    metas: dict[str, Meta] = {}
    fh = layer.spool.fh
    for name, entry in layer.entries.items():
        if is_whiteout(name):
            continue
        if entry.type == tarfile.REGTYPE:
            metas[name] = _meta(entry, _sha_of(fh, entry.offset, entry.size))
        elif entry.type == tarfile.LNKTYPE:
            metas[name] = _meta(entry, "")  # resolved below, once every target is known
        else:
            metas[name] = _meta(entry, entry.linkname if entry.type == tarfile.SYMTYPE else "")
    for name, entry in layer.entries.items():
        if entry.type == tarfile.LNKTYPE:
            target = metas.get(entry.linkname)
            if target is None:
                raise BuildError(f"the image layer hard-links {name!r} to a missing file")
            metas[name] = Meta(**{**target.__dict__, "mode": entry.mode})
    fh.seek(0, 2)
    return metas


def _hardlinked(entries: dict[str, Entry]) -> set[str]:
    """Hard links and their targets (kept: a link needs its target in the same tar)."""
    names: set[str] = set()
    for name, entry in entries.items():
        if entry.type == tarfile.LNKTYPE:
            names.update((name, entry.linkname))
    return names


def _removed(lower: View, upper: View) -> list[str]:
    """Whiteout names for the topmost paths of `lower` that `upper` lacks, each in a directory
    `upper` still has."""
    names = []
    for name in sorted(set(lower) - set(upper)):
        folder, _, base = name.rpartition("/")
        parent = upper.get(folder) if folder else None
        if folder and (parent is None or parent.type != tarfile.DIRTYPE):
            continue  # its folder went too (a whiteout there covers it) or became a file
        names.append(f"{folder}/{WHITEOUT_PREFIX}{base}".lstrip("/"))
    return names

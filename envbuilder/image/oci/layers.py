"""One image layer (an uncompressed layer tar, as `docker save` gives it) into its deterministic
form: the same files, metadata and whiteouts, with everything that records the build removed.

The rules are envbuilder.image.tar's (shared with the `.wsl`): entries sorted, every mtime
SOURCE_DATE_EPOCH, numeric owners, only xattr PAX records, build noise dropped (apt/dpkg logs,
apt lists and caches, the ldconfig aux-cache, `*-old` backups, temp files, user caches), shadow
"last change" days clamped, machine-id emptied, timestamp-based `.pyc` headers set to
SOURCE_DATE_EPOCH. What is particular to a layer, and why:

  * whiteouts (`.wh.NAME`, `.wh..wh..opq`) are kept whatever their path: they delete files of the
    layers below, and dropping one would bring a lower file back;
  * no parent directory is added: a directory entry in a layer overrides the mode and owner of
    the directory below, so only the directories the engine recorded are written;
  * a `.pyc` header is changed only when its source file is written by a normalised layer too
    (then its mtime is SOURCE_DATE_EPOCH); a pyc of a base-image source keeps the base file's
    mtime, which the base's digest already fixes.

Reading uses the layer file itself as the spool (the data stays where it is; rewritten contents
are appended to that temp file and `.pyc` headers patched in place), so a layer costs one read
and one write.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from envbuilder.core.errors import BuildError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image.tar import (
    SHADOW_FILES,
    Entry,
    Spool,
    clean_name,
    drop_orphans,
    entry_of,
    is_cached_pyc,
    noise_reason,
    pyc_header_fix,
    pyc_source,
    resolve_hardlinks,
    rewrite_shadow,
    rewrites_content,
    write_entries,
)

WHITEOUT_PREFIX = ".wh."
_WHAT = "the image layer"


def is_whiteout(name: str) -> bool:
    """True for an AUFS/OCI whiteout entry (`.wh.NAME`, or the opaque `.wh..wh..opq`)."""
    return name.rpartition("/")[2].startswith(WHITEOUT_PREFIX)


def drop_reason(name: str, member_type: bytes) -> str | None:
    """Why a member of a layer is left out, or None to keep it (whiteouts and directories are
    always kept)."""
    if member_type == tarfile.DIRTYPE or is_whiteout(name):
        return None
    return noise_reason(name)


def rewrite_content(name: str, data: bytes, source_date_epoch: int) -> bytes:
    """The normalised content of a member `reprotar.rewrites_content` names: shadow files with
    the last-change day clamped (passwords untouched: an image keeps its accounts as built),
    machine-id empty (each container gets its own)."""
    if name in SHADOW_FILES:
        day_field = source_date_epoch if "gshadow" not in name else None
        return rewrite_shadow(data, day_field, scrub_passwords=False)
    return b""


@dataclass
class LayerStats:
    """What normalising one layer did."""

    entries: int = 0
    dropped: dict[str, str] = field(default_factory=dict)  # name -> reason
    changed: dict[str, str] = field(default_factory=dict)  # name -> what changed


@dataclass
class ReadLayer:
    """A layer read into memory (headers) with its data in `spool` (the layer file itself)."""

    entries: dict[str, Entry]
    spool: Spool
    stats: LayerStats
    #: timestamp-based pycs (name -> original 16-byte header), already patched in the spool
    pyc_heads: dict[str, bytes] = field(default_factory=dict)

    def python_sources(self) -> set[str]:
        """The `.py` files this layer writes."""
        return {
            n for n, e in self.entries.items() if n.endswith(".py") and e.type == tarfile.REGTYPE
        }


def read_layer(fh: IO[bytes], source_date_epoch: int) -> ReadLayer:
    """Read the layer tar open in `fh` (read-write, seekable: it becomes the spool). Raises
    BuildError when it is not a tar or holds a member a layer cannot (outside the root, a
    socket)."""
    fh.seek(0, os.SEEK_END)
    spool = Spool(fh)
    spool.pos = fh.tell()
    stats = LayerStats()
    entries: dict[str, Entry] = {}
    pyc_heads: dict[str, bytes] = {}
    fh.seek(0)
    try:
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as exc:
        raise BuildError(f"{_WHAT} is not a readable tar: {exc}") from exc
    for member in members:
        name = clean_name(member.name, _WHAT)
        if not name:
            continue
        entry = entry_of(member, name, _WHAT)
        reason = drop_reason(name, entry.type)
        if reason:
            stats.dropped[name] = reason
            entries.pop(name, None)
            continue
        if entry.type == tarfile.REGTYPE:
            entry = _take_data(fh, spool, member, entry, source_date_epoch, stats, pyc_heads)
        entries[name] = entry
    return ReadLayer(entries, spool, stats, pyc_heads)


def _take_data(
    fh: IO[bytes],
    spool: Spool,
    member: tarfile.TarInfo,
    entry: Entry,
    source_date_epoch: int,
    stats: LayerStats,
    pyc_heads: dict[str, bytes],
) -> Entry:
    """The entry with its data located (in place, or appended when rewritten)."""
    entry = replace(entry, size=member.size, offset=member.offset_data)
    name = entry.name
    if rewrites_content(name):
        fh.seek(member.offset_data)
        data = fh.read(member.size)
        new = rewrite_content(name, data, source_date_epoch)
        if new == data:
            return entry
        stats.changed[name] = "rewritten (build date, machine id)"
        fh.seek(0, os.SEEK_END)
        return replace(entry, size=len(new), offset=spool.add_bytes(new))
    if is_cached_pyc(name) and member.size >= 16:
        fh.seek(member.offset_data)
        head = fh.read(16)
        fixed = pyc_header_fix(name, head, source_date_epoch)
        if fixed != head:
            fh.seek(member.offset_data)
            fh.write(fixed)
            pyc_heads[name] = head
    return entry


def keep_pyc_heads(layer: ReadLayer, normalised_sources: Collection[str]) -> None:
    """Give back the original header of each timestamp pyc whose source no normalised layer
    writes (its source is a base-image file, whose mtime the pyc already matches)."""
    for name, head in layer.pyc_heads.items():
        if pyc_source(name) in normalised_sources:
            layer.stats.changed[name] = "pyc source mtime"
            continue
        entry = layer.entries.get(name)
        if entry is not None:
            layer.spool.fh.seek(entry.offset)
            layer.spool.fh.write(head)
    layer.spool.fh.seek(0, os.SEEK_END)


@dataclass(frozen=True)
class WrittenLayer:
    """A normalised layer tar: where, its diff_id (`sha256:` of its bytes), size, stats."""

    path: Path
    diff_id: str
    size: int
    stats: LayerStats
    label: str = ""  # what it holds, when one engine layer became several (packages)


class _Hashing:
    """A write-only file that hashes what passes through to `fh`."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def tell(self) -> int:  # tarfile asks where the archive starts
        return self.size

    def flush(self) -> None:
        self.fh.flush()


def write_layer(
    layer: ReadLayer,
    dest: Path,
    source_date_epoch: int,
    progress: ProgressFn = no_progress,
    label: str = "layer",
) -> WrittenLayer:
    """Write `layer` as a deterministic tar to `dest` (sorted entries, one mtime); return it
    with its diff_id."""
    entries = dict(layer.entries)
    drop_orphans(entries, layer.stats.dropped)
    resolve_hardlinks(entries, _WHAT)
    ordered = sorted(entries.values(), key=lambda e: e.key)
    layer.stats.entries = len(ordered)
    total = sum(e.size for e in ordered if e.type == tarfile.REGTYPE)
    with dest.open("wb") as raw:
        out = _Hashing(raw)
        write_entries(
            out,  # type: ignore[arg-type]
            ordered,
            layer.spool.fh,
            source_date_epoch,
            progress,
            total,
            label,
        )
    return WrittenLayer(dest, f"sha256:{out.sha.hexdigest()}", out.size, layer.stats)

"""Deterministic tar: the primitives that make two builds of one lock give the same bytes.

Shared by the `.wsl` normaliser (`envbuilder.image.wsl`, a whole rootfs from `docker export`) and
the image layer normaliser (`envbuilder.image.oci`, one layer of `docker save` at a time). Both read
a tar stream once, keep only the headers in memory (file data goes to a spool file), apply the same
rules and write the entries sorted, with one mtime, numeric owners and only `SCHILY.xattr.*` PAX
records.

The rules both apply, and why:
  * names: relative to the root, no `./`, no `..`; directories before their contents, siblings in
    byte order (`sort_key`);
  * every mtime = SOURCE_DATE_EPOCH; uid/gid kept, user/group names dropped; atime/ctime dropped;
  * build noise dropped (`noise_reason`): logs, apt lists and caches, the ldconfig aux-cache (it
    records inode numbers and ctimes), debconf/dpkg `*-old` backups, temp files, user caches,
    half-written `.pyc`;
  * content that records when the build ran is rewritten: /etc/machine-id (random) emptied, the
    "last password change" day in shadow files clamped to SOURCE_DATE_EPOCH's day, and
    timestamp-based `.pyc` headers given SOURCE_DATE_EPOCH (the source file's mtime in the tar);
  * hard links point at the first member of their group in the final order.
"""

from __future__ import annotations

import io
import posixpath
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO

from envbuilder.core.errors import BuildError
from envbuilder.core.progress import ProgressFn, no_progress

CHUNK = 1 << 20
DAY = 86400
SHADOW_FILES = ("etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-")
#: Random per install (systemd's postinst writes one): emptied, so each container or distro
#: makes its own on first boot.
MACHINE_ID_FILES = ("etc/machine-id", "var/lib/dbus/machine-id")


# ----------------------------------------------------------------------------- names


def sort_key(name: str) -> tuple[str, ...]:
    """Order of entries: by path components, so a directory precedes everything inside it."""
    return tuple(name.split("/"))


def clean_name(raw: str, what: str = "the exported rootfs") -> str:
    """A member name relative to the root ('' for the root itself). Raises BuildError (naming
    `what` the tar is) for a name that would escape the root."""
    name = raw
    while name.startswith("./"):
        name = name[2:]
    name = name.lstrip("/")
    norm = posixpath.normpath(name) if name else ""
    if norm in (".", ""):
        return ""
    if norm == ".." or norm.startswith("../"):
        raise BuildError(f"{what} has a member outside its root: {raw!r}")
    return norm


# ----------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Entry:
    """One tar member after normalization. File data lives in the spool at `offset`."""

    name: str  # "etc/passwd"; directories without a trailing slash
    type: bytes  # tarfile.REGTYPE, DIRTYPE, SYMTYPE, LNKTYPE, CHRTYPE, BLKTYPE, FIFOTYPE
    mode: int
    uid: int
    gid: int
    size: int = 0
    offset: int = 0
    linkname: str = ""
    devmajor: int = 0
    devminor: int = 0
    xattrs: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, ...]:
        return sort_key(self.name)


#: Member types a normalised tar may hold.
KEPT_TYPES = (
    tarfile.REGTYPE,
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.CHRTYPE,
    tarfile.BLKTYPE,
    tarfile.FIFOTYPE,
)


def entry_of(member: tarfile.TarInfo, name: str, what: str) -> Entry:
    """The Entry (no data yet) for a member already named `name`; BuildError for a type a
    filesystem image cannot hold (`what` names the tar)."""
    mtype = tarfile.DIRTYPE if member.isdir() else member.type
    if mtype == tarfile.AREGTYPE:
        mtype = tarfile.REGTYPE
    if mtype not in KEPT_TYPES:
        raise BuildError(f"{what} has an unsupported member type at {name!r}")
    entry = Entry(
        name=name,
        type=mtype,
        mode=member.mode & 0o7777,
        uid=member.uid,
        gid=member.gid,
        devmajor=member.devmajor,
        devminor=member.devminor,
        xattrs=tuple(
            sorted((k, v) for k, v in member.pax_headers.items() if k.startswith("SCHILY.xattr."))
        ),
    )
    if mtype == tarfile.SYMTYPE:
        return replace(entry, linkname=member.linkname)
    if mtype == tarfile.LNKTYPE:
        return replace(entry, linkname=clean_name(member.linkname, what))
    return entry


# ----------------------------------------------------------------------------- noise


_NOISE = (
    (re.compile(r"var/log/.+"), "build log"),
    (re.compile(r"var/lib/apt/lists/.+"), "apt package lists (fetched at build time)"),
    (re.compile(r"var/cache/apt/.+"), "apt cache"),
    (re.compile(r"var/cache/ldconfig/aux-cache"), "ldconfig cache (rebuilt on demand)"),
    (re.compile(r"var/cache/debconf/.+-old"), "debconf backup"),
    (re.compile(r"var/lib/dpkg/[^/]+-old"), "dpkg backup"),
    (re.compile(r"(tmp|var/tmp)/.+"), "temporary file"),
    (re.compile(r"(root|home/[^/]+)/\.cache/.+"), "user cache"),
    (re.compile(r".*/__pycache__/[^/]+\.pyc\.\d+"), "half-written pyc"),
)


def noise_reason(name: str) -> str | None:
    """Why a (non-directory) member is build noise, or None when it is content."""
    for pattern, reason in _NOISE:
        if pattern.fullmatch(name):
            return f"build noise: {reason}"
    return None


# ----------------------------------------------------------------------------- content


def rewrites_content(name: str) -> bool:
    """Members whose content records the build (they are read whole; all are small)."""
    return name in SHADOW_FILES or name in MACHINE_ID_FILES


def rewrite_shadow(data: bytes, source_date_epoch: int | None, *, scrub_passwords: bool) -> bytes:
    """A shadow (or gshadow) file with the "last change" day (field 3) clamped to
    `source_date_epoch`'s day (useradd writes the build day; None: left alone, gshadow has no
    such field) and, with `scrub_passwords`, no password hashes (`!...` -> `!`, any other
    non-empty, non-`*` value -> `*`)."""
    out = []
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        fields = line.split(":")
        if len(fields) < 2:
            out.append(line)
            continue
        if scrub_passwords:
            fields[1] = _scrub_password(fields[1])
        if source_date_epoch is not None and len(fields) > 2 and fields[2].isdigit():
            fields[2] = str(min(int(fields[2]), source_date_epoch // DAY))
        out.append(":".join(fields))
    return "\n".join(out).encode("utf-8", "surrogateescape")


def _scrub_password(value: str) -> str:
    if value in ("*", "!", "!*", "x"):
        return value
    if value.startswith("!"):
        return "!"
    return "*"


def pyc_header_fix(name: str, head: bytes, source_date_epoch: int) -> bytes:
    """The first 16 bytes of a `.pyc` with a timestamp-based header (PEP 552 flags 0) carrying
    SOURCE_DATE_EPOCH as the source mtime; other headers unchanged."""
    if not is_cached_pyc(name) or len(head) < 16:
        return head
    if int.from_bytes(head[4:8], "little") != 0:
        return head  # hash-based pyc: already independent of mtimes
    return head[:8] + (source_date_epoch & 0xFFFFFFFF).to_bytes(4, "little") + head[12:]


def is_cached_pyc(name: str) -> bool:
    """True for `.../__pycache__/X.<tag>.pyc`."""
    return name.endswith(".pyc") and "/__pycache__/" in f"/{name}"


def pyc_source(name: str) -> str:
    """The source of a cached pyc: `a/__pycache__/m.cpython-311.pyc` -> `a/m.py`."""
    folder, _, base = name.rpartition("/__pycache__/")
    module = base.split(".", 1)[0]
    return f"{folder}/{module}.py" if folder else f"{module}.py"


# ----------------------------------------------------------------------------- spool


class Spool:
    """File data, appended to a temp file; entries keep (offset, size)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.pos = 0

    def add(
        self, src: IO[bytes] | None, size: int, head: bytes = b"", what: str = "the exported rootfs"
    ) -> int:
        offset = self.pos
        if head:
            self.fh.write(head)
        remaining = size - len(head)
        while remaining > 0 and src is not None:
            chunk = src.read(min(CHUNK, remaining))
            if not chunk:
                raise BuildError(f"{what} ended in the middle of a file")
            self.fh.write(chunk)
            remaining -= len(chunk)
        self.pos += size
        return offset

    def add_bytes(self, data: bytes) -> int:
        offset = self.pos
        self.fh.write(data)
        self.pos += len(data)
        return offset

    def read(self, entry: Entry) -> bytes:
        """The whole data of `entry` (small files only)."""
        self.fh.flush()
        self.fh.seek(entry.offset)
        data = self.fh.read(entry.size)
        self.fh.seek(0, io.SEEK_END)
        return data


class Window(io.RawIOBase):
    """`size` bytes of `fh` from its current position (the spool region of one file)."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.left = fh, size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


class IterStream(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the docker SDK's export and save
    generators), counting bytes and reporting them to `progress`."""

    def __init__(
        self,
        chunks: Iterable[bytes],
        progress: ProgressFn = no_progress,
        label: str = "export",
        total: int | None = None,
    ) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = memoryview(b"")
        self._pos = 0
        self.count = 0
        self._progress = progress
        self._label = label
        self._total = total
        self._reported = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview | bytearray) -> int:  # type: ignore[override]
        while self._pos >= len(self._buf):
            try:
                self._buf = memoryview(next(self._it))
            except StopIteration:
                self._progress(self._label, self.count, self._total)
                return 0
            self._pos = 0
        n = min(len(b), len(self._buf) - self._pos)
        b[:n] = self._buf[self._pos : self._pos + n]
        self._pos += n
        self.count += n
        if self.count - self._reported >= CHUNK:
            self._reported = self.count
            self._progress(self._label, self.count, self._total)
        return n


# ----------------------------------------------------------------------------- structure


def drop_orphans(entries: dict[str, Entry], dropped: dict[str, str]) -> None:
    """Drop hard links whose target was dropped (build noise has no other names worth
    keeping); each is recorded in `dropped` (name -> reason)."""
    for name, entry in list(entries.items()):
        if entry.type == tarfile.LNKTYPE and entry.linkname not in entries:
            dropped[name] = f"hard link to dropped {entry.linkname}"
            del entries[name]


def resolve_hardlinks(entries: dict[str, Entry], what: str = "the exported rootfs") -> None:
    """Make each hard-link group point at its first member in the final order (tar needs the
    target before the link): that member carries the data, the others link to it."""
    groups: dict[str, list[str]] = {}
    for name, entry in entries.items():
        if entry.type == tarfile.LNKTYPE:
            groups.setdefault(entry.linkname, []).append(name)
    for target, links in groups.items():
        head = entries.get(target)
        members = sorted(([target] if head else []) + links, key=sort_key)
        data = head
        if data is None or data.type != tarfile.REGTYPE:
            raise BuildError(f"{what} hard-links to {target!r}, which is not a regular file in it")
        first = members[0]
        entries[first] = replace(
            entries[first], type=tarfile.REGTYPE, linkname="", size=data.size, offset=data.offset
        )
        for name in members[1:]:
            entries[name] = replace(
                entries[name], type=tarfile.LNKTYPE, linkname=first, size=0, offset=0
            )


def add_missing_parents(entries: dict[str, Entry]) -> None:
    """Directories every entry needs, root:root 0755, when the source left them out."""
    for name in list(entries):
        parent = posixpath.dirname(name)
        while parent and parent not in entries:
            entries[parent] = Entry(name=parent, type=tarfile.DIRTYPE, mode=0o755, uid=0, gid=0)
            parent = posixpath.dirname(parent)


# ----------------------------------------------------------------------------- writing


def tarinfo(entry: Entry, source_date_epoch: int) -> tarfile.TarInfo:
    """The header of `entry`: one mtime, numeric owners, only xattr PAX records."""
    info = tarfile.TarInfo(entry.name)
    info.type = entry.type
    info.mode = entry.mode
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mtime = source_date_epoch
    info.size = entry.size if entry.type == tarfile.REGTYPE else 0
    info.linkname = entry.linkname
    info.devmajor, info.devminor = entry.devmajor, entry.devminor
    info.pax_headers = dict(entry.xattrs)
    return info


def write_entries(
    out: IO[bytes],
    entries: list[Entry],
    spool: IO[bytes],
    source_date_epoch: int,
    progress: ProgressFn = no_progress,
    total: int = 0,
    label: str = "compress",
) -> None:
    """Write `entries` (in their order) as a PAX tar to `out`, file data from `spool`.
    Progress: (`label`, data bytes written, `total`)."""
    done = 0
    reported = 0
    with tarfile.TarFile(
        fileobj=out,
        mode="w",
        format=tarfile.PAX_FORMAT,
        encoding="utf-8",
        errors="surrogateescape",
        copybufsize=CHUNK,
    ) as tar:
        for entry in entries:
            info = tarinfo(entry, source_date_epoch)
            if entry.type == tarfile.REGTYPE:
                spool.seek(entry.offset)
                tar.addfile(info, Window(spool, entry.size))
                done += entry.size
            else:
                tar.addfile(info)
            if done - reported >= CHUNK:
                reported = done
                progress(label, done, total)
    progress(label, total, total)

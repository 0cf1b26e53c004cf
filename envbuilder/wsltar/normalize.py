"""The normaliser: a `docker export` stream in, a reproducible, rule-abiding `.wsl` out."""

from __future__ import annotations

import io
import os
import posixpath
import re
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from envbuilder.errors import BuildError
from envbuilder.progress import ProgressFn, no_progress
from envbuilder.wsltar.conventions import (
    CHUNK,
    COMPRESSLEVEL,
    DAY,
    DISTRIBUTION_CONF,
    SHADOW_FILES,
    SYSTEMD_BINARIES,
    WSL_CONF,
    clean_name,
    discouraged_units,
    is_kernel,
    parse_conf,
    parse_passwd,
    sort_key,
)
from envbuilder.wsltar.gzipwriter import HashingWriter, ParallelGzipWriter

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


# ----------------------------------------------------------------------------- rules


DropReason = str


def drop_reason(name: str, member_type: bytes, size: int) -> DropReason | None:
    """Why an exported member is left out of the `.wsl`, or None to keep it."""
    top, _, rest = name.partition("/")
    if name == ".dockerenv":
        return "docker's marker file"
    if name == "etc/resolv.conf":
        return "Microsoft: WSL generates /etc/resolv.conf"
    if name in ("etc/hostname", "etc/hosts") and size == 0 and member_type == tarfile.REGTYPE:
        return "empty container mount point (WSL generates it)"
    if top in ("dev", "proc", "sys") and rest:
        return "kernel file system, mounted by WSL"
    if is_kernel(name):
        return "Microsoft: no kernel in the rootfs (WSL brings its own)"
    if member_type == tarfile.DIRTYPE:
        return None
    return _noise_reason(name)


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


def _noise_reason(name: str) -> DropReason | None:
    for pattern, reason in _NOISE:
        if pattern.fullmatch(name):
            return f"build noise: {reason}"
    return None


def _rewrites_content(name: str) -> bool:
    """Members whose content is changed (they are read whole; all are small)."""
    return name in SHADOW_FILES or name in ("etc/machine-id", "var/lib/dbus/machine-id")


def rewrite_content(name: str, data: bytes, source_date_epoch: int) -> bytes:
    """The normalized content of a member for which `_rewrites_content` is true."""
    if name in SHADOW_FILES:
        return scrub_shadow(data, source_date_epoch if "gshadow" not in name else None)
    return b""  # machine-id: empty, so each installed distro makes its own on first boot


def scrub_shadow(data: bytes, source_date_epoch: int | None) -> bytes:
    """/etc/shadow (or gshadow) without password hashes: `!...` -> `!`, any other non-empty,
    non-`*` value -> `*`; with `source_date_epoch` (shadow, not gshadow) the
    "last change" day is clamped to that day, since useradd writes the build day."""
    out = []
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        fields = line.split(":")
        if len(fields) < 2:
            out.append(line)
            continue
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
    if not name.endswith(".pyc") or "/__pycache__/" not in f"/{name}" or len(head) < 16:
        return head
    if int.from_bytes(head[4:8], "little") != 0:
        return head  # hash-based pyc: already independent of mtimes
    return head[:8] + (source_date_epoch & 0xFFFFFFFF).to_bytes(4, "little") + head[12:]


def mask_entries(entries: dict[str, Entry]) -> list[Entry]:
    """Symlinks that mask Microsoft's discouraged units, for a rootfs with systemd."""
    if not any(b in entries for b in SYSTEMD_BINARIES):
        return []
    return [
        Entry(name=f"etc/systemd/system/{unit}", type=tarfile.SYMTYPE, mode=0o777, uid=0, gid=0,
              linkname="/dev/null")
        for unit in discouraged_units()
    ]


# ----------------------------------------------------------------------------- reading


class IterStream(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the docker SDK's export generator),
    counting bytes and reporting them to `progress`."""

    def __init__(self, chunks: Iterable[bytes], progress: ProgressFn = no_progress,
                 label: str = "export", total: int | None = None) -> None:
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
        b[:n] = self._buf[self._pos:self._pos + n]
        self._pos += n
        self.count += n
        if self.count - self._reported >= CHUNK:
            self._reported = self.count
            self._progress(self._label, self.count, self._total)
        return n


@dataclass
class _Spool:
    """Exported file data, appended to a temp file; entries keep (offset, size)."""

    fh: IO[bytes]
    pos: int = 0

    def add(self, src: IO[bytes] | None, size: int, head: bytes = b"") -> int:
        offset = self.pos
        if head:
            self.fh.write(head)
        remaining = size - len(head)
        while remaining > 0 and src is not None:
            chunk = src.read(min(CHUNK, remaining))
            if not chunk:
                raise BuildError("the exported rootfs ended in the middle of a file")
            self.fh.write(chunk)
            remaining -= len(chunk)
        self.pos += size
        return offset

    def add_bytes(self, data: bytes) -> int:
        offset = self.pos
        self.fh.write(data)
        self.pos += len(data)
        return offset


@dataclass
class NormalizeStats:
    """What normalization did (for the build's details and for tests)."""

    entries: int = 0
    bytes_in: int = 0
    dropped: dict[str, str] = field(default_factory=dict)  # name -> reason
    changed: dict[str, str] = field(default_factory=dict)  # name -> what changed


def _read_members(source: IO[bytes], spool: _Spool, source_date_epoch: int,
                  stats: NormalizeStats) -> dict[str, Entry]:
    """Pass 1: every kept member of the export, by clean name, data spooled."""
    entries: dict[str, Entry] = {}
    try:
        tar = tarfile.open(fileobj=source, mode="r|*")  # noqa: SIM115 (closed below)
    except tarfile.TarError as exc:
        raise BuildError(f"the exported rootfs is not a tar stream: {exc}") from exc
    with tar:
        try:
            for member in tar:
                _take_member(tar, member, entries, spool, source_date_epoch, stats)
        except tarfile.TarError as exc:
            raise BuildError(f"the exported rootfs tar is damaged: {exc}") from exc
    return entries


def _take_member(tar: tarfile.TarFile, member: tarfile.TarInfo, entries: dict[str, Entry],
                 spool: _Spool, source_date_epoch: int, stats: NormalizeStats) -> None:
    name = clean_name(member.name)
    if not name:
        return  # the root directory itself
    mtype = tarfile.DIRTYPE if member.isdir() else member.type
    if mtype == tarfile.AREGTYPE:
        mtype = tarfile.REGTYPE
    if mtype not in (tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                     tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE):
        raise BuildError(f"the exported rootfs has an unsupported member type at {name!r}")
    reason = drop_reason(name, mtype, member.size)
    if reason:
        stats.dropped[name] = reason
        entries.pop(name, None)
        return
    entry = Entry(
        name=name, type=mtype, mode=member.mode & 0o7777, uid=member.uid, gid=member.gid,
        devmajor=member.devmajor, devminor=member.devminor,
        xattrs=tuple(sorted((k, v) for k, v in member.pax_headers.items()
                            if k.startswith("SCHILY.xattr."))),
    )
    if mtype == tarfile.SYMTYPE:
        entry = replace(entry, linkname=member.linkname)
    elif mtype == tarfile.LNKTYPE:
        entry = replace(entry, linkname=clean_name(member.linkname))
    elif mtype == tarfile.REGTYPE:
        entry = _spool_file(tar, member, entry, spool, source_date_epoch, stats)
    entries[name] = entry


def _spool_file(tar: tarfile.TarFile, member: tarfile.TarInfo, entry: Entry, spool: _Spool,
                source_date_epoch: int, stats: NormalizeStats) -> Entry:
    src = tar.extractfile(member)
    name = entry.name
    if _rewrites_content(name):
        data = src.read() if src else b""
        new = rewrite_content(name, data, source_date_epoch)
        if new != data:
            stats.changed[name] = "scrubbed"
        return replace(entry, size=len(new), offset=spool.add_bytes(new))
    head = b""
    if name.endswith(".pyc") and src is not None and member.size >= 16:
        raw = src.read(16)
        head = pyc_header_fix(name, raw, source_date_epoch)
    return replace(entry, size=member.size, offset=spool.add(src, member.size, head))


# ----------------------------------------------------------------------------- fixing


def _fix_conf_files(entries: dict[str, Entry], spool_read: Callable[[Entry], bytes],
                    stats: NormalizeStats) -> None:
    """Both conf files root:root 0644; the oobe command root:root 0755."""
    for name in (WSL_CONF, DISTRIBUTION_CONF):
        entry = entries.get(name)
        if entry is None:
            continue
        if entry.type != tarfile.REGTYPE:
            raise BuildError(f"/{name} in the rootfs must be a regular file, not a link")
        if (entry.uid, entry.gid, entry.mode) != (0, 0, 0o644):
            stats.changed[name] = "root:root 0644"
        entries[name] = replace(entry, uid=0, gid=0, mode=0o644)
    dist = entries.get(DISTRIBUTION_CONF)
    if dist is None:
        return
    keys = parse_conf(spool_read(dist), f"/{DISTRIBUTION_CONF}")
    command = keys.get("oobe.command")
    if command:
        oobe = clean_name(command.split()[0])
        target = entries.get(oobe)
        if target is None or target.type != tarfile.REGTYPE:
            raise BuildError(f"/{DISTRIBUTION_CONF}: oobe.command {command!r} is not a file "
                             "in the rootfs; render the wsl files again (envbuilder render)")
        entries[oobe] = replace(target, uid=0, gid=0, mode=0o755)


def _check_passwd(entries: dict[str, Entry], spool_read: Callable[[Entry], bytes]) -> None:
    passwd = entries.get("etc/passwd")
    if passwd is None or passwd.type != tarfile.REGTYPE:
        raise BuildError("the rootfs has no /etc/passwd; WSL needs root (uid 0) in it")
    users = parse_passwd(spool_read(passwd))
    if users.get(0, [""])[0] != "root":
        raise BuildError("/etc/passwd in the rootfs has no `root` user with uid 0; WSL needs it")


def _resolve_hardlinks(entries: dict[str, Entry]) -> None:
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
            raise BuildError(f"the exported rootfs hard-links to {target!r}, which is not a "
                             "regular file in it")
        first = members[0]
        entries[first] = replace(entries[first], type=tarfile.REGTYPE, linkname="",
                                 size=data.size, offset=data.offset)
        for name in members[1:]:
            entries[name] = replace(entries[name], type=tarfile.LNKTYPE, linkname=first,
                                    size=0, offset=0)


def _drop_orphans(entries: dict[str, Entry], stats: NormalizeStats) -> None:
    """Drop hard links whose target was dropped (build noise has no other names worth
    keeping)."""
    for name, entry in list(entries.items()):
        if entry.type == tarfile.LNKTYPE and entry.linkname not in entries:
            stats.dropped[name] = f"hard link to dropped {entry.linkname}"
            del entries[name]


# ----------------------------------------------------------------------------- writing


def _tarinfo(entry: Entry, source_date_epoch: int) -> tarfile.TarInfo:
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


def _write_tar(out: IO[bytes], entries: list[Entry], spool: IO[bytes], source_date_epoch: int,
               progress: ProgressFn, total: int) -> None:
    done = 0
    reported = 0
    with tarfile.TarFile(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                         errors="surrogateescape", copybufsize=CHUNK) as tar:
        for entry in entries:
            info = _tarinfo(entry, source_date_epoch)
            if entry.type == tarfile.REGTYPE:
                spool.seek(entry.offset)
                tar.addfile(info, _Window(spool, entry.size))
                done += entry.size
            else:
                tar.addfile(info)
            if done - reported >= CHUNK:
                reported = done
                progress("compress", done, total)
    progress("compress", total, total)


class _Window(io.RawIOBase):
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


@dataclass(frozen=True)
class WslResult:
    """A written `.wsl`: its path, sha256, compressed size and what normalization did."""

    path: Path
    sha256: str
    size: int
    stats: NormalizeStats


def normalize(source: IO[bytes], out: IO[bytes], *, source_date_epoch: int, spool_dir: Path,
              progress: ProgressFn = no_progress) -> NormalizeStats:
    """Read a rootfs tar stream (`docker export`, plain or compressed) and write the normalized,
    uncompressed tar to `out`. Raises BuildError when the rootfs breaks a rule that cannot be
    fixed here (no root user, a conf file that is a link, a missing oobe command)."""
    if source_date_epoch < 0:
        raise BuildError("SOURCE_DATE_EPOCH must not be negative")
    stats = NormalizeStats()
    with tempfile.TemporaryFile(dir=spool_dir, prefix=".wsl-spool-") as fh:
        spool = _Spool(fh)
        entries = _read_members(source, spool, source_date_epoch, stats)

        def spool_read(entry: Entry) -> bytes:
            fh.seek(entry.offset)
            return fh.read(entry.size)

        fh.flush()
        _fix_conf_files(entries, spool_read, stats)
        _check_passwd(entries, spool_read)
        _drop_orphans(entries, stats)
        _resolve_hardlinks(entries)
        for mask in mask_entries(entries):
            entries[mask.name] = mask
            stats.changed[mask.name] = "masked"
        _add_missing_parents(entries)
        ordered = sorted(entries.values(), key=lambda e: e.key)
        stats.entries = len(ordered)
        stats.bytes_in = spool.pos
        _write_tar(out, ordered, fh, source_date_epoch, progress, spool.pos)
    return stats


def _add_missing_parents(entries: dict[str, Entry]) -> None:
    """Directories every entry needs, root:root 0755, when the export left them out."""
    for name in list(entries):
        parent = posixpath.dirname(name)
        while parent and parent not in entries:
            entries[parent] = Entry(name=parent, type=tarfile.DIRTYPE, mode=0o755, uid=0, gid=0)
            parent = posixpath.dirname(parent)


def write_wsl(source: IO[bytes], dest: Path, *, source_date_epoch: int,
              compresslevel: int = COMPRESSLEVEL, threads: int | None = None,
              progress: ProgressFn = no_progress) -> WslResult:
    """Normalize `source` (a rootfs tar stream) into the `.wsl` file `dest`, atomically (temp
    file + rename; on error nothing is written). Compressed by `ParallelGzipWriter` (the bytes
    do not depend on `threads`); the gzip header carries no name and mtime 0."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            hasher = HashingWriter(raw)
            gz = ParallelGzipWriter(hasher, compresslevel, threads)  # type: ignore[arg-type]
            try:
                stats = normalize(source, gz, source_date_epoch=source_date_epoch,  # type: ignore[arg-type]
                                  spool_dir=dest.parent, progress=progress)
            except BaseException:
                gz._pool.shutdown(wait=True, cancel_futures=True)
                raise
            gz.close()
            raw.flush()
            os.fsync(raw.fileno())
        Path(tmp).chmod(0o644)
        Path(tmp).replace(dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return WslResult(path=dest, sha256=hasher.sha.hexdigest(), size=hasher.size, stats=stats)



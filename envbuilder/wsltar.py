"""Turn a `docker export` stream into a reproducible `.wsl` file (WSL's modern distro format).

A `.wsl` file is a gzip'd tar whose root is the filesystem root (WSL 2.4.4+, `wsl --install
--from-file`). `write_wsl` reads the export stream once (never holding the rootfs in memory: file
data is spooled to a temp file beside the output, only headers stay in memory), applies
Microsoft's rules for such tars, removes what makes two builds of one Dockerfile differ, sorts the
entries and writes a deterministic gzip. Same rootfs content + same SOURCE_DATE_EPOCH -> same
bytes -> same sha256.

What the normalizer does, and why:
  * names: relative to the root (`etc/passwd`), no `./`, no `..`; directories before contents,
    siblings in byte order (sorted by path components);
  * every mtime = SOURCE_DATE_EPOCH; owners numeric (uid/gid kept, uname/gname empty); only
    `SCHILY.xattr.*` PAX records kept (file capabilities), atime/ctime dropped;
  * Microsoft's rules: no /etc/resolv.conf, no kernel (/boot/vmlinuz*, initrd, the root
    symlinks), /etc/wsl.conf and /etc/wsl-distribution.conf root:root 0644, the oobe command
    root:root 0755, root (uid 0) must be in /etc/passwd, no password hashes in /etc/shadow
    (`*`, or `!` for locked accounts), the systemd units Microsoft discourages masked
    (`/etc/systemd/system/UNIT -> /dev/null`) when the rootfs has systemd;
  * container leftovers dropped: /.dockerenv, the empty /etc/hostname and /etc/hosts mount
    points, everything under /dev, /proc, /sys (WSL mounts those);
  * build noise dropped or normalized: /var/log files, apt lists and caches, the ldconfig
    aux-cache, debconf/dpkg `*-old` backups, /tmp and /var/tmp contents, /etc/machine-id emptied
    (systemd makes one on first boot), the "last password change" day in shadow files clamped to
    SOURCE_DATE_EPOCH, and timestamp-based `.pyc` headers set to SOURCE_DATE_EPOCH (which is also
    the source file's mtime in the tar, so the caches stay valid).

`check_wsl_tar` re-reads a finished `.wsl` and reports every rule it breaks: Microsoft's
validator checks (distributions/validate-modern.py in microsoft/WSL, re-implemented here, with
its error/warning levels) plus this module's own promises.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import os
import posixpath
import re
import tarfile
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Literal

from envbuilder.compat import load_compat
from envbuilder.errors import BuildError
from envbuilder.progress import ProgressFn, no_progress

#: Keys Microsoft's validator accepts in /etc/wsl-distribution.conf (section.key, lower case).
DISTRIBUTION_CONF_KEYS = frozenset(
    {"oobe.command", "oobe.defaultuid", "oobe.defaultname", "shortcut.icon",
     "windowsterminal.profiletemplate"}
)
#: Keys Microsoft's validator accepts in /etc/wsl.conf of a distribution it would publish.
STORE_WSL_CONF_KEYS = frozenset({"boot.systemd"})
#: Where Microsoft wants the oobe command and the icon.
OOBE_DIRS = ("/usr/lib/wsl", "/usr/libexec/wsl")
ICON_DIRS = ("/usr/lib/wsl", "/usr/share/wsl")
WSL_CONF = "etc/wsl.conf"
DISTRIBUTION_CONF = "etc/wsl-distribution.conf"
#: Fixed gzip level: part of the artifact's identity (a different level -> a different sha256).
COMPRESSLEVEL = 6
#: Version of the bytes this module writes: bump it whenever the same rootfs would give other
#: bytes (a rule, the tar layout, the compressor), so builds know a recorded file is stale.
FORMAT = "2"
_CHUNK = 1 << 20
_SYSTEMD_BINARIES = ("usr/lib/systemd/systemd", "lib/systemd/systemd")
_SHADOW_FILES = ("etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-")
_DAY = 86400


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


def sort_key(name: str) -> tuple[str, ...]:
    """Order of entries: by path components, so a directory precedes everything inside it."""
    return tuple(name.split("/"))


def clean_name(raw: str) -> str:
    """A member name relative to the root ('' for the root itself). Raises BuildError for a
    name that would escape the root."""
    name = raw
    while name.startswith("./"):
        name = name[2:]
    name = name.lstrip("/")
    norm = posixpath.normpath(name) if name else ""
    if norm in (".", ""):
        return ""
    if norm == ".." or norm.startswith("../"):
        raise BuildError(f"the exported rootfs has a member outside its root: {raw!r}")
    return norm


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
    if _is_kernel(name):
        return "Microsoft: no kernel in the rootfs (WSL brings its own)"
    if member_type == tarfile.DIRTYPE:
        return None
    return _noise_reason(name)


def _is_kernel(name: str) -> bool:
    base = posixpath.basename(name)
    parent = posixpath.dirname(name)
    kernelish = base.startswith(("vmlinuz", "vmlinux", "initrd.img", "initramfs"))
    return kernelish and parent in ("", "boot")


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
    return name in _SHADOW_FILES or name in ("etc/machine-id", "var/lib/dbus/machine-id")


def rewrite_content(name: str, data: bytes, source_date_epoch: int) -> bytes:
    """The normalized content of a member for which `_rewrites_content` is true."""
    if name in _SHADOW_FILES:
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
            fields[2] = str(min(int(fields[2]), source_date_epoch // _DAY))
        out.append(":".join(fields))
    return "\n".join(out).encode("utf-8", "surrogateescape")


def _scrub_password(value: str) -> str:
    if value in ("*", "!", "!*", "x"):
        return value
    if value.startswith("!"):
        return "!"
    return "*"


def is_password_hash(value: str) -> bool:
    """True when a shadow password field holds (or could hold) a usable password."""
    return value not in ("*", "!", "!*", "x") and not (value.startswith("!") and len(value) <= 2)


def pyc_header_fix(name: str, head: bytes, source_date_epoch: int) -> bytes:
    """The first 16 bytes of a `.pyc` with a timestamp-based header (PEP 552 flags 0) carrying
    SOURCE_DATE_EPOCH as the source mtime; other headers unchanged."""
    if not name.endswith(".pyc") or "/__pycache__/" not in f"/{name}" or len(head) < 16:
        return head
    if int.from_bytes(head[4:8], "little") != 0:
        return head  # hash-based pyc: already independent of mtimes
    return head[:8] + (source_date_epoch & 0xFFFFFFFF).to_bytes(4, "little") + head[12:]


def discouraged_units() -> tuple[str, ...]:
    """The units Microsoft's validator warns about when enabled (validate-modern.py), from the
    compatibility data (envbuilder/data/wsl.toml)."""
    return load_compat().wsl_units.discouraged


def mask_entries(entries: dict[str, Entry]) -> list[Entry]:
    """Symlinks that mask Microsoft's discouraged units, for a rootfs with systemd."""
    if not any(b in entries for b in _SYSTEMD_BINARIES):
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
        if self.count - self._reported >= _CHUNK:
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
            chunk = src.read(min(_CHUNK, remaining))
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


class ParallelGzipWriter(io.RawIOBase):
    """A gzip writer that compresses fixed-size blocks on several threads (zlib releases the
    GIL), like pigz: each block is raw deflate primed with the previous block's last 32 KiB and
    ended by a sync flush, the last one by a final block. The bytes depend only on the data,
    the level and BLOCK, never on the number of threads. Header: no name, mtime 0, OS 255."""

    BLOCK = 1 << 20
    _WINDOW = 1 << 15

    def __init__(self, fh: IO[bytes], compresslevel: int = COMPRESSLEVEL,
                 threads: int | None = None) -> None:
        self.fh = fh
        self.level = compresslevel
        self.threads = max(1, threads or min(4, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wsl-gzip")
        self._pending: deque[Future[bytes]] = deque()
        self._buf = bytearray()
        self._prev_tail = b""
        self._crc = 0
        self._size = 0
        self._finished = False
        xfl = 2 if compresslevel == 9 else 4 if compresslevel == 1 else 0
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([xfl, 255]))

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._size

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = bytes(b)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._buf += data
        while len(self._buf) > self.BLOCK:  # keep a remainder: the last block must be final
            block = bytes(self._buf[:self.BLOCK])
            del self._buf[:self.BLOCK]
            self._submit(block, last=False)
        return len(data)

    def _submit(self, block: bytes, last: bool) -> None:
        self._pending.append(self._pool.submit(_deflate, block, self._prev_tail, self.level,
                                               last))
        self._prev_tail = block[-self._WINDOW:]
        while len(self._pending) > 2 * self.threads:
            self.fh.write(self._pending.popleft().result())

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            try:
                self._submit(bytes(self._buf), last=True)
                self._buf.clear()
                while self._pending:
                    self.fh.write(self._pending.popleft().result())
                self.fh.write(self._crc.to_bytes(4, "little")
                              + (self._size & 0xFFFFFFFF).to_bytes(4, "little"))
            finally:
                self._pool.shutdown(wait=True, cancel_futures=True)
        super().close()


def _deflate(block: bytes, dictionary: bytes, level: int, last: bool) -> bytes:
    if dictionary:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=dictionary)
    else:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15)
    return comp.compress(block) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class _HashingWriter(io.RawIOBase):
    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.fh.write(b)
        n = len(b)
        self.size += n
        return n


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
                         errors="surrogateescape", copybufsize=_CHUNK) as tar:
        for entry in entries:
            info = _tarinfo(entry, source_date_epoch)
            if entry.type == tarfile.REGTYPE:
                spool.seek(entry.offset)
                tar.addfile(info, _Window(spool, entry.size))
                done += entry.size
            else:
                tar.addfile(info)
            if done - reported >= _CHUNK:
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
            hasher = _HashingWriter(raw)
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


# ----------------------------------------------------------------------------- parsing


def parse_conf(data: bytes, where: str) -> dict[str, str]:
    """An INI conf file (wsl.conf, wsl-distribution.conf) as {"section.key": value}, keys
    lower-cased as WSL and Microsoft's validator read them."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise BuildError(f"{where} is not a valid INI file: {exc}") from exc
    return {f"{section}.{key.lower()}": parser[section][key]
            for section in parser.sections() for key in parser[section]}


def parse_passwd(data: bytes) -> dict[int, list[str]]:
    """/etc/passwd as {uid: fields}; lines that are not 7 fields with a numeric uid are skipped
    (check_wsl_tar reports them)."""
    users: dict[int, list[str]] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[2].isdigit():
            users.setdefault(int(fields[2]), fields)
    return users


# ----------------------------------------------------------------------------- checking


Level = Literal["error", "warning"]


@dataclass(frozen=True)
class RuleFinding:
    """One broken rule in a `.wsl`: `source` is "microsoft" (validate-modern.py's checks and
    levels) or "envbuilder" (this module's promises)."""

    level: Level
    source: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: [{self.source}:{self.rule}] {self.message}"


class TarView:
    """Random access to a finished `.wsl` (headers in memory, data read on demand)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.members = tar.getmembers()
        self.by_name = {clean_name(m.name): m for m in self.members}

    def resolve(self, path: str, max_hops: int = 40) -> tarfile.TarInfo | None:
        """The member at absolute `path`, following symlinks in it and in its parents (and a
        hard link to its target); None when it does not exist or links loop."""
        parts = deque(p for p in path.split("/") if p and p != ".")
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.popleft()
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            member = self.by_name.get("/".join([*resolved, part]))
            if member is None:
                return None
            if member.issym():
                hops += 1
                if hops > max_hops:
                    return None
                if member.linkname.startswith("/"):
                    resolved = []
                parts.extendleft(reversed([p for p in member.linkname.split("/") if p]))
                continue
            resolved.append(part)
        member = self.by_name.get("/".join(resolved)) if resolved else None
        if member is not None and member.islnk():
            member = self.by_name.get(clean_name(member.linkname))
        return member

    def read(self, member: tarfile.TarInfo) -> bytes:
        if member.islnk():
            member = self.by_name[clean_name(member.linkname)]
        fh = self.tar.extractfile(member)
        return fh.read() if fh else b""


def is_x86_64_elf(head: bytes) -> bool:
    """What `file` calls "ELF 64-bit ... x86-64, version 1" (validate-modern.py's magic check)."""
    return (len(head) >= 20 and head[:4] == b"\x7fELF" and head[4] == 2 and head[6] == 1
            and int.from_bytes(head[18:20], "little" if head[5] == 1 else "big") == 62)


def check_wsl_tar(path: Path, *, source_date_epoch: int | None = None,
                  store_rules: bool = False) -> list[RuleFinding]:
    """Every rule the `.wsl` at `path` breaks (an empty list: it passes). Microsoft's checks
    keep the validator's levels; `store_rules=True` adds its check that wsl.conf holds only
    `boot.systemd` (a rule for distributions published in Microsoft's catalog, which a team's
    own distro -- needing `[user] default` for `wsl --import` -- does not follow)."""
    findings: list[RuleFinding] = []
    with path.open("rb") as fh:
        head = fh.read(3)
        fh.seek(0)
        if head[:2] != b"\x1f\x8b":
            findings.append(RuleFinding("error", "microsoft", "format",
                                        "not gzip compressed (WSL takes gzip or xz tars)"))
        with tarfile.open(fileobj=fh, mode="r:*") as tar:
            view = TarView(tar)
            findings += _microsoft_checks(view, store_rules)
            findings += _envbuilder_checks(view, source_date_epoch)
    return findings


def _microsoft_checks(view: TarView, store_rules: bool) -> list[RuleFinding]:
    out: list[RuleFinding] = []

    def add(level: Level, rule: str, message: str) -> None:
        out.append(RuleFinding(level, "microsoft", rule, message))

    def mode_owner(path: str, modes: tuple[int, ...], gid: int | None = 0,
                   max_size: int | None = None) -> tarfile.TarInfo | None:
        member = view.resolve(path)
        if member is None:
            add("error", "present", f"{path} not found in the tar")
            return None
        if member.mode not in modes:
            add("warning", "mode", f"{path} has mode {oct(member.mode)}, expected one of "
                f"{', '.join(oct(m) for m in modes)}")
        if member.uid != 0:
            add("warning", "owner", f"{path} has uid {member.uid}, expected 0")
        if gid is not None and member.gid != gid:
            add("warning", "owner", f"{path} has gid {member.gid}, expected {gid}")
        if max_size is not None and member.size > max_size:
            add("error", "size", f"{path} is {member.size} bytes, at most {max_size}")
        return member

    default_uid: int | None = None
    dist = mode_owner("/etc/wsl-distribution.conf", (0o664, 0o644))
    if dist is not None:
        keys = _conf_keys(view, dist, "/etc/wsl-distribution.conf", add)
        unexpected = sorted(k for k in keys if k not in DISTRIBUTION_CONF_KEYS)
        if unexpected:
            add("error", "distribution-conf-keys",
                f"unexpected keys in /etc/wsl-distribution.conf: {unexpected}")
        command = keys.get("oobe.command")
        if command:
            mode_owner(command, (0o775, 0o755))
            if not command.startswith(OOBE_DIRS):
                add("warning", "oobe-location",
                    f"oobe.command {command!r} is not under {' or '.join(OOBE_DIRS)}")
        uid_text = keys.get("oobe.defaultuid")
        if uid_text:
            if uid_text != "1000":
                add("warning", "default-uid", f"oobe.defaultUid is {uid_text}, not 1000")
            default_uid = int(uid_text) if uid_text.isdigit() else None
        icon = keys.get("shortcut.icon")
        if icon:
            mode_owner(icon, (0o664, 0o644), max_size=1024 * 1024)
            if not icon.startswith(ICON_DIRS):
                add("warning", "icon-location", f"shortcut.icon {icon!r} is not under "
                    f"{' or '.join(ICON_DIRS)}")
        else:
            add("warning", "icon", "no shortcut.icon provided")
        template = keys.get("windowsterminal.profiletemplate")
        if template:
            mode_owner(template, (0o660, 0o640), max_size=1024 * 1024)
    wsl_conf = view.resolve("/etc/wsl.conf")
    if wsl_conf is not None:
        mode_owner("/etc/wsl.conf", (0o664, 0o644))
        keys = _conf_keys(view, wsl_conf, "/etc/wsl.conf", add)
        extra = sorted(k for k in keys if k not in STORE_WSL_CONF_KEYS)
        if store_rules and extra:
            add("error", "wsl-conf-keys", f"unexpected keys in /etc/wsl.conf: {extra}")
        if keys.get("boot.systemd", "").lower() == "true":
            _elf(view, "/sbin/init", add, mode_owner)
    passwd = mode_owner("/etc/passwd", (0o664, 0o644))
    if passwd is not None:
        _passwd_checks(view.read(passwd), default_uid, add)
    mode_owner("/etc/shadow", (0o640, 0o600, 0), gid=None)
    _elf(view, "/bin/bash", add, mode_owner)
    _elf(view, "/bin/sh", add, mode_owner)
    for unit in _enabled_discouraged_units(view):
        add("warning", "systemd-unit", f"discouraged systemd unit enabled: {unit}")
    return out


def _conf_keys(view: TarView, member: tarfile.TarInfo, where: str,
               add: Callable[[Level, str, str], None]) -> dict[str, str]:
    try:
        return parse_conf(view.read(member), where)
    except BuildError as exc:
        add("error", "conf-syntax", str(exc))
        return {}


def _elf(view: TarView, path: str, add: Callable[[Level, str, str], None],
         mode_owner: Callable[..., tarfile.TarInfo | None]) -> None:
    member = mode_owner(path, (0o755, 0o775))
    if member is not None and not is_x86_64_elf(view.read(member)[:64]):
        add("error", "elf", f"{path} is not an x86-64 ELF executable")


def _passwd_checks(data: bytes, default_uid: int | None,
                   add: Callable[[Level, str, str], None]) -> None:
    seen: dict[int, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) != 7 or not fields[2].isdigit():
            add("error", "passwd", f"invalid /etc/passwd entry: {line!r}")
            continue
        uid = int(fields[2])
        if uid in seen:
            add("error", "passwd", f"duplicated uid {uid} in /etc/passwd")
        else:
            seen[uid] = fields[0]
    if 0 not in seen:
        add("error", "root", "no root (uid 0) in /etc/passwd")
    elif seen[0] != "root":
        add("error", "root", f"/etc/passwd has uid 0 named {seen[0]!r}, not root")
    if default_uid is not None and default_uid in seen:
        add("warning", "default-user-exists",
            f"/etc/passwd already has the default uid {default_uid} ({seen[default_uid]})")


def _enabled_discouraged_units(view: TarView) -> list[str]:
    """Discouraged units wanted by some target and not masked in /etc/systemd/system."""
    found = []
    discouraged = set(discouraged_units())
    for name, member in view.by_name.items():
        base = posixpath.basename(name)
        parent = posixpath.dirname(name)
        if base not in discouraged or not parent.endswith(".target.wants"):
            continue
        if not member.issym() and not member.isfile():
            continue
        mask = view.by_name.get(f"etc/systemd/system/{base}")
        if mask is not None and mask.issym() and mask.linkname == "/dev/null":
            continue
        found.append(f"/{name}")
    return sorted(found)


def _envbuilder_checks(view: TarView, source_date_epoch: int | None) -> list[RuleFinding]:
    out: list[RuleFinding] = []

    def add(rule: str, message: str) -> None:
        out.append(RuleFinding("error", "envbuilder", rule, message))

    names = [m.name for m in view.members]
    if any(n.startswith(("/", "./", "../")) or n == "." for n in names):
        add("root", "member names must be relative to the filesystem root (etc/passwd)")
    if names != sorted(names, key=sort_key):
        add("sorted", "entries are not sorted by path")
    if len(set(names)) != len(names):
        add("unique", "duplicate entries")
    for member in view.members:
        if member.uname or member.gname:
            add("numeric-owner",
                f"{member.name} carries owner names ({member.uname}:{member.gname})")
            break
    if source_date_epoch is not None:
        wrong = [m.name for m in view.members if m.mtime != source_date_epoch]
        if wrong:
            add("mtime", f"{len(wrong)} entries have an mtime other than SOURCE_DATE_EPOCH "
                f"{source_date_epoch}, e.g. {wrong[0]}")
    if "etc/resolv.conf" in view.by_name:
        add("resolv-conf", "the tar has /etc/resolv.conf (WSL generates it)")
    kernels = [n for n in view.by_name if _is_kernel(n)]
    if kernels:
        add("kernel", f"the tar has a kernel or initrd: {kernels}")
    for conf in (WSL_CONF, DISTRIBUTION_CONF):
        m = view.by_name.get(conf)
        if m is not None and (m.uid, m.gid, m.mode, m.isfile()) != (0, 0, 0o644, True):
            add("conf-owner", f"/{conf} must be a root:root 0644 file")
    shadow = view.by_name.get("etc/shadow")
    if shadow is not None:
        for line in view.read(shadow).decode("utf-8", "replace").splitlines():
            fields = line.split(":")
            if len(fields) > 1 and is_password_hash(fields[1]):
                add("shadow", f"/etc/shadow has a password for {fields[0]!r}")
    if any(b in view.by_name for b in _SYSTEMD_BINARIES):
        for unit in discouraged_units():
            m = view.by_name.get(f"etc/systemd/system/{unit}")
            if m is None or not m.issym() or m.linkname != "/dev/null":
                add("masked", f"{unit} is not masked (/etc/systemd/system/{unit} -> /dev/null)")
    return out


def gzip_header_is_deterministic(path: Path) -> bool:
    """True when the gzip header has mtime 0 and no file name (what `write_wsl` promises)."""
    with path.open("rb") as fh:
        head = fh.read(10)
    flags, mtime = head[3], int.from_bytes(head[4:8], "little")
    return head[:3] == b"\x1f\x8b\x08" and not flags & 0x08 and mtime == 0


__all__ = [
    "COMPRESSLEVEL",
    "FORMAT",
    "Entry",
    "NormalizeStats",
    "ParallelGzipWriter",
    "RuleFinding",
    "WslResult",
    "check_wsl_tar",
    "clean_name",
    "discouraged_units",
    "gzip_header_is_deterministic",
    "is_password_hash",
    "normalize",
    "parse_conf",
    "parse_passwd",
    "scrub_shadow",
    "write_wsl",
]

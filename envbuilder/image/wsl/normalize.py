"""The normaliser: a `docker export` stream in, a reproducible, rule-abiding `.wsl` out.

The deterministic-tar primitives (entries, spool, noise rules, shadow days, pyc headers, hard
links, writing) are envbuilder.image.tar's, shared with the image layer normaliser; this module
adds Microsoft's rules for a WSL rootfs."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from envbuilder.core.errors import BuildError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image.tar import (
    Entry,
    IterStream,
    Spool,
    add_missing_parents,
    drop_orphans,
    entry_of,
    noise_reason,
    pyc_header_fix,
    resolve_hardlinks,
    rewrite_shadow,
    rewrites_content,
    write_entries,
)
from envbuilder.image.wsl.conventions import (
    COMPRESSLEVEL,
    DISTRIBUTION_CONF,
    SHADOW_FILES,
    SYSTEMD_BINARIES,
    WSL_CONF,
    clean_name,
    discouraged_units,
    is_kernel,
    parse_conf,
    parse_passwd,
)
from envbuilder.image.wsl.gzipwriter import HashingWriter, ParallelGzipWriter

#: Re-exported: the package face (envbuilder.image.wsl) offers them.
__all__ = [
    "Entry",
    "IterStream",
    "NormalizeStats",
    "WslResult",
    "drop_reason",
    "mask_entries",
    "normalize",
    "pyc_header_fix",
    "rewrite_content",
    "scrub_shadow",
    "write_wsl",
]

# ----------------------------------------------------------------------------- rules


DropReason = str
#: What the tars this module reads are, in messages.
_WHAT = "the exported rootfs"


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
    return noise_reason(name)


def rewrite_content(name: str, data: bytes, source_date_epoch: int) -> bytes:
    """The normalized content of a member for which `rewrites_content` is true."""
    if name in SHADOW_FILES:
        return scrub_shadow(data, source_date_epoch if "gshadow" not in name else None)
    return b""  # machine-id: empty, so each installed distro makes its own on first boot


def scrub_shadow(data: bytes, source_date_epoch: int | None) -> bytes:
    """/etc/shadow (or gshadow) without password hashes: `!...` -> `!`, any other non-empty,
    non-`*` value -> `*`; with `source_date_epoch` (shadow, not gshadow) the
    "last change" day is clamped to that day, since useradd writes the build day."""
    return rewrite_shadow(data, source_date_epoch, scrub_passwords=True)


def mask_entries(entries: dict[str, Entry]) -> list[Entry]:
    """Symlinks that mask Microsoft's discouraged units, for a rootfs with systemd."""
    if not any(b in entries for b in SYSTEMD_BINARIES):
        return []
    return [
        Entry(
            name=f"etc/systemd/system/{unit}",
            type=tarfile.SYMTYPE,
            mode=0o777,
            uid=0,
            gid=0,
            linkname="/dev/null",
        )
        for unit in discouraged_units()
    ]


# ----------------------------------------------------------------------------- reading


@dataclass
class NormalizeStats:
    """What normalization did (for the build's details and for tests)."""

    entries: int = 0
    bytes_in: int = 0
    dropped: dict[str, str] = field(default_factory=dict)  # name -> reason
    changed: dict[str, str] = field(default_factory=dict)  # name -> what changed


def _read_members(
    source: IO[bytes], spool: Spool, source_date_epoch: int, stats: NormalizeStats
) -> dict[str, Entry]:
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


def _take_member(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    entries: dict[str, Entry],
    spool: Spool,
    source_date_epoch: int,
    stats: NormalizeStats,
) -> None:
    name = clean_name(member.name)
    if not name:
        return  # the root directory itself
    entry = entry_of(member, name, _WHAT)
    reason = drop_reason(name, entry.type, member.size)
    if reason:
        stats.dropped[name] = reason
        entries.pop(name, None)
        return
    if entry.type == tarfile.REGTYPE:
        entry = _spool_file(tar, member, entry, spool, source_date_epoch, stats)
    entries[name] = entry


def _spool_file(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    entry: Entry,
    spool: Spool,
    source_date_epoch: int,
    stats: NormalizeStats,
) -> Entry:
    src = tar.extractfile(member)
    name = entry.name
    if rewrites_content(name):
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


def _fix_conf_files(
    entries: dict[str, Entry], spool_read: Callable[[Entry], bytes], stats: NormalizeStats
) -> None:
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
            raise BuildError(
                f"/{DISTRIBUTION_CONF}: oobe.command {command!r} is not a file "
                "in the rootfs; render the wsl files again (envbuilder render)"
            )
        entries[oobe] = replace(target, uid=0, gid=0, mode=0o755)


def _check_passwd(entries: dict[str, Entry], spool_read: Callable[[Entry], bytes]) -> None:
    passwd = entries.get("etc/passwd")
    if passwd is None or passwd.type != tarfile.REGTYPE:
        raise BuildError("the rootfs has no /etc/passwd; WSL needs root (uid 0) in it")
    users = parse_passwd(spool_read(passwd))
    if users.get(0, [""])[0] != "root":
        raise BuildError("/etc/passwd in the rootfs has no `root` user with uid 0; WSL needs it")


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class WslResult:
    """A written `.wsl`: its path, sha256, compressed size and what normalization did."""

    path: Path
    sha256: str
    size: int
    stats: NormalizeStats


def normalize(
    source: IO[bytes],
    out: IO[bytes],
    *,
    source_date_epoch: int,
    spool_dir: Path,
    progress: ProgressFn = no_progress,
) -> NormalizeStats:
    """Read a rootfs tar stream (`docker export`, plain or compressed) and write the normalized,
    uncompressed tar to `out`. Raises BuildError when the rootfs breaks a rule that cannot be
    fixed here (no root user, a conf file that is a link, a missing oobe command)."""
    if source_date_epoch < 0:
        raise BuildError("SOURCE_DATE_EPOCH must not be negative")
    stats = NormalizeStats()
    with tempfile.TemporaryFile(dir=spool_dir, prefix=".wsl-spool-") as fh:
        spool = Spool(fh)
        entries = _read_members(source, spool, source_date_epoch, stats)

        def spool_read(entry: Entry) -> bytes:
            fh.seek(entry.offset)
            return fh.read(entry.size)

        fh.flush()
        _fix_conf_files(entries, spool_read, stats)
        _check_passwd(entries, spool_read)
        drop_orphans(entries, stats.dropped)
        resolve_hardlinks(entries)
        for mask in mask_entries(entries):
            entries[mask.name] = mask
            stats.changed[mask.name] = "masked"
        add_missing_parents(entries)
        ordered = sorted(entries.values(), key=lambda e: e.key)
        stats.entries = len(ordered)
        stats.bytes_in = spool.pos
        write_entries(out, ordered, fh, source_date_epoch, progress, spool.pos)
    return stats


def write_wsl(
    source: IO[bytes],
    dest: Path,
    *,
    source_date_epoch: int,
    compresslevel: int = COMPRESSLEVEL,
    threads: int | None = None,
    progress: ProgressFn = no_progress,
) -> WslResult:
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
                stats = normalize(
                    source,
                    gz,  # type: ignore[arg-type]
                    source_date_epoch=source_date_epoch,
                    spool_dir=dest.parent,
                    progress=progress,
                )
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

"""Folders below a root, opened without following a link (dir_fd walks, O_NOFOLLOW).

    Tree(root, follow_root=False)   handles of the folders below `root`; reads, new files,
                                    renames and deletions through them
    LinkInTheWay                    a link (or a non-folder) where a folder must be
    plain_relative(text)            a relative path of plain names, or None

Used where a path below a folder must not lead out of it: recovering a commit journal
(envbuilder.core.journal) and reading a shared job folder (envbuilder.report.jobfolder). Each
folder is opened from its parent's handle with O_NOFOLLOW, so a symlink anywhere below the root
is refused, never followed, and a folder swapped for a link half-way cannot redirect a read, a
rename or a deletion. Where dir_fd does not exist (Windows), each step checks with lstat instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import OrderedDict
from pathlib import Path, PurePosixPath

_MAX_DEPTH = 16
#: Folder handles a Tree keeps open at most (the root's included): a commit of 1,000 envs'
#: rendered files touches 2,000 folders, and `ulimit -n` is often 1024. The least recently used
#: handle is closed; a folder needed again is opened again from its parent, without following a
#: link, so that a swapped folder is still refused. Above _MAX_DEPTH, so a folder and every
#: parent on its way stay open while it is in use.
_MAX_OPEN = 64
_MAX_NAME_BYTES = 255
_DIRFD = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def plain_relative(text: object) -> PurePosixPath | None:
    """`text` as a relative path of plain names ('a/b/c'), or None: absolute, empty parts, `.`,
    `..`, backslashes, drive colons, NUL, names over 255 bytes or more than 16 levels deep."""
    if not isinstance(text, str) or not text or len(text) > 4096:
        return None
    parts = text.split("/")
    if len(parts) > _MAX_DEPTH:
        return None
    for part in parts:
        if part in ("", ".", "..") or any(c in part for c in "\\:\0"):
            return None
        if len(part.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES:
            return None
    return PurePosixPath(*parts)


class LinkInTheWay(Exception):
    """A symlink (or something other than a folder) where a folder below the root must be."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} {what}")
        self.path = path
        self.what = what


class Tree:
    """The folders below `root`, each opened from its parent with O_NOFOLLOW (a dir_fd walk):
    a symlink below the root is refused, never followed, and every rename, deletion and new
    file goes through the handle of its folder. Where dir_fd does not exist (Windows), each
    step checks with lstat that no part of the path is a link. The root itself is opened as
    given (its last part must not be a link)."""

    def __init__(self, root: Path, follow_root: bool = False) -> None:
        self.root = root
        self._fds: OrderedDict[tuple[str, ...], int | None] = OrderedDict()
        if _DIRFD:
            fd = self._open(None, str(root), root, follow_root)
            self._fds[()] = fd
            self.info = os.fstat(fd)
        else:
            self._fds[()] = None
            self.info = root.stat() if follow_root else root.lstat()
            if not stat.S_ISDIR(self.info.st_mode) or _is_reparse(self.info):
                raise LinkInTheWay(root, _what_is(root))

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fds = OrderedDict()

    def _open(self, parent: int | None, name: str, path: Path, follow: bool = False) -> int:
        flags = os.O_RDONLY | _DIRECTORY | (0 if follow else _NOFOLLOW)
        try:
            return os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise LinkInTheWay(path, _what_is(path)) from None
            raise

    def folder(self, parts: tuple[str, ...]) -> int | None:
        """The handle of the folder `parts` below the root (None without dir_fd)."""
        if parts in self._fds:
            self._fds.move_to_end(parts)
            return self._fds[parts]
        parent = self.folder(parts[:-1])
        path = self.root.joinpath(*parts)
        if _DIRFD:
            self._fds[parts] = self._open(parent, parts[-1], path)
            self._close_least_used()
        else:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or _is_reparse(info):
                raise LinkInTheWay(path, _what_is(path))
            self._fds[parts] = None
        return self._fds[parts]

    def _close_least_used(self) -> None:
        """Keep at most _MAX_OPEN handles: close the least recently used ones (never the
        root's, the first entry, whose device and inode `info` describes)."""
        while len(self._fds) > _MAX_OPEN:
            oldest = next(parts for parts in self._fds if parts)
            self._close(oldest)

    def open_handles(self) -> int:
        """How many folder handles the tree holds now."""
        return sum(fd is not None for fd in self._fds.values())

    def at(self, rel: PurePosixPath) -> tuple[int | None, str]:
        """(handle of `rel`'s folder, the name to use with it)."""
        fd = self.folder(tuple(rel.parts[:-1]))
        return fd, rel.name if _DIRFD else str(self.root.joinpath(*rel.parts))

    def lstat(self, rel: PurePosixPath) -> os.stat_result | None:
        fd, name = self.at(rel)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(
        self, rel: PurePosixPath, limit: int, tail: bool = False, *, one_name: bool = False
    ) -> bytes | None:
        """A regular file's bytes (at most `limit` + 1; with `tail` its last `limit`), None
        when there is none; a link (LinkInTheWay) or a FIFO is not opened (O_NOFOLLOW,
        O_NONBLOCK): LinkInTheWay for both. `one_name`: a file with other names (hard links)
        is refused too: in a folder another user can write to, a hard link may name a file of
        someone else's that the link's maker could not read."""
        fd, name = self.at(rel)
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
        try:
            handle = os.open(name, flags, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LinkInTheWay(self.root.joinpath(*rel.parts), "is a symbolic link") from None
            raise
        with os.fdopen(handle, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise LinkInTheWay(self.root.joinpath(*rel.parts), "is not a regular file")
            if one_name and info.st_nlink > 1:
                raise LinkInTheWay(
                    self.root.joinpath(*rel.parts), f"has {info.st_nlink} names (hard links)"
                )
            if tail and info.st_size > limit:
                fh.seek(info.st_size - limit)
                return fh.read(limit)
            return fh.read(limit + 1)

    def write_new(self, rel: PurePosixPath, data: bytes, mode: int) -> None:
        """Create `rel` (never an existing file, never through a link) holding `data`, synced."""
        fd, name = self.at(rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0)
        handle = os.open(name, flags, 0o600, dir_fd=fd)
        with os.fdopen(handle, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), mode)
        if not hasattr(os, "fchmod"):
            Path(name).chmod(mode)

    def rename(self, src: PurePosixPath, dst: PurePosixPath) -> None:
        """Rename `src` over `dst` (a link at `dst` is replaced, never followed)."""
        src_fd, src_name = self.at(src)
        dst_fd, dst_name = self.at(dst)
        os.replace(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def unlink(self, rel: PurePosixPath) -> None:
        fd, name = self.at(rel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)

    def mkdir(self, rel: PurePosixPath) -> None:
        fd, name = self.at(rel)
        os.mkdir(name, 0o777, dir_fd=fd)

    def rmdir_if_empty(self, rel: PurePosixPath) -> None:
        self._close(tuple(rel.parts))
        with contextlib.suppress(OSError):
            fd, name = self.at(rel)
            os.rmdir(name, dir_fd=fd)

    def _close(self, parts: tuple[str, ...]) -> None:
        fd = self._fds.pop(parts, None)
        if fd is not None:
            os.close(fd)

    def names(self, parts: tuple[str, ...] = ()) -> list[str]:
        """The names in the folder `parts` below the root (sorted)."""
        fd = self.folder(parts)
        where = fd if fd is not None else self.root.joinpath(*parts)
        with os.scandir(where) as entries:
            return sorted(entry.name for entry in entries)

    def sync(self, parts: tuple[str, ...] = ()) -> None:
        """Make renames in folder `parts` durable (where folders can be opened)."""
        with contextlib.suppress(OSError, LinkInTheWay):
            fd = self.folder(parts)  # opened again when its handle was closed since
            if fd is not None:
                os.fsync(fd)


def _is_reparse(info: os.stat_result) -> bool:
    """A Windows junction or symlink (st_file_attributes exists only there)."""
    return bool(getattr(info, "st_file_attributes", 0) & 0x400) or stat.S_ISLNK(info.st_mode)


def _what_is(path: Path) -> str:
    try:
        info = os.lstat(path)
    except OSError:
        return "cannot be opened as a folder"
    if stat.S_ISLNK(info.st_mode) or _is_reparse(info):
        return "is a symbolic link"
    return "is not a folder"

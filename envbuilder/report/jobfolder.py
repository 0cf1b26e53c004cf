"""A job folder of a cluster validation, read safely: it is shared (other users, the nodes write
it), so only small files and the ends of logs are read, never through a link, and a folder
others may write is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from envbuilder.core.errors import CompareError
from envbuilder.core.fsutil import read_regular_bytes
from envbuilder.core.nofollow import LinkInTheWay, Tree
from envbuilder.report.reading import MAX_REPORT_BYTES, printable, report_from_bytes
from envbuilder.report.records import Report

TAIL_LINES = 4
#: The small files of a job folder (hosts, phase, NODE.exit) are bytes to kilobytes: `hosts` is
#: one "NODE ADDRESS" line per node. Only this much is read, so a stray big file costs nothing.
MAX_SMALL_FILE_BYTES = 1024 * 1024
#: Of a node's log only the end is read (the last TAIL_LINES lines, each cut to TAIL_LINE_CHARS):
#: a log can be gigabytes (NCCL_DEBUG=INFO on many ranks), and only its end says why.
TAIL_BYTES = 64 * 1024
TAIL_LINE_CHARS = 300


#: A node's files are NODE.json, NODE.exit and NODE.log, and a file name has at most 255 bytes:
#: a longer name (a damaged `hosts`) is a row saying so, not an OSError ("File name too long").
MAX_NODE_NAME_BYTES = 250


def file_name_ok(node: str) -> bool:
    """Whether a node name from `hosts` can be a file name under nodes/ and collectives/: not a
    path ("../x", "/etc/passwd"), so nothing outside the job folder is read for it, short
    enough for its files' names, and no control characters (it is shown in every report)."""
    return (
        node not in ("", ".", "..")
        and not any(c in node for c in "/\\\0\n\t")
        and len(node.encode("utf-8", "surrogateescape")) <= MAX_NODE_NAME_BYTES
        and printable(node) == node
    )


def _read_bytes(path: Path, limit: int, tail: bool = False) -> bytes | None:
    """fsutil.read_regular_bytes, or None when the file is missing, unreadable, a symlink or
    not a regular file (a job folder is a shared, writable place: a FIFO there must not
    block, a link there may point at someone's private file)."""
    try:
        return read_regular_bytes(path, limit, tail, nofollow=True)
    except OSError:
        return None


def shared_folder_refusal(info: os.stat_result) -> str | None:
    """Why a folder (as lstat/fstat describes it) is not this user's own to read results from:
    owned by another user, or writable by group or others (unless sticky: then others cannot
    replace what this user wrote, though they can add files, so it is refused as well when it
    is another user's). None where ownership means nothing (Windows)."""
    if not hasattr(os, "geteuid"):
        return None
    if info.st_uid != os.geteuid():
        return f"belongs to {_user_name(info.st_uid)}, not to you ({_user_name(os.geteuid())})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        return (
            f"can be written by other users (mode {stat.filemode(info.st_mode)}; "
            "chmod go-w, or make it sticky)"
        )
    return None


def _user_name(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def read_text_small(path: Path, limit: int = MAX_SMALL_FILE_BYTES) -> str | None:
    """A small file of a job folder (hosts, phase, NODE.exit) as text, at most `limit` bytes;
    None when it is missing, unreadable, a symlink or not a regular file (a FIFO would block)."""
    data = _read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", errors="replace")


def tail_lines(path: Path, lines: int = TAIL_LINES) -> str:
    """The last non-blank lines of a log, joined by ' | ': only its end is read, each line cut
    short, control characters shown as '?'; '' when it is missing, a symlink or not a regular
    file."""
    return _tail_text(_read_bytes(path, TAIL_BYTES, tail=True) or b"", lines)


def _tail_text(data: bytes, lines: int) -> str:
    text = printable(data.decode("utf-8", errors="replace"))
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(
        line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + "..."
        for line in kept[-lines:]
    )


class JobFolder:
    """A job folder, read without following a link (envbuilder.core.nofollow): the folder named on
    the command line (a link to it is the user's own choice), and below it only real folders
    and regular files. `hosts`, `nodes/` or `collectives/` that is a symlink is refused
    (CompareError): another user of a shared run folder could point one at a private file,
    whose lines would become node names in reports written beside it. A node file that is a
    link, a FIFO or a device is treated as missing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.tree = Tree(path, follow_root=True)
        except (LinkInTheWay, OSError):
            what = "is not a folder" if path.exists() else "no such job folder"
            raise CompareError(
                f"{path}: {what} (validate.sbatch writes RUN_DIR/job-<id>/)"
            ) from None
        for name in ("hosts", "nodes", "collectives"):
            info = self.tree.lstat(PurePosixPath(name))
            if info is not None and stat.S_ISLNK(info.st_mode):
                self.close()
                raise CompareError(
                    f"{path / name} is a symbolic link; a job folder's hosts, nodes/ and "
                    "collectives/ are what the job wrote there, never links (one could point "
                    "at anyone's file). Nothing was read: remove it, or run the job again"
                )
        self._refuse_foreign()

    def _refuse_foreign(self) -> None:
        """CompareError when the job folder, nodes/ or collectives/ is not this user's own, or
        another user could write into it (shared_folder_refusal)."""
        for name in ("", "nodes", "collectives"):
            info = self.tree.info if not name else self.tree.lstat(PurePosixPath(name))
            why = None if info is None else shared_folder_refusal(info)
            if why is not None:
                self.close()
                raise CompareError(
                    f"{self.path / name if name else self.path} {why}: another user could have "
                    "written the node results it holds, and a fleet report would show them as "
                    "this job's. Nothing was read: run the job again into a folder of your own "
                    "(validate --slurm --run-dir DIR)"
                )

    def close(self) -> None:
        self.tree.__exit__()

    def has(self, *parts: str) -> bool:
        try:
            return self.tree.lstat(PurePosixPath(*parts)) is not None
        except (LinkInTheWay, OSError):
            return False

    def read(
        self, *parts: str, limit: int = MAX_SMALL_FILE_BYTES, tail: bool = False
    ) -> bytes | None:
        """A regular file's bytes (None: missing, a link, a FIFO, unreadable)."""
        try:
            data = self.tree.read(PurePosixPath(*parts), limit, tail, one_name=True)
        except (LinkInTheWay, OSError):
            return None
        return None if data is None else data[:limit]

    def text(self, *parts: str) -> str | None:
        data = self.read(*parts)
        return None if data is None else data.decode("utf-8", errors="replace")

    def tail(self, *parts: str, lines: int = TAIL_LINES) -> str:
        return _tail_text(self.read(*parts, limit=TAIL_BYTES, tail=True) or b"", lines)

    def names(self, folder: str) -> list[str]:
        try:
            return self.tree.names((folder,))
        except (LinkInTheWay, OSError):
            return []

    def report(self, *parts: str) -> Report:
        """The probe report at `parts` (CompareError when it is missing, a link, not a regular
        file, or not a report)."""
        path = self.path.joinpath(*parts)
        try:
            data = self.tree.read(PurePosixPath(*parts), MAX_REPORT_BYTES, one_name=True)
        except LinkInTheWay as exc:
            raise CompareError(
                f"{path}: {exc.what}; not read (a report is a regular file)"
            ) from None
        except OSError as exc:
            raise CompareError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if data is None:
            raise CompareError(f"{path}: no such report")
        return report_from_bytes(data, path)

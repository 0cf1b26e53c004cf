"""Work folders that a killed run cannot leak, and locks that outlive a killed run's children.

    owned_dir(prefix, parent) -> OwnedDir   a temp folder with an owner file (pid, start time,
                                            an flock); earlier leftovers of `prefix` swept first
    sweep(parent, prefix) -> [Path]          remove leftovers provably this user's and dead
    hold(path) -> Holding                    an flock on `path` (LOCK_NB), its fd to hand on
    Busy                                     a lock another live process holds

SIGKILL runs no handler: a killed `build` leaves its `venv-wheelhouse-*` (hundreds of MB) in the
cache, a killed `lock` its `envbuilder-lock-*` in the temp folder, and the uv they started goes on
running in its own session. So each such folder holds an owner file, `.envbuilder-owner.json`:
the pid and start time of the process that made it, and an flock on the file that the process
holds, and hands to the tools it starts (`pass_fds`: a uv left running keeps holding it).
The next command that makes a folder of that kind removes an earlier one only when it can prove
it is its own and dead: a real folder (not a link) of this user, named with the prefix, directly
in the folder such folders are made in, holding a regular owner file of this user whose lock no
process holds, and whose process is gone (or the pid now names a process started at another
time). Anything else is left alone. `hold` is the same lock on a file of its own (a venv's: a
build never syncs a venv that a live uv of an earlier, killed build still writes).
The lock is fsutil.lock_file: on Windows (msvcrt) it ends with the process that took it, children
do not keep it, so there a folder is kept while its maker lives and the pid decides after.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.fsutil import lock_file, temp_dir, write_error
from envbuilder.core.interrupts import deferred
from envbuilder.core.statefile import StateFileError, not_ours, parse_json, pid_field

OWNER = ".envbuilder-owner.json"
_MAX_OWNER_BYTES = 4096


class Busy(EnvbuilderError):
    """A lock that another live process holds (a build, or a tool an earlier build started)."""


def process_start(pid: int) -> str | None:
    """When process `pid` started (Linux: /proc/PID/stat's starttime, in clock ticks since
    boot), or None when there is no such process or it cannot be told."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, start: object) -> bool:
    """Whether the process that wrote an owner file (pid, start time: checked by the caller)
    still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process of another user holds the pid: not ours to judge
    now = process_start(pid)
    return now is None or now == start  # no /proc: trust the pid


def _owner_bytes() -> bytes:
    pid = os.getpid()
    return json.dumps({"pid": pid, "start": process_start(pid)}).encode("ascii") + b"\n"


@dataclass(frozen=True)
class OwnedDir:
    """A work folder and the fd of its owner file's lock (hand it to children: pass_fds)."""

    path: Path
    fd: int


@contextlib.contextmanager
def owned_dir(prefix: str, parent: Path | None = None) -> Iterator[OwnedDir]:
    """fsutil.temp_dir (removed with its content when the block ends in any way), holding an
    owner file locked by this process; leftovers of earlier runs with this prefix in `parent`
    (default: the system's temp folder) are swept first."""
    sweep(Path(parent or tempfile.gettempdir()), prefix)
    with temp_dir(prefix, parent) as path:
        fd = -1
        try:
            try:
                with deferred():
                    fd = os.open(
                        path / OWNER,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                        0o600,
                    )
                os.write(fd, _owner_bytes())
                lock_file(fd, blocking=True)
            except OSError as exc:
                raise write_error(path / OWNER, exc) from None
            yield OwnedDir(path, fd)
        finally:
            if fd >= 0:
                os.close(fd)


def sweep(parent: Path, prefix: str, warn: Callable[[str], None] | None = None) -> list[Path]:
    """Remove the folders `parent/prefix*` that an earlier, dead run of this user left (see the
    module); returns those removed. Never raises for what it finds: what it cannot prove is
    left alone; an owner file that is not one envbuilder wrote is told to `warn`."""
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return removed
    for entry in entries:
        folder = Path(entry.path)
        try:
            dead = _provably_dead(folder)
        except StateFileError as exc:
            if warn is not None:
                warn(str(exc))
            continue
        if dead:
            with deferred():
                shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    return removed


def _provably_dead(folder: Path) -> bool:
    """Whether `folder` is this user's work folder of a run that is gone. StateFileError when
    its owner file is this user's but not one envbuilder wrote (a pid out of range, deep JSON)."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or not _mine(info):
        return False
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:  # O_NONBLOCK: a FIFO planted as the owner file is opened (and refused), not waited on
        fd = os.open(folder / OWNER, flags)
    except OSError:
        return False  # no owner file (one being made, or someone else's), or a link
    try:
        owner = os.fstat(fd)
        if not stat.S_ISREG(owner.st_mode) or not _mine(owner):
            return False
        data = parse_json(os.read(fd, _MAX_OWNER_BYTES + 1), folder / OWNER, _fix(folder))
        if not isinstance(data, dict):
            raise not_ours(folder / OWNER, "it is not a JSON object", _fix(folder))
        pid = pid_field(data, "pid", folder / OWNER, _fix(folder))
        if not lock_file(fd, blocking=False):
            return False  # a live process (or a tool it started) holds it
        return not _alive(pid, data.get("start"))
    except OSError:
        return False
    finally:
        os.close(fd)


def _fix(folder: Path) -> str:
    return (
        f"it was kept; remove {folder} yourself once no envbuilder or uv of yours runs "
        "(it is a work folder of a killed run)"
    )


def _mine(info: os.stat_result) -> bool:
    return not hasattr(os, "geteuid") or info.st_uid == os.geteuid()


@dataclass(frozen=True)
class Holding:
    """An flock held on a lock file, and its fd (to hand to children: pass_fds)."""

    path: Path
    fd: int


@contextlib.contextmanager
def hold(path: Path, busy: str) -> Iterator[Holding]:
    """An exclusive flock on `path` (created, never through a link), held while the block runs
    and by every child given `fd`. Busy(`busy`) at once when another live process holds it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        if not lock_file(fd, blocking=False):
            raise Busy(busy)
        os.ftruncate(fd, 0)
        os.write(fd, _owner_bytes())
        yield Holding(path, fd)
    finally:
        os.close(fd)

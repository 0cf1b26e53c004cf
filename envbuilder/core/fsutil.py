"""Filesystem helpers: a failed or interrupted command never leaves a half-written file.

    atomic_write_bytes / atomic_write_text / write_if_changed   one file: temp file + rename
    write_together(files)            several files anywhere: all written, or none on an error
                                     (several files below one root as one step, with a
                                     journal: envbuilder.core.journal)
    temp_dir(prefix, dir)            a temp folder an interrupt cannot leak
    read_regular_bytes(path, limit)  a regular file's bytes (or its end), bounded; FIFOs refused
    read_input_bytes(path)           a user's input file: regular files only, bounded
    same_file(a, b)                  whether two paths name one file (links followed)
    lock_file(fd, blocking)          an exclusive lock on an open file (POSIX flock, Windows
                                     msvcrt.locking); exclusive(folder): writers take turns
    WriteError                       what a failing disk looks like to the user: the path and why

Every write error (read-only file system, full disk, a file where a folder should be, a folder
where a file should be) becomes a `WriteError` naming the path and the cause, and whatever was
written before the failure is removed again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.interrupts import deferred

#: What a user can do about an error, by errno.
_HINTS = {
    errno.ENOSPC: "free some space and run it again",
    errno.EDQUOT: "free some space (disk quota) and run it again",
    errno.EROFS: "the file system is mounted read-only; make it writable or work in a copy",
    errno.EACCES: "check its permissions",
    errno.EPERM: "check its permissions and attributes (lsattr: immutable?)",
}


class WriteError(EnvbuilderError):
    """A file or folder could not be written (or removed); nothing was left half-written."""

    def __init__(self, path: Path, cause: str, verb: str = "write") -> None:
        super().__init__(f"cannot {verb} {path}: {cause}")
        self.path = path
        self.cause = cause


def write_error(path: Path, exc: OSError, verb: str = "write") -> WriteError:
    """`exc` (raised while writing `path`) as a WriteError saying what is in the way or why."""
    blocker = file_in_the_way(path)
    if blocker is not None:
        return WriteError(
            path, f"{blocker} is a file, not a folder; move it away or choose another path", verb
        )
    if exc.errno == errno.EISDIR or (_is_dir(path) and not _is_link(path)):
        return WriteError(
            path, "it is a folder, not a file; move it away or choose another path", verb
        )
    return WriteError(path, _cause(exc), verb)


def _cause(exc: OSError) -> str:
    """What went wrong, in lower case, and what a user can do about it where that is known."""
    cause = os.strerror(exc.errno) if exc.errno else str(exc)
    cause = cause[:1].lower() + cause[1:]
    hint = _HINTS.get(exc.errno or 0)
    return f"{cause} ({hint})" if hint else cause


def os_failure(exc: OSError) -> EnvbuilderError:
    """An OSError that no step turned into a message (a disk that filled up, an I/O error) as
    one: the file when the error names one, the cause, what to do. Writes are atomic, so what
    was being written is whole or absent."""
    if exc.filename:
        return write_error(Path(os.fsdecode(exc.filename)), exc, verb="write or read")
    return EnvbuilderError(f"a file operation failed: {_cause(exc)}")


def file_in_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` when it is not a folder (so nothing can be made
    below it), else None."""
    for parent in path.parents:
        try:
            info = parent.stat()
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(parent):  # a dangling link: nothing can be made below it
                return parent
            continue
        except OSError:  # too long, a loop, no permission: the caller's errno says it
            return None
        return None if stat.S_ISDIR(info.st_mode) else parent
    return None


def make_parents(path: Path) -> list[Path]:
    """Create the missing folders above `path`; return those created, outermost first.
    WriteError (naming `path`) when a file is in the way or the disk refuses."""
    too_long = path_too_long(path)
    if too_long is not None:
        raise WriteError(path, too_long)
    missing = []
    for parent in path.parents:
        if _is_dir(parent):
            break
        missing.append(parent)
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
    except OSError as exc:
        remove_empty(created)
        raise write_error(path, exc) from None
    return created


#: Linux's PATH_MAX and NAME_MAX (in bytes); what other systems allow is no more.
PATH_MAX = 4096
NAME_MAX = 255


def path_too_long(path: Path) -> str | None:
    """Why `path` is longer than the system allows (checked before anything is made: a
    folder made part-way below such a path cannot be removed by its name), or None."""
    raw = os.fsencode(path)
    if len(raw) >= PATH_MAX:
        return f"the path is {len(raw)} bytes, over the system's limit of {PATH_MAX - 1}"
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        name = os.fsdecode(longest[:40])
        return f"a name in it ({name}...) is {len(longest)} bytes, over the limit of {NAME_MAX}"
    return None


def _is_dir(path: Path) -> bool:
    """Path.is_dir, False for any error (a name too long raises there): mkdir then says why."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except OSError:
        return False


def _is_link(path: Path) -> bool:
    """Path.is_symlink, False for any error."""
    try:
        return path.is_symlink()
    except OSError:
        return False


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove the folders (listed outermost first) that are still empty, innermost first."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def default_mode() -> int:
    """0666 less the umask: what a plain `open(path, "w")` would give (a temp file is 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` through a temp file in the same folder and an atomic rename.
    Raises WriteError (the path and the cause) with nothing left behind: no temp file, no
    folder it created. `mode` None: the temp file's 0600."""
    created = make_parents(path)
    tmp: Path | None = None
    fh: BinaryIO | None = None
    try:
        with deferred():  # the temp file's name is kept before an interrupt can unwind
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            tmp = Path(name)
            fh = os.fdopen(fd, "wb")
        with fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)
    except BaseException as exc:
        with deferred():
            if fh is not None:
                fh.close()
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
            remove_empty(created)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write `text` as UTF-8 (no newline translation) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def same_bytes(path: Path, data: bytes) -> bool:
    """Whether `path` is a file holding exactly `data`."""
    try:
        return path.is_file() and path.read_bytes() == data
    except OSError:
        return False


def write_if_changed(path: Path, data: bytes, mode: int | None = None) -> bool:
    """Write only when the content differs, so unchanged files keep their mtime. True if written."""
    if same_bytes(path, data):
        return False
    atomic_write_bytes(path, data, mode)
    return True


#: A spec, a lock or a pylock is kilobytes to a few MiB; a bigger file is not one, and reading it
#: whole would only cost memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def read_regular_bytes(path: Path, limit: int, tail: bool = False, nofollow: bool = False) -> bytes:
    """At most `limit` bytes of a regular file (its last `limit` bytes when `tail`). Raises
    FileNotFoundError, IsADirectoryError, or OSError whose strerror says what the path is
    instead (a FIFO, a device): reading a FIFO would wait for a writer forever, a device like
    /dev/zero never ends. O_NONBLOCK lets the open of a FIFO return, so that fstat can refuse
    it; regular files ignore the flag. `nofollow`: a symlink is refused too (OSError ELOOP),
    for files in folders others can write."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            kind = _kind_of(info.st_mode)
            raise OSError(errno.EINVAL, f"it is {kind}, not a regular file", str(path))
        if tail and info.st_size > limit:
            os.lseek(fd, info.st_size - limit, os.SEEK_SET)
        with open(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    finally:
        os.close(fd)


def read_input_bytes(path: Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file (a spec, a lock, a pylock): read_regular_bytes, and an
    OSError saying so when it is over `limit` bytes."""
    data = read_regular_bytes(path, limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"it is over {limit >> 20} MiB, too big to be one", str(path))
    return data


def same_file(a: Path, b: Path) -> bool:
    """The same file by path (symlinks followed) or, when both exist, by inode (hard links):
    an output that is one of the inputs would replace it."""
    try:
        return a.resolve() == b.resolve() or a.samefile(b)
    except (OSError, RuntimeError):  # one does not exist (yet), or a symlink loop
        return False


@contextlib.contextmanager
def temp_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh temp folder (in `parent`, default the system's temp folder), removed with its
    content when the block ends in any way. Its creation and removal are not cut short by an
    interrupt, so none is left behind. WriteError when it cannot be created."""
    path: Path | None = None
    try:
        with deferred():
            try:
                path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            except OSError as exc:
                raise write_error(
                    Path(parent or tempfile.gettempdir()) / f"{prefix}*",
                    exc,
                    "create a temp folder",
                ) from None
        yield path
    finally:
        if path is not None:
            with deferred():
                shutil.rmtree(path, ignore_errors=True)


# --- several files as one step ------------------------------------------------------------------


def write_together(files: Mapping[Path, bytes], mode: int | None = None) -> None:
    """Write several files, anywhere, so that an error writes none of them: each goes to a temp
    file beside its target first, and only when all of them are written are they renamed into
    place (held against interrupts). Unlike journal.commit_files there is no journal: a crash during
    the renames can leave some old and some new. WriteError names the path and the cause."""
    token = secrets.token_hex(6)
    entries = [_Temp(path) for path in sorted(files)]
    created: list[Path] = []
    try:
        for entry in entries:
            if entry.path.is_dir() and not entry.path.is_symlink():
                raise WriteError(
                    entry.path, "it is a folder, not a file; move it away or choose another path"
                )
            created += make_parents(entry.path)
            write_temp(
                entry.path,
                entry.temp(token),
                files[entry.path],
                default_mode() if mode is None else mode,
            )
        with deferred():
            for entry in entries:
                try:
                    entry.temp(token).replace(entry.path)
                except OSError as exc:
                    raise write_error(entry.path, exc) from None
    except BaseException:
        with deferred():
            for entry in entries:
                with contextlib.suppress(OSError):
                    entry.temp(token).unlink(missing_ok=True)
            remove_empty(created)
        raise


@dataclass(frozen=True)
class _Temp:
    path: Path  # the file to replace

    def temp(self, token: str) -> Path:
        return self.path.with_name(f".{self.path.name}.{token}.tmp")


def write_temp(target: Path, tmp: Path, data: bytes, mode: int) -> None:
    """Write `data` into the new file `tmp` (never an existing one), synced, then give it
    `mode`; WriteError naming `target` when the disk refuses."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.chmod(mode)
    except OSError as exc:
        raise write_error(target, exc) from None


#: Windows has no flock (nor folders to open): lock_file and exclusive lock with msvcrt there.
_ON_WINDOWS = os.name == "nt"
#: The byte a Windows lock covers: far past any data, because msvcrt's locks are mandatory (a
#: locked byte cannot be read by other processes) and owner files are read by other commands.
_WINDOWS_LOCK_OFFSET = 0x7FFFFFFF
#: Windows: the errnos of msvcrt.locking when another process holds the byte.
_WINDOWS_BUSY = (errno.EACCES, errno.EDEADLK)


def lock_file(fd: int, blocking: bool) -> bool:
    """Take an exclusive lock on the open file `fd`, held until `fd` is closed; False when
    another process holds one and `blocking` is False.

    POSIX: flock, which the children that inherit `fd` (pass_fds) go on holding after this
    process is gone. Windows: msvcrt.locking on one byte, which ends with this process."""
    if _ON_WINDOWS:
        return _lock_windows(fd, blocking)
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _lock_windows(fd: int, blocking: bool) -> bool:
    # imported by name: mypy checks this module as Linux, where msvcrt's stubs are empty
    msvcrt: Any = importlib.import_module("msvcrt")
    where = os.lseek(fd, 0, os.SEEK_CUR)  # msvcrt locks from the file position: keep it
    os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    try:
        while True:
            try:
                # LK_LOCK gives up after 10 tries a second apart: a blocking lock tries again
                msvcrt.locking(fd, msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK, 1)
                return True
            except OSError as exc:
                if exc.errno not in _WINDOWS_BUSY:
                    raise
                if not blocking:
                    return False
    finally:
        os.lseek(fd, where, os.SEEK_SET)


def _folder_lock_path(folder: Path) -> Path:
    """Windows: the file whose lock stands for `folder`'s (a folder cannot be opened there), in
    the user's temp folder so that no project folder gains a file."""
    key = sha256_bytes(os.path.normcase(str(folder.resolve())).encode("utf-8"))[:32]
    return Path(tempfile.gettempdir()) / "envbuilder-locks" / f"{key}.lock"


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Writers into one folder take turns: lock_file on the folder (POSIX), or on a file
    standing for it (Windows: _folder_lock_path). A lock another process holds is waited for,
    said once (lock_waits_told_to), for at most lock_timeout() seconds (LockBusyError)."""
    if _ON_WINDOWS:
        path = _folder_lock_path(folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    else:
        path = folder
        fd = os.open(folder, os.O_RDONLY)  # a directory handle, held for flock
    try:
        _wait_for_lock(fd, path)
        yield
    finally:
        os.close(fd)


#: Seconds a writer waits for another process's lock before it gives up; the variable
#: ENVBUILDER_LOCK_TIMEOUT changes it. Any lock envbuilder takes is held for one command's
#: write (seconds), so a wait this long means a stuck or foreign holder (a read-only handle
#: suffices for flock, so another user can hold it), and silence forever helps no one.
LOCK_TIMEOUT_S = 120.0
LOCK_TIMEOUT_VARIABLE = "ENVBUILDER_LOCK_TIMEOUT"
_LOCK_POLL_S = 0.1
#: Where a wait is said: the CLI points it at its UI's warnings (printing stays at the edge).
_lock_wait_notice: list[Callable[[str], None]] = []


class LockBusyError(EnvbuilderError):
    """Another process held a lock longer than lock_timeout(); nothing was written."""


@contextlib.contextmanager
def lock_waits_told_to(notice: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, a wait for another process's lock is said to `notice`, once."""
    _lock_wait_notice.append(notice)
    try:
        yield
    finally:
        _lock_wait_notice.remove(notice)


def lock_timeout() -> float:
    """LOCK_TIMEOUT_S, or ENVBUILDER_LOCK_TIMEOUT's seconds (EnvbuilderError when it is not a
    positive number)."""
    text = os.environ.get(LOCK_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise EnvbuilderError(
            f"{LOCK_TIMEOUT_VARIABLE}={text!r}: give the seconds to wait for another process's "
            f"lock, a positive number (default {LOCK_TIMEOUT_S:g})"
        )
    return value


def _wait_for_lock(fd: int, path: Path) -> None:
    if lock_file(fd, blocking=False):
        return
    limit = lock_timeout()
    holder = lock_holder(fd)
    for notice in _lock_wait_notice[-1:]:
        notice(
            f"waiting for the lock on {path}, held by {holder or 'another process'} (writers "
            f"of one folder take turns); giving up after {limit:g} s ({LOCK_TIMEOUT_VARIABLE})"
        )
    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(_LOCK_POLL_S, left))
        if lock_file(fd, blocking=False):
            return
    holder = lock_holder(fd) or holder
    raise LockBusyError(
        f"gave up after {limit:g} s waiting for the lock on {path}: "
        f"{holder or 'another process'} holds it (a read-only handle is enough for a lock). "
        "Nothing was written; let it finish or end it, then run the command again "
        f"(`fuser -v {path}` lists the processes; {LOCK_TIMEOUT_VARIABLE} sets the wait)"
    )


def lock_holder(fd: int) -> str | None:
    """Who holds a flock on the file open as `fd`, from /proc/locks (Linux): "pid N (command,
    user U)"; None where it cannot be told."""
    try:
        info = os.fstat(fd)
        with Path("/proc/locks").open(encoding="ascii", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return None
    want = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF"; a waiter's line has "->" there
        words = line.split()
        flock = len(words) >= 6 and words[1] == "FLOCK" and words[4].isdigit()
        if flock and _lock_key(words[5]) == want:
            return _describe_process(int(words[4]))
    return None


def _lock_key(text: str) -> tuple[int, int, int] | None:
    """/proc/locks' MAJOR:MINOR:INODE (device numbers in hex)."""
    parts = text.split(":")
    try:
        return (int(parts[0], 16), int(parts[1], 16), int(parts[2]))
    except (IndexError, ValueError):
        return None


def _describe_process(pid: int) -> str:
    """pid N (its command line, its user), as far as /proc tells."""
    proc = Path(f"/proc/{pid}")
    try:
        words = proc.joinpath("cmdline").read_bytes()[:200].split(b"\0")
        uid = proc.stat().st_uid
    except OSError:
        return f"pid {pid} (gone: a process it started may hold the lock)"
    command = " ".join(w.decode("utf-8", "replace") for w in words if w)
    try:
        import pwd

        user = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        user = str(uid)
    return f"pid {pid} ({printable(command) or '?'}, user {user})"


def printable(text: str) -> str:
    """`text` with control characters as '?' (a process's command line may hold any)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def fsync_folder(folder: Path) -> None:
    """Make renames in `folder` durable (where folders can be opened: not on Windows)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

"""Reading back a file envbuilder wrote itself: never through a link, never a FIFO, bounded.

    read_state(path, limit, fmt, fix, follow=False) -> Any | None   the parsed file (None: none)
    read_state_bytes(path, limit, fix, ...) -> bytes | None          the same, unparsed
    parse_json(data, where, fix) / parse_toml(...)                   bounded nesting depth
    pid_field(doc, key, where, fix) -> int                           a pid, in range
    not_ours(path, why, fix) -> StateFileError                       the one message
    UserFile(fix)                                                    a config's `fix`
    StateFileError                                                   what the user is told

Receipts, owner files, journals, markers and the mirrors file sit in folders a checkout, a
crash or another process may have put anything into: a FIFO (an open would wait for a writer
forever), a link to a device, gigabytes, JSON nested 100,000 deep (json and tomllib recurse:
RecursionError), a pid of 2**70 (os.kill: OverflowError). Every such file is read here: opened
with O_NOFOLLOW | O_NONBLOCK and refused unless fstat says regular file, at most `limit` bytes,
its nesting depth counted before a parser sees it, and any value the caller takes checked for
type and range. What fails is "not a file envbuilder wrote", naming the file and what to do.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envbuilder.core.errors import EnvbuilderError

#: No file envbuilder writes nests deeper than a few levels; the parsers recurse per level.
MAX_DEPTH = 32
#: Linux's PID_MAX_LIMIT (2**22); other systems stay below it. A bigger pid was never written
#: by envbuilder, and os.kill would raise OverflowError on one past a C int.
MAX_PID = 1 << 22
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_JSON_MARKS = re.compile(r'[\[\]{}"]')
_TOML_MARKS = re.compile(r"[\[\]{}\"'#]")


class StateFileError(EnvbuilderError):
    """A file envbuilder reads back from its own state that it did not write as it is there."""


@dataclass(frozen=True)
class UserFile:
    """The `fix` of a file the user writes (a config such as mirrors.toml): its refusal does
    not call it envbuilder's."""

    fix: str


def not_ours(path: Path, why: str, fix: str | UserFile) -> StateFileError:
    """The message for every refusal: the file, what is wrong, what to do."""
    if isinstance(fix, UserFile):
        return StateFileError(f"{path}: {why}; {fix.fix}")
    return StateFileError(f"{path}: not a file envbuilder wrote ({why}); {fix}")


def read_state_bytes(
    path: Path, limit: int, fix: str | UserFile, follow: bool = False, dir_fd: int | None = None
) -> bytes | None:
    """The bytes of the regular file `path` (at most `limit`), None when there is none.
    StateFileError for a link (unless `follow`), a FIFO, a device, a folder, more than
    `limit` bytes or a read error. With `dir_fd`, `path`'s name is opened in that folder."""
    flags = os.O_RDONLY | _NONBLOCK | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path.name if dir_fd is not None else path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise not_ours(path, _cause(exc), fix) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_ours(path, f"it is {_kind(info.st_mode)}, not a regular file", fix)
        if info.st_size > limit:
            raise not_ours(path, f"it is {info.st_size} bytes, over {limit}", fix)
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise not_ours(path, _cause(exc), fix) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew after fstat
        raise not_ours(path, f"it is over {limit} bytes", fix)
    return data


def read_state(
    path: Path, limit: int, fmt: Literal["json", "toml"], fix: str | UserFile, follow: bool = False
) -> Any | None:
    """read_state_bytes, parsed (parse_json or parse_toml); None when there is no file."""
    data = read_state_bytes(path, limit, fix, follow)
    if data is None:
        return None
    return parse_json(data, path, fix) if fmt == "json" else parse_toml(data, path, fix)


def parse_json(data: bytes, where: Path, fix: str | UserFile) -> Any:
    """JSON of at most MAX_DEPTH levels; StateFileError (naming `where`) for anything else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_ours(where, f"it is not UTF-8 text: {exc.reason}", fix) from None
    _check_depth(text, where, fix, _JSON_MARKS)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise not_ours(where, f"it is not JSON: {exc}", fix) from None


def parse_toml(data: bytes, where: Path, fix: str | UserFile) -> dict[str, Any]:
    """TOML of at most MAX_DEPTH levels of arrays and inline tables; StateFileError else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_ours(where, f"it is not UTF-8 text: {exc.reason}", fix) from None
    _check_depth(text, where, fix, _TOML_MARKS)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise not_ours(where, f"it is not TOML: {exc}", fix) from None


def _check_depth(text: str, where: Path, fix: str | UserFile, marks: re.Pattern[str]) -> None:
    """Count brackets and braces outside strings (and TOML comments) before a recursive
    parser sees them; most files have fewer in all than the bound and are not scanned."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth, pos = 0, 0
    while (found := marks.search(text, pos)) is not None:
        char, pos = found.group(), found.end()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise not_ours(where, f"it nests deeper than {MAX_DEPTH} levels", fix)
        elif char in "]}":
            depth -= 1
        elif char == "#":
            newline = text.find("\n", pos)
            pos = len(text) if newline < 0 else newline
        else:
            pos = _string_end(text, found.start(), marks is _TOML_MARKS)


def _string_end(text: str, start: int, toml: bool) -> int:
    """Where the string that opens at `start` ends (TOML: '...', and triple-quoted forms;
    only double-quoted strings have backslash escapes)."""
    quote = text[start]
    delim = quote * 3 if toml and text.startswith(quote * 3, start) else quote
    pos = start + len(delim)
    while pos < len(text):
        if quote == '"' and text[pos] == "\\":
            pos += 2
        elif text.startswith(delim, pos):
            return pos + len(delim)
        else:
            pos += 1
    return pos


def pid_field(doc: dict[str, Any], key: str, where: Path, fix: str | UserFile) -> int:
    """`doc[key]` as a process id: an int (not a bool) from 1 to MAX_PID."""
    value = doc.get(key)
    if type(value) is not int or not 1 <= value <= MAX_PID:
        raise not_ours(where, f"{key} = {_short(value)} is not a process id (1 to {MAX_PID})", fix)
    return value


def _short(value: object) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else "a table"
    return text if len(text) <= 40 else text[:37] + "..."


def _cause(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link"
    if exc.errno == errno.EISDIR:
        return "it is a folder"
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"

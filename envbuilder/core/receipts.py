"""Receipts: the proof that a journal is this user's envbuilder's own (envbuilder.core.journal says
why one is needed), kept in the user's state folder, never in a project."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.fsutil import (
    WriteError,
    atomic_write_bytes,
    lock_file,
    make_parents,
    sha256_bytes,
    write_error,
)
from envbuilder.core.journalfile import HEX64, JOURNAL, TOKEN, journal_temp
from envbuilder.core.statefile import not_ours, read_state

RECEIPT_VERSION = 1
#: A receipt is a few hundred bytes.
_MAX_RECEIPT_BYTES = 65536


def state_dir() -> Path:
    """envbuilder's per-user state: $XDG_STATE_HOME/envbuilder, default ~/.local/state/envbuilder.
    Never inside a project, so nothing a checkout carries lands there. A relative
    XDG_STATE_HOME is ignored, as the XDG spec says (it would put receipts into whatever
    folder a command runs in: the project itself)."""
    base = Path(os.environ.get("XDG_STATE_HOME", ""))
    if not base.is_absolute():
        base = Path.home() / ".local" / "state"
    return base / "envbuilder"


def ready_state_dir() -> Path:
    """The receipts folder, made and proven writable (a file is created there and removed)
    before a writing command does any work: a state folder that is too long, read-only or not
    the user's is a WriteError at the start, not after minutes of resolving."""
    folder = _receipts(create=True)
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".probe-000000000000.json.", suffix=".tmp")
    except OSError as exc:
        raise _state_error(folder, write_error(folder / "x", exc).cause) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        Path(name).unlink()
    return folder


def _receipts(create: bool) -> Path:
    """The receipts folder; checked to be the user's own folder that no one else can write."""
    folder = state_dir() / "commits"
    if create:
        try:
            make_parents(folder / "x")
            if not folder.is_dir():
                folder.mkdir(mode=0o700)
        except WriteError as exc:
            raise _state_error(folder, exc.cause) from None
        except OSError as exc:
            raise _state_error(folder, write_error(folder, exc, "create").cause) from None
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return folder
    except OSError as exc:
        raise _state_error(folder, os.strerror(exc.errno or 0)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise _state_error(folder, "it is not a folder (a link or a file)")
    if hasattr(os, "geteuid") and (info.st_uid != os.geteuid() or info.st_mode & 0o022):
        raise _state_error(folder, "others can write it; `chmod 700` it (it must be yours)")
    return folder


def _state_error(folder: Path, why: str) -> EnvbuilderError:
    return WriteError(
        folder,
        f"{why}. envbuilder keeps the receipts of its unfinished writes there (the proof that "
        "lets the next command finish them); make it a writable folder of yours, or point "
        "XDG_STATE_HOME at one",
        "use",
    )


@dataclass(frozen=True)
class Receipt:
    token: str

    @property
    def path(self) -> Path:
        return state_dir() / "commits" / f"{self.token}.json"

    def write(self, root: Path, info: os.stat_result, journals: Sequence[bytes]) -> None:
        _receipts(create=True)
        data = {
            "version": RECEIPT_VERSION,
            "root": str(root),
            "device": info.st_dev,
            "inode": info.st_ino,
            "journals": [sha256_bytes(j) for j in journals],
        }
        try:
            atomic_write_bytes(self.path, (json.dumps(data) + "\n").encode("utf-8"), 0o600)
        except WriteError as exc:
            raise _state_error(self.path.parent, exc.cause) from None

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def refusal(self, info: os.stat_result, journal: bytes | None) -> str | None:
        """None when the receipt proves `journal` (None: any journal of this token) in the
        root whose stat is `info`; else why not."""
        try:
            data = self.read()
        except (EnvbuilderError, OSError) as exc:
            return f"its receipt cannot be used: {exc}"
        if data is None:
            return f"envbuilder has no receipt of writing it ({self.path} does not exist)"
        if (data["device"], data["inode"]) != (info.st_dev, info.st_ino):
            return f"its receipt {self.path} is for another folder ({data['root']!r})"
        if journal is not None and sha256_bytes(journal) not in data["journals"]:
            return f"its content is not what envbuilder wrote (see {self.path})"
        return None

    def read(self) -> dict[str, Any] | None:
        """The receipt, each value checked for type (None: there is none). StateFileError
        when it is not one envbuilder wrote: a link, a FIFO, too big, too deep, wrong types."""
        folder = _receipts(create=False)
        path = folder / f"{self.token}.json"
        fix = (
            "remove it (a receipt only lets envbuilder finish one interrupted write; without "
            "it the journal it names is left for you to check)"
        )
        data: Any = read_state(path, _MAX_RECEIPT_BYTES, "json", fix)
        if data is None:
            return None
        if not (
            isinstance(data, dict)
            and data.get("version") == RECEIPT_VERSION
            and isinstance(data.get("root"), str)
            and all(type(data.get(k)) is int for k in ("device", "inode"))
            and isinstance(data.get("journals"), list)
            and all(isinstance(j, str) and HEX64.match(j) for j in data["journals"])
        ):
            raise not_ours(path, "its keys or their types are not a receipt's", fix)
        return data


def drop_orphan_receipts() -> list[Path]:
    """Remove the receipts whose journal is gone (a kill between the journal's removal and the
    receipt's leaves one); returns those removed. A receipt is removed only when its root is
    there (the same device and inode), no one writes into it (its lock is free) and it holds
    neither the journal nor a journal temp of that token; any other receipt is kept (a root
    on a drive not mounted now may come back). Never raises for what it finds."""
    try:
        names = sorted(p.name for p in _receipts(create=False).iterdir())
    except (OSError, EnvbuilderError):
        return []
    removed = []
    for name in names:
        token = name.removesuffix(".json")
        if not (name.endswith(".json") and TOKEN.match(token)):
            continue
        receipt = Receipt(token)
        try:
            data = receipt.read()
        except (OSError, EnvbuilderError):
            continue  # not one envbuilder wrote: its journal's refusal names it
        if data is not None and _orphan(data, token):
            receipt.drop()
            removed.append(receipt.path)
    return removed


def _orphan(receipt: Mapping[str, Any], token: str) -> bool:
    """Whether the root a receipt names is there, free, and without this token's journal."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(receipt["root"], flags)
    except OSError:
        return False  # gone, unmounted, or a folder that cannot be opened (Windows)
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (receipt["device"], receipt["inode"]):
            return False
        if not lock_file(fd, blocking=False):
            return False  # a commit runs there now: its receipt comes before its journal
        names = set(os.listdir(fd))  # noqa: PTH208 (a folder's fd: no Path for it)
        return JOURNAL not in names and journal_temp(token).name not in names
    except OSError:
        return False
    finally:
        os.close(fd)

"""The journal file of a multi-file commit (envbuilder.core.journal): its name in the commit's
root, its format and entries, and how a journal that is not provably envbuilder's is refused."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.statefile import StateFileError, parse_json

#: The journal of a multi-file commit, in the commit's root folder while the commit runs.
JOURNAL = ".envbuilder-commit.json"
JOURNAL_VERSION = 2
TOKEN = re.compile(r"[0-9a-f]{12}\Z")
JOURNAL_TEMP = re.compile(re.escape(f".{JOURNAL}.") + r"([0-9a-f]{12})\.tmp\Z")
HEX64 = re.compile(r"[0-9a-f]{64}\Z")
#: A journal lists a few dozen files; one bigger than this was not written by envbuilder.
MAX_JOURNAL_BYTES = 1 << 20
#: What a temp file of a commit may hold (a pylock is a few MiB at most).
MAX_FILE_BYTES = 64 << 20


class JournalError(EnvbuilderError):
    """A journal envbuilder cannot prove it wrote, or cannot carry out safely: it is left alone,
    and so is every file it names."""


@dataclass(frozen=True)
class Entry:
    rel: PurePosixPath  # the file to replace or delete, relative to the root
    sha256: str | None  # of the new content; None: the file is deleted

    @property
    def new(self) -> bool:
        return self.sha256 is not None

    def temp(self, token: str) -> PurePosixPath:
        return self.rel.with_name(f".{self.rel.name}.{token}.tmp")


@dataclass(frozen=True)
class Journal:
    state: str
    token: str
    entries: tuple[Entry, ...]
    folders: tuple[PurePosixPath, ...]

    def dump(self, state: str) -> bytes:
        data = {
            "version": JOURNAL_VERSION,
            "state": state,
            "token": self.token,
            "files": [{"path": e.rel.as_posix(), "sha256": e.sha256} for e in self.entries],
            "folders": [f.as_posix() for f in self.folders],
        }
        return (json.dumps(data, indent=1) + "\n").encode("utf-8")


def journal_temp(token: str) -> PurePosixPath:
    return PurePosixPath(f".{JOURNAL}.{token}.tmp")


def left_over(root: Path) -> bool:
    """Whether a journal, or the temp file of one, is in `root` (nothing is read)."""
    try:
        with os.scandir(root) as entries:
            return any(e.name == JOURNAL or JOURNAL_TEMP.match(e.name) for e in entries)
    except OSError:
        return False


def refused(journal: Path, why: str) -> JournalError:
    return JournalError(
        f"{journal}: not finished or undone: {why}. Nothing was changed, and no command "
        "touches what it names: check those files, then remove it"
    )


def token_of(data: bytes) -> str | None:
    try:
        doc: Any = parse_json(data, Path(JOURNAL), "")
    except StateFileError:
        return None
    token = doc.get("token") if isinstance(doc, dict) else None
    return token if isinstance(token, str) and TOKEN.match(token) else None

"""Known error messages -> cause, fix and sources (data in `envbuilder/data/errors.toml`).

    match(text) -> Explanation | None     the most specific entry whose patterns match `text`
    load_errors() -> tuple[Explanation, ...]   all entries, cached; CompatDataError if malformed

Report printers (validate, compare) call `match(reason)` on a failed check's reason and point the
user at `envbuilder explain` when it returns something.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from envbuilder.core.errors import CompatDataError

#: The most text `envbuilder explain` reads (standard input or the argument). Matching is linear
#: (~0.2 s per MB here); the cap bounds memory and time on an endless pipe.
MAX_INPUT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Explanation:
    """One known message: what it means and what to do, with public sources."""

    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    requires: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    sources: tuple[str, ...]

    def matches(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns) and all(
            r.search(text) for r in self.requires
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            "cause": self.cause,
            "fix": self.fix,
            "sources": list(self.sources),
        }


_UNBOUNDED = re.compile(r"[*+]|\{\d*,\}")
_GROUP_REPEAT = re.compile(r"[*+{]")


def backtracking_risk(pattern: str) -> str | None:
    """What could make `pattern` slower than linear on a long line, or None.

    A search tries the pattern at every position of the text; the work at each is bounded by a
    constant only when no part repeats without limit (`*`, `+`, `{n,}`: `.*` after a common
    prefix rescans the rest of the line from every occurrence, so 1 MB took minutes) and no
    group repeats (bounds nested in a repeated group multiply). Escapes and [classes] are
    skipped; an optional group `(...)?` is allowed."""
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _class_end(pattern, i)
            continue
        if m := _UNBOUNDED.match(pattern, i):
            return f"unbounded repeat {m.group()!r} at {i}: bound it, e.g. .{{0,80}}"
        if ch == ")" and _GROUP_REPEAT.match(pattern, i + 1):
            return f"repeated group at {i}: write the repeats out"
        i += 1
    return None


def _class_end(pattern: str, start: int) -> int:
    """The index after the [class] that opens at `start` (a ']' first in it is literal)."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def _compile(entry_id: str, values: object, key: str) -> tuple[re.Pattern[str], ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise CompatDataError(f"errors.toml: [[error]] {entry_id}: {key} must be a list of strings")
    for v in values:
        if risk := backtracking_risk(v):
            raise CompatDataError(
                f"errors.toml: [[error]] {entry_id}: {key} regex {v!r} must "
                f"take linear time on long lines: {risk}"
            )
    try:
        return tuple(re.compile(v, re.IGNORECASE) for v in values)
    except re.error as exc:
        raise CompatDataError(
            f"errors.toml: [[error]] {entry_id}: bad {key} regex: {exc}"
        ) from None


def parse_errors(data: dict[str, object]) -> tuple[Explanation, ...]:
    """Turn decoded errors.toml into entries; CompatDataError names the bad entry and key."""
    raw = data.get("error")
    if not isinstance(raw, list):
        raise CompatDataError("errors.toml: expected [[error]] tables")
    out: list[Explanation] = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict):
            raise CompatDataError(f"errors.toml: entry {i} is not a table")
        eid = e.get("id")
        if not isinstance(eid, str) or not eid:
            raise CompatDataError(f"errors.toml: entry {i} has no id")
        for key in ("title", "cause", "fix"):
            if not isinstance(e.get(key), str) or not e[key].strip():
                raise CompatDataError(f"errors.toml: [[error]] {eid}: {key} must be a text")
        sources = e.get("sources")
        if not isinstance(sources, list) or not sources:
            raise CompatDataError(f"errors.toml: [[error]] {eid}: sources must name at least one")
        if unknown := set(e) - {"id", "title", "patterns", "requires", "cause", "fix", "sources"}:
            raise CompatDataError(f"errors.toml: [[error]] {eid}: unknown keys {sorted(unknown)}")
        out.append(
            Explanation(
                id=eid,
                title=e["title"],
                patterns=_compile(eid, e.get("patterns"), "patterns"),
                requires=_compile(eid, e.get("requires", []), "requires"),
                cause=" ".join(e["cause"].split()),
                fix=" ".join(e["fix"].split()),
                sources=tuple(str(s) for s in sources),
            )
        )
    if len({x.id for x in out}) != len(out):
        raise CompatDataError("errors.toml: duplicate ids")
    return tuple(out)


@cache
def load_errors() -> tuple[Explanation, ...]:
    """The shipped entries, in file order."""
    text = resources.files("envbuilder").joinpath("data/errors.toml").read_text(encoding="utf-8")
    try:
        return parse_errors(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise CompatDataError(f"errors.toml: {exc}") from None


def match_all(text: str) -> list[Explanation]:
    """Every entry that matches, most specific first (more `requires` matched), then file order."""
    found = [e for e in load_errors() if e.matches(text)]
    return sorted(found, key=lambda e: -len(e.requires))


def match(text: str) -> Explanation | None:
    """The best explanation for `text` (an error message, a log line or a whole traceback)."""
    found = match_all(text)
    return found[0] if found else None

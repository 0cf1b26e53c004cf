"""The public part of a compatibility-data `source` string, for text users keep (init's comments).

A `source` in envbuilder/data/*.toml cites its evidence as `;`-separated parts. Some parts cite
notes that exist only where the data was gathered (the team's reference notes, the design note
on this project's own test machines); they help whoever maintains the data, but in a user's
`environments.toml` they name documents the user cannot open, or this project's CI machines.
`public_citation` keeps the parts a reader can follow (repositories, vendor pages, issues) and
drops a whole part that leans on a private note anywhere: a part is one claim with its evidence,
and half of it would claim more than the public half shows.
"""

from __future__ import annotations

import re

#: Notes that are not published with envbuilder: a part that cites one of them is left out.
PRIVATE_NOTES = ("design.md", "rocm-reference.md", "rocm-2026.md")

#: Words that describe the machines this project's data was checked on, not a public source.
_LOCAL = re.compile(r"this workplace|this machine|this project's CI|\bCI machine", re.IGNORECASE)

#: What is left when no part is public: the data file is the citation.
FALLBACK = "envbuilder's compatibility data (envbuilder/data/)"


def split_parts(source: str) -> list[str]:
    """`source` split at its top-level `;` (one inside parentheses or brackets stays)."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(source):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0:
            parts.append(source[start:i].strip())
            start = i + 1
    parts.append(source[start:].strip())
    return [p for p in parts if p]


def is_public(part: str) -> bool:
    """Whether a citation part names only what a reader can follow."""
    return not any(note in part for note in PRIVATE_NOTES) and _LOCAL.search(part) is None


def public_citation(source: str) -> str:
    """The public parts of `source`, in their order (FALLBACK when none is)."""
    kept = [p for p in split_parts(source) if is_public(p)]
    return "; ".join(kept) if kept else FALLBACK

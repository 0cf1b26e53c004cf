"""What a re-lock changed: each package whose pinned version moved, was added or was removed,
and each base image whose digest moved, so `envbuilder lock` can say `filelock 4.3.1 -> 4.3.2`
the way uv and pip-tools do (stdout and `--json`).

The comparison is between the bytes of the pylocks before and after (envbuilder.lock.resolve hands
both in), per target; a change seen by several targets (docker, wsl2 and native usually share
one resolution) is reported once with the targets that saw it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Change:
    """One changed pin. `kind`: "package" (a pylock entry) or "base" (a base image digest);
    `old`/`new` None for an added/removed one."""

    kind: str
    name: str
    old: str | None
    new: str | None
    targets: tuple[str, ...]

    @property
    def verb(self) -> str:
        if self.old is None:
            return "added"
        return "removed" if self.new is None else "changed"

    def line(self) -> str:
        """`filelock 4.3.1 -> 4.3.2`, `added tinyextra 1.0`, `removed six 1.16.0`."""
        where = f" ({', '.join(self.targets)})"
        if self.old is None:
            return f"added {self.name} {self.new}{where}"
        if self.new is None:
            return f"removed {self.name} {self.old}{where}"
        return f"{self.name} {self.old} -> {self.new}{where}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "change": self.verb,
            "old": self.old,
            "new": self.new,
            "targets": list(self.targets),
        }


def pinned_versions(pylock: bytes | None) -> dict[str, str]:
    """name -> version of a pylock's packages (an unreadable or missing pylock: none)."""
    if pylock is None:
        return {}
    try:
        doc = tomllib.loads(pylock.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    out: dict[str, str] = {}
    for pkg in doc.get("packages", []):
        if isinstance(pkg, dict) and isinstance(pkg.get("name"), str):
            out[str(canonicalize_name(pkg["name"]))] = str(pkg.get("version", ""))
    return out


def package_changes(
    old: Mapping[str, bytes | None], new: Mapping[str, bytes | None]
) -> list[tuple[str, str | None, str | None, str]]:
    """(name, old version, new version, target) for every pin that differs, per target."""
    found: list[tuple[str, str | None, str | None, str]] = []
    for target in sorted(set(old) | set(new)):
        before, after = pinned_versions(old.get(target)), pinned_versions(new.get(target))
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                found.append((name, before.get(name), after.get(name), target))
    return found


def base_changes(
    old: Mapping[str, str | None], new: Mapping[str, str | None]
) -> list[tuple[str, str | None, str | None, str]]:
    """(image, old digest, new digest, target) for every base pin that moved."""
    found: list[tuple[str, str | None, str | None, str]] = []
    for target in sorted(set(old) | set(new)):
        before, after = old.get(target), new.get(target)
        if before == after or (before is None and after is None):
            continue
        name = (after or before or "").split("@", 1)[0]
        found.append((name, _digest(before), _digest(after), target))
    return found


def _digest(ref: str | None) -> str | None:
    if ref is None:
        return None
    return ref.split("@", 1)[1] if "@" in ref else "(tag only)"


def merged(kind: str, rows: list[tuple[str, str | None, str | None, str]]) -> list[Change]:
    """Rows of the same change across targets folded into one Change, sorted by name."""
    by_change: dict[tuple[str, str | None, str | None], list[str]] = {}
    for name, before, after, target in rows:
        by_change.setdefault((name, before, after), []).append(target)
    return [
        Change(kind, name, before, after, tuple(sorted(targets)))
        for (name, before, after), targets in sorted(by_change.items(), key=lambda kv: kv[0][0])
    ]


def env_changes(
    old_pylocks: Mapping[str, bytes | None],
    new_pylocks: Mapping[str, bytes | None],
    old_bases: Mapping[str, str | None],
    new_bases: Mapping[str, str | None],
) -> tuple[Change, ...]:
    """Every changed base pin, then every changed package, of one env."""
    return (
        *merged("base", base_changes(old_bases, new_bases)),
        *merged("package", package_changes(old_pylocks, new_pylocks)),
    )

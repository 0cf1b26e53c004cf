"""Just enough of PEP 751 (pylock.toml), PEP 503 names, PEP 508 markers and PEP 440 version
equality for the conformance check, with the standard library only (no `packaging` here)."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class LockReadError(Exception):
    """The pylock file cannot be read or is not a PEP 751 lock."""


class MarkerError(Exception):
    """A marker this small evaluator does not understand."""


@dataclass(frozen=True)
class LockedPackage:
    name: str  # canonical (PEP 503)
    version: str | None
    marker: str | None


def canonical_name(name: str) -> str:
    """PEP 503: runs of -, _ and . become one -, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def normalize_version(version: str) -> str:
    """A PEP 440 normal form good for equality: lower case, no leading v, trailing .0 of the
    release dropped (1.0 == 1.0.0), local separators unified (+cpu.1 == +cpu-1)."""
    v = version.strip().lower()
    v = v.removeprefix("v")
    v, _, local = v.partition("+")
    found = re.match(r"^(\d+(?:\.\d+)*)(.*)$", v)
    if found:
        release = [int(p) for p in found.group(1).split(".")]
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        v = ".".join(map(str, release)) + found.group(2)
    if local:
        v += "+" + re.sub(r"[-_]", ".", local)
    return v


_KEY = re.compile(r"""^([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|'[^']*'|\[[^\]]*\])\s*(?:#.*)?$""")


def _toml_value(text: str) -> Any:
    if text.startswith("'"):
        return text[1:-1]
    if text.startswith('"'):
        return json.loads(text)  # TOML basic strings use JSON's escapes
    return [_toml_value(v.strip()) for v in re.findall(r"""("(?:[^"\\]|\\.)*"|'[^']*')""", text)]


def parse_pylock_subset(text: str) -> dict[str, Any]:
    """Python < 3.11 has no tomllib: read the keys the check needs (top-level and each
    `[[packages]]` table's own one-line string keys); nested tables are passed over."""
    data: dict[str, Any] = {"packages": []}
    table: dict[str, Any] | None = data
    for line in text.splitlines():
        header = line.strip()
        if header.startswith("["):
            table = {} if header == "[[packages]]" else None
            if table is not None:
                data["packages"].append(table)
            continue
        found = _KEY.match(line)  # keys indented or inside inline arrays are not ours
        if table is not None and found:
            table[found.group(1)] = _toml_value(found.group(2))
    return data


def _load_toml(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10 (e.g. ROCm 6.1 images)
        return parse_pylock_subset(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(str(exc)) from exc


def read_pylock(path: Path) -> tuple[list[LockedPackage], dict[str, Any]]:
    """The lock's packages (names canonical) and its top-level table."""
    try:
        data = _load_toml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LockReadError(f"cannot read {path}: {exc}") from exc
    if "lock-version" not in data or not isinstance(data.get("packages"), list):
        raise LockReadError(
            f"{path} is not a PEP 751 lock: it needs `lock-version` and `[[packages]]`"
        )
    packages = []
    for i, entry in enumerate(data["packages"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise LockReadError(f"{path}: packages[{i}] has no `name`")
        version = entry.get("version")
        packages.append(
            LockedPackage(
                canonical_name(entry["name"]),
                str(version) if version is not None else None,
                entry.get("marker"),
            )
        )
    return packages, data


def marker_environment(lock: Mapping[str, Any]) -> dict[str, Any]:
    """PEP 508's marker variables for this interpreter, plus PEP 751's extras/groups."""
    impl = sys.implementation.version
    impl_version = f"{impl.major}.{impl.minor}.{impl.micro}"
    if impl.releaselevel != "final":
        impl_version += impl.releaselevel[0] + str(impl.serial)
    return {
        "os_name": os.name,
        "sys_platform": sys.platform,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "python_full_version": platform.python_version(),
        "implementation_name": sys.implementation.name,
        "implementation_version": impl_version,
        "extra": "",
        "extras": frozenset(),
        "dependency_groups": frozenset(lock.get("default-groups", [])),
    }


_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'[^']*'|"[^"]*")|(?P<op>===|==|!=|<=|>=|~=|<|>|\(|\))
                        |(?P<word>[A-Za-z_][A-Za-z0-9_.]*))""",
    re.VERBOSE,
)
_VERSION_VARS = {
    "python_version",
    "python_full_version",
    "implementation_version",
    "platform_release",
}


def _tokens(marker: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(marker.rstrip()):
        found = _TOKEN.match(marker, pos)
        if not found:
            raise MarkerError(f"cannot parse marker {marker!r} at {marker[pos:]!r}")
        kind = found.lastgroup or ""
        out.append((kind, found.group(kind)))
        pos = found.end()
    return out


def _version_key(v: str) -> tuple[tuple[int, ...], str]:
    found = re.match(r"^(\d+(?:\.\d+)*)(.*)$", normalize_version(v))
    if not found:
        raise MarkerError(f"not a version: {v!r}")
    return tuple(int(p) for p in found.group(1).split(".")), found.group(2)


def _compare(left: Any, op: str, right: Any, versions: bool) -> bool:
    if op in ("in", "not in"):
        inside = left in right
        return inside if op == "in" else not inside
    if versions and op not in ("===",):
        lk, rk = _version_key(str(left)), _version_key(str(right))
        width = max(len(lk[0]), len(rk[0]))
        la = (lk[0] + (0,) * (width - len(lk[0])), lk[1])
        ra = (rk[0] + (0,) * (width - len(rk[0])), rk[1])
        if op == "~=":
            prefix = rk[0][:-1]
            return la >= ra and lk[0][: len(prefix)] == prefix
        return {
            "==": la == ra,
            "!=": la != ra,
            "<": la < ra,
            "<=": la <= ra,
            ">": la > ra,
            ">=": la >= ra,
        }[op]
    if op in ("==", "==="):
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    raise MarkerError(f"operator {op} needs versions, got {left!r} and {right!r}")


class _Parser:
    def __init__(self, marker: str, env: Mapping[str, Any]) -> None:
        self.toks = _tokens(marker)
        self.i = 0
        self.env = env
        self.marker = marker

    def _peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _take(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise MarkerError(f"marker {self.marker!r} ends too early")
        self.i += 1
        return tok

    def parse(self) -> bool:
        value = self._or()
        if self._peek() is not None:
            raise MarkerError(f"unexpected {self._peek()} in marker {self.marker!r}")
        return value

    def _or(self) -> bool:
        value = self._and()
        while self._peek() == ("word", "or"):
            self._take()
            value = self._and() or value
        return value

    def _and(self) -> bool:
        value = self._atom()
        while self._peek() == ("word", "and"):
            self._take()
            value = self._atom() and value
        return value

    def _value(self) -> tuple[Any, bool]:
        kind, text = self._take()
        if kind == "str":
            return text[1:-1], False
        if kind == "word" and text in self.env:
            return self.env[text], text in _VERSION_VARS
        raise MarkerError(f"unknown marker variable {text!r} in {self.marker!r}")

    def _atom(self) -> bool:
        if self._peek() == ("op", "("):
            self._take()
            value = self._or()
            if self._take() != ("op", ")"):
                raise MarkerError(f"missing ) in marker {self.marker!r}")
            return value
        left, left_v = self._value()
        kind, op = self._take()
        if (kind, op) == ("word", "not"):
            if self._take() != ("word", "in"):
                raise MarkerError(f"expected 'not in' in marker {self.marker!r}")
            op = "not in"
        elif kind != "op" and op != "in":
            raise MarkerError(f"expected an operator, got {op!r} in {self.marker!r}")
        right, right_v = self._value()
        return _compare(left, op, right, left_v or right_v)


def evaluate_marker(marker: str, env: Mapping[str, Any]) -> bool:
    """True if the PEP 508 marker holds in `env`; MarkerError if it cannot be understood."""
    return _Parser(marker, env).parse()

"""The findings of one spec file (FindingCollector, a model.FindingSink): one line each, and a
finding on a value an env inherited from [defaults] says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tomlkit
import tomlkit.exceptions

from envbuilder.core.model import Finding, Severity


def _one_line(text: str) -> str:
    """A finding is one line: control characters a user wrote are shown escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


class FindingCollector:
    """Collects the findings of one file (a `model.FindingSink`); remembers where merged values
    came from, so a finding on an inherited value says "(set in [defaults])"."""

    def __init__(self, file: str) -> None:
        self.file = _one_line(file)
        self.findings: list[Finding] = []
        self.defaults: dict[str, Any] = {}
        self.raw_envs: dict[str, dict[str, Any]] = {}
        self.doc: tomlkit.TOMLDocument | None = None
        self.bad: dict[str, set[str]] = {}  # env name ("" for defaults) -> rejected keys

    def add(self, severity: Severity, key: str, message: str) -> None:
        self.findings.append(Finding(severity, self.file, _one_line(key), _one_line(message)))

    def error(self, key: str, message: str) -> None:
        self.add("error", key, message)

    def origin(self, env: str, *path: str) -> str:
        """ " (set in [defaults])" when the env's value at `path` came from [defaults]."""
        return (
            ""
            if _has(self.raw_envs.get(env, {}), path) or not _has(self.defaults, path)
            else " (set in [defaults])"
        )

    def env_finding(
        self, env: str, path: Sequence[str], message: str, severity: Severity = "error"
    ) -> None:
        """A finding on env key `path`, noting when the value was inherited from [defaults].
        A "missing" finding is dropped when that key was already reported as mistyped."""
        dotted = ".".join(path)
        if message.startswith("missing") and (
            dotted in self.bad.get(env, set()) or dotted in self.bad.get("", set())
        ):
            return
        self.add(severity, ".".join(("env", env, *path)), message + self.origin(env, *path))

    def result(self) -> tuple[Finding, ...]:
        return tuple(dict.fromkeys(self.findings))


def _has(table: Mapping[str, Any], path: Sequence[str]) -> bool:
    node: Any = table
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True

"""The JSON schema of `<env>.lock.toml`, generated from the records the strict reader checks
against (envbuilder.lock.lockfile) and the targets registered now.
`envbuilder/data/schemas/lock.schema.json` is its output for the built-in targets; a test fails
when the two drift, and another when the reader and the schema disagree about a value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envbuilder.core import records
from envbuilder.lock import artifacts as artifactlock
from envbuilder.lock.lockfile import TARGET_KEYS, TOP_KEYS
from envbuilder.targets import registry


def _pylock_pattern(targets: Sequence[str]) -> str:
    """The shape of every pylock name a lock may hold (the reader also ties it to `env` and
    target)."""
    return r"^pylock\.[a-z0-9._-]+-(" + "|".join(targets) + r")\.toml$"


def json_schema() -> dict[str, Any]:
    """The JSON schema of `<env>.lock.toml` (as parsed TOML), generated from the records the
    strict reader checks against and the targets registered now;
    `envbuilder/data/schemas/lock.schema.json` is this (for the built-in targets), and a test
    fails when the two drift."""
    targets = registry.names()
    makers = set(registry.with_capability("push")) | set(registry.with_capability("verify"))
    top = records.schema_properties(TOP_KEYS)
    top["targets"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {t: {"$ref": "#/$defs/target"} for t in targets},
    }
    top["artifacts"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {t: {"$ref": "#/$defs/artifacts"} for t in targets if t in makers},
    }
    target = records.schema_properties(TARGET_KEYS)
    target["pylock"]["pattern"] = _pylock_pattern(targets)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:envbuilder:lock:1",
        "title": "envbuilder env lock (lockfiles/<env>.lock.toml)",
        "type": "object",
        "additionalProperties": False,
        "properties": top,
        "required": records.schema_required(TOP_KEYS),
        "$defs": {
            "target": {
                "type": "object",
                "additionalProperties": False,
                "properties": target,
                "required": records.schema_required(TARGET_KEYS),
            },
            "artifacts": artifactlock.json_schema(),
        },
    }

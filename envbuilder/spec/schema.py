"""The keys environments.toml may have (the env-level ones, one table per registered target, the
indexes) and the check of a table as written against them: unknown keys and wrong types are
findings that say what to write."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from envbuilder.core.model import Accelerator, did_you_mean
from envbuilder.spec.findings import FindingCollector
from envbuilder.targets import registry
from envbuilder.targets.base import Schema

#: Kinds: "str", "bool", "list[str]", "map[str]", or a nested schema (a table). Each target's
#: table ([env.NAME.<target>]) has the schema its descriptor declares (`env_keys`).
BASE_ENV_KEYS: Schema = {
    "description": "str",
    "accelerator": "str",
    "rocm": "str",
    "cuda": "str",
    "gpu": "str|list[str]",
    "python": "str",
    "packages": "list[str]",
    "index_pins": "map[str]",
    "targets": "list[str]",
    "env": "map[str]",
    "apt": "list[str]",
    "rccl": "map[str]",
}
INDEX_KEYS: Schema = {"url": "str", "mirror": "str"}
TOP_KEYS = ("defaults", "env", "indexes")


def env_keys() -> Schema:
    """The schema of an [env.NAME] (and [defaults]) table: the env-level keys, then one table
    per registered target."""
    return {**BASE_ENV_KEYS, **{d.name: d.keys for d in registry.all()}}


ACCELERATORS: tuple[Accelerator, ...] = ("rocm", "cuda", "cpu")

_KIND_WORDS = {
    "str": "a string",
    "bool": "true or false",
    "list[str]": "a list of strings",
    "map[str]": "a table of strings",
    "str|list[str]": "a string or a list of strings",
}


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "map[str]":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if kind == "str|list[str]":  # one GPU, or several (`gpu`)
        return _kind_ok(value, "str") or (_kind_ok(value, "list[str]") and bool(value))
    raise AssertionError(kind)


def type_name(value: Any) -> str:
    names = {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        list: "an array",
        dict: "a table",
    }
    if isinstance(value, list):
        if not value:
            return "an empty array"
        odd = next((v for v in value if not isinstance(v, str)), None)
        if odd is not None:  # what is in it, since "not an array" would be wrong
            return f"an array holding {type_name(odd)}"
    return names.get(type(value), type(value).__name__)


def clean_table(
    table: Any,
    schema: Schema,
    parts: tuple[str, ...],
    ctx: FindingCollector,
    bad: set[str],
    prefix: str = "",
) -> dict[str, Any]:
    """Report unknown keys and wrong types in one table (recursively); return the table without
    them. `bad` collects the relative dotted keys that were rejected (and the keys a typo
    probably meant), so later "missing" findings for them are not reported twice."""
    key = ".".join(parts)
    if not isinstance(table, dict):
        ctx.error(key, f"must be a table, not {type_name(table)}; write [{key}]")
        bad.add(prefix.rstrip("."))
        return {}
    out: dict[str, Any] = {}
    for name, value in table.items():
        where = f"{key}.{name}"
        if name not in schema:
            hint = did_you_mean(name, schema)
            ctx.error(where, f"unknown key{hint}; known keys here: {', '.join(schema)}")
            bad.update(prefix + c for c in difflib.get_close_matches(name, list(schema), 1, 0.6))
            continue
        kind = schema[name]
        if isinstance(kind, Mapping):
            out[name] = clean_table(value, kind, (*parts, name), ctx, bad, f"{prefix}{name}.")
        elif kind == "map[str]" and isinstance(value, dict):
            out[name] = _clean_map(value, (*parts, name), ctx)
        elif not _kind_ok(value, kind):
            written = _as_written(ctx.doc, (*parts, name))
            ctx.error(
                where,
                f"must be {_KIND_WORDS[kind]}, not {type_name(value)}"
                + _type_hint(value, kind, written),
            )
            bad.add(prefix + name)
        else:
            out[name] = value
    return out


def _clean_map(
    table: dict[str, Any], parts: tuple[str, ...], ctx: FindingCollector
) -> dict[str, str]:
    """A table of strings: each non-string entry is its own finding (and is dropped)."""
    out: dict[str, str] = {}
    for k, v in table.items():
        if isinstance(v, str):
            out[k] = v
            continue
        written = _as_written(ctx.doc, (*parts, k))
        ctx.error(
            ".".join((*parts, k)),
            f"must be a string, not {type_name(v)}" + _type_hint(v, "str", written),
        )
    return out


def _as_written(doc: Any, parts: Sequence[str]) -> str | None:
    """The value's text as written in the file (3.10 stays "3.10"), when tomlkit has it."""
    node = doc
    try:
        for part in parts:
            node = node[part]
        text = node.as_string()
    except (KeyError, TypeError, AttributeError):
        return None
    return text.strip() if isinstance(text, str) and text.strip().isprintable() else None


def _type_hint(value: Any, kind: str, written: str | None = None) -> str:
    if kind == "str" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'; quote it: "{written or value}"'
    if kind == "list[str]" and isinstance(value, str):
        return f'; write ["{value}"]' if _printable(value) else "; write a list of strings"
    examples = {
        "str": '"..."',
        "bool": "true or false",
        "list[str]": '["..."]',
        "map[str]": '{ NAME = "value" }',
        "str|list[str]": '"RX 7900 XTX" or ["..."]',
    }
    return f"; write e.g. {examples[kind]}"


def _printable(value: str) -> bool:
    return value.isprintable()

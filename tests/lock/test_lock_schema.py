"""The published lock schema and the strict reader agree (issue 33): both come from the same
records, and this test fails when one refuses a value that the other takes.

For every key the lock's records declare (EnvLock, TargetLock, the digests, [artifacts.<target>])
a value of the wrong kind, and for every key with a form (a pattern, a range, a choice) a value
of the right kind in the wrong form, is put into the committed cpu lock; the reader
(envbuilder.lock.lockfile) and the schema (envbuilder.lock.schema, the file shipped in
envbuilder/data/schemas/) must both refuse it. The committed locks themselves must pass both.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.core.errors import LockError
from envbuilder.core.records import Field
from envbuilder.lock import artifacts as artifactlock
from envbuilder.lock.digests import table_sha256
from envbuilder.lock.lockfile import TARGET_KEYS, TOP_KEYS, parse_env_lock

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "lockfiles" / "cpu.lock.toml"
SCHEMA = json.loads((ROOT / "envbuilder/data/schemas/lock.schema.json").read_text("utf-8"))
WRONG_KIND: dict[type, object] = {str: 5, int: "5", bool: "yes", float: "x", list: "x", dict: "x"}


def _wrong_form(field: Field) -> object | None:
    """A value of the right kind that the key's form refuses; None if the key has no form."""
    if field.pattern is not None:
        return "not a valid value!"
    if field.choices:
        return 999 if field.kind is int else "not-a-choice"
    if field.minimum is not None:
        return field.minimum - 1
    return None


def _cases() -> Iterator[tuple[str, str, object]]:
    tables = (("top", TOP_KEYS), ("target", TARGET_KEYS), ("artifact", artifactlock.KEYS))
    for where, keys in tables:
        for field in keys:
            yield where, field.name, WRONG_KIND[field.kind]
            bad = _wrong_form(field)
            if bad is not None:
                yield where, field.name, bad


def _committed() -> dict[str, Any]:
    return tomllib.loads(LOCK.read_text("utf-8"))


def _put(data: dict[str, Any], where: str, name: str, value: object) -> None:
    """Set one value, and the digest over the table it is in again (so that only the value's
    own kind or form can be what is refused, not the digest beside it)."""
    if where == "top":
        data[name] = value
    elif where == "target":
        data["targets"]["docker"][name] = value
    else:
        data["artifacts"]["docker"][name] = value
        if all(isinstance(v, str) for v in data["artifacts"]["docker"].values()):
            digest = table_sha256(data["artifacts"]["docker"])
            data["targets"]["docker"]["artifacts_sha256"] = digest


def test_the_committed_locks_pass_the_reader_and_the_schema() -> None:
    locks = sorted((ROOT / "lockfiles").glob("*.lock.toml"))
    assert locks, "no committed lock"
    for path in locks:
        data = tomllib.loads(path.read_text("utf-8"))
        parse_env_lock(data, str(path))
        jsonschema.validate(data, SCHEMA)


def test_every_key_is_tried() -> None:
    """The cases cover each declared key (a record's new key is tried without a new test)."""
    tried = {(where, name) for where, name, _ in _cases()}
    declared = {("top", f.name) for f in TOP_KEYS} | {("target", f.name) for f in TARGET_KEYS}
    assert declared <= tried
    assert len(list(_cases())) > len(tried)  # forms too, not only kinds


@pytest.mark.parametrize(("where", "name", "value"), list(_cases()))
def test_the_reader_and_the_schema_refuse_the_same_value(
    where: str, name: str, value: object
) -> None:
    data = copy.deepcopy(_committed())
    assert "docker" in data["targets"] and "docker" in data.get("artifacts", {})
    _put(data, where, name, value)
    with pytest.raises(LockError):
        parse_env_lock(data, "cpu.lock.toml")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)

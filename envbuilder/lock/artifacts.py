"""`[artifacts.<target>]` of an env's lock: what builds recorded, one record declared once.

Each key is a value envbuilder compares with or hands to an engine; a malformed one is refused
when the lock is read (lock --check, render, build --verify before any build, pull), not minutes
later, or pasted into a rendered script. Adding a key is one `key(...)` below (and its test).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from envbuilder.core import records
from envbuilder.core.errors import LockError
from envbuilder.core.records import key
from envbuilder.targets import registry

_DIGEST = r"sha256:[0-9a-f]{64}"
_DIGEST_FORM = "'sha256:' and 64 lower-case hex digits"
_PINNED = rf"[A-Za-z0-9][A-Za-z0-9._:/-]*@{_DIGEST}"
#: The newest artifact formats this envbuilder writes (envbuilder.image.oci.writer.REPRO_FORMAT,
#: envbuilder.image.wsl.FORMAT; a test holds them equal). A recorded number above is from a newer
#: envbuilder, one below from an older one (that build is simply not current).
ARTIFACT_FORMATS = {"repro_format": 5, "format": 2}
_RELOCK = "run `envbuilder lock` to write it again"


@dataclass(frozen=True)
class Artifacts:
    """[artifacts.<target>]: every key optional, every value a string in its form."""

    image_id: str | None = key(
        "the image the lock predicts (docker) or the image a .wsl was exported from",
        default=None,
        pattern=_DIGEST,
        form=_DIGEST_FORM,
    )
    manifest_digest: str | None = key(
        "the pushed image's manifest digest", default=None, pattern=_DIGEST, form=_DIGEST_FORM
    )
    layers: str | None = key(
        "the image's layers above its base, in order (empty: none; artifacts_sha256 covers it)",
        default=None,
        pattern=rf"(?:{_DIGEST}(?: {_DIGEST})*)?",
        form="layer digests ('sha256:' and 64 lower-case hex digits) separated by spaces",
    )
    sha256: str | None = key(
        "the sha256 of the built file (a .wsl)",
        default=None,
        pattern=r"[0-9a-f]{64}",
        form="64 lower-case hex digits",
    )
    repo_digest: str | None = key(
        "where the image was pushed, pinned by digest",
        default=None,
        pattern=_PINNED,
        form="an image reference pinned by digest (REGISTRY/REPO@sha256:<64 hex digits>)",
    )
    tag: str | None = key(
        "the image's local name and tag",
        default=None,
        pattern=r"[A-Za-z0-9][A-Za-z0-9._:/-]*",
        form="an image name and tag",
    )
    sbom: str | None = key(
        "the SBOM artifact `push` attached to the image (envbuilder.image.registry_api)",
        default=None,
        pattern=_PINNED,
        form="an SBOM artifact reference pinned by digest (REGISTRY/REPO@sha256:<64 hex digits>)",
    )
    repro_format: str | None = key(
        "the image writer's format the image was built with",
        default=None,
        pattern=r"[0-9]{1,6}",
        form="a format number such as '1'",
    )
    format: str | None = key(
        "the .wsl writer's format the file was built with",
        default=None,
        pattern=r"[0-9]{1,6}",
        form="a format number such as '1'",
    )


KEYS = records.fields_of(Artifacts)


def check_artifacts(table: Mapping[str, object], where: str) -> dict[str, str]:
    """An [artifacts.<target>] table: known keys only, string values each in its form (the
    records' one reader, `records.table_problems`), format numbers no newer than this
    envbuilder writes. `where` is "<file>: artifacts.<target>"; the first problem is raised."""
    file, _, path = where.rpartition(": ")
    problems = records.table_problems(table, KEYS, file, path)
    if problems:
        raise LockError(f"{problems[0]}; {_RELOCK}")
    checked = {name: str(value) for name, value in table.items()}
    for name, value in checked.items():
        _check_format(name, value, where)
    return checked


def _check_format(name: str, value: str, where: str) -> None:
    newest = ARTIFACT_FORMATS.get(name)
    if newest is not None and not 1 <= int(value) <= newest:
        raise LockError(
            f"{where}.{name} = {value!r} is not a format this envbuilder knows (1 to "
            f"{newest}); a newer envbuilder wrote it, or it was edited: build again"
        )


def json_schema() -> dict[str, Any]:
    """The JSON schema of one [artifacts.<target>] table."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": records.schema_properties(KEYS),
    }


def parse_artifacts(
    tables: Mapping[str, Any], targets: Collection[str], where: str
) -> dict[str, dict[str, str]]:
    """[artifacts.<target>]: only for a locked target that makes artifacts (push or verify),
    only known keys, each value in its form."""
    makers = set(registry.with_capability("push")) | set(registry.with_capability("verify"))
    artifacts: dict[str, dict[str, str]] = {}
    for name, table in tables.items():
        if name not in targets or name not in makers:
            why = "is not locked here" if name not in targets else "records no artifacts"
            raise LockError(
                f"{where}: [artifacts.{name}]: target {name!r} {why} (artifacts are recorded "
                f"for {', '.join(sorted(makers & set(targets))) or 'no target of this lock'}); "
                f"{_RELOCK}"
            )
        if not isinstance(table, dict):
            raise LockError(f"{where}: artifacts.{name} must be a table of strings; {_RELOCK}")
        artifacts[name] = check_artifacts(table, f"{where}: artifacts.{name}")
    return artifacts

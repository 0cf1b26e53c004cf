"""The digests that cover a target's apt pins and its [artifacts.<target>] values in an env
lock: `apt_sha256` and `artifacts_sha256` of [targets.<name>], present exactly when what they
cover is. An edited pin (a downgrade, extra packages) or an edited artifact is refused when the
lock is read; `envbuilder lock` and every command that records an artifact write them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import sha256_bytes
from envbuilder.core.records import Field

_HEX64 = r"[0-9a-f]{64}"
_HEX64_FORM = "64 lower-case hex digits"

#: The digests that cover a target's apt pins and its [artifacts.<target>] values (table_sha256):
#: present exactly when what they cover is, written by `envbuilder lock` and every command that
#: records an artifact. Not fields of TargetLock: checked when a lock is read, computed when it
#: is written.
DIGEST_KEYS = (
    Field("apt_sha256", str, "the digest of apt", False, _HEX64, _HEX64_FORM),
    Field(
        "artifacts_sha256", str, "the digest of [artifacts.<target>]", False, _HEX64, _HEX64_FORM
    ),
)


def table_sha256(table: Mapping[str, Any]) -> str:
    """The digest of a table of the lock (a target's apt pins, its artifacts): sha256 of its
    canonical JSON (keys sorted, no spaces, UTF-8). docs/lock.md."""
    text = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_bytes(text.encode("utf-8"))


def check_digests(
    raw: Mapping[str, Any],
    targets: Mapping[str, Any],
    artifacts: Mapping[str, Mapping[str, str]],
    env: str,
    where: str,
    upgrade: bool,
) -> None:
    """Each target's apt pins and artifacts match the digest beside them (present exactly when
    they are): an edited pin (a downgrade, extra packages) or an edited artifact is refused."""
    fix = f"restore the file (`git checkout {where}`) or run `envbuilder lock --env {env}`"
    for name, entry in targets.items():
        covered = {"apt_sha256": entry.apt, "artifacts_sha256": artifacts.get(name, {})}
        for digest, table in covered.items():
            what = "apt pins" if digest == "apt_sha256" else f"[artifacts.{name}]"
            recorded = raw[name].get(digest)
            if not table and recorded is None:
                continue
            if recorded is None:
                if upgrade:
                    continue
                raise LockError(
                    f"{where}: targets.{name} has {what} but no {digest} (written by an older "
                    f"envbuilder, or edited); `envbuilder lock --env {env}` adds it without "
                    "resolving anything again"
                )
            if not table:
                raise LockError(
                    f"{where}: targets.{name}.{digest} is there but the {what} it covers are "
                    f"not (removed by hand?); {fix}"
                )
            if table_sha256(table) != recorded:
                raise LockError(
                    f"{where}: the {what} of targets.{name} do not match targets.{name}."
                    f"{digest} (edited after locking: a version, a package, a value changed). "
                    f"Nothing was changed; {fix}"
                )

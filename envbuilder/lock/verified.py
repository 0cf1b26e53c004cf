"""A target's pylock, verified: the one way builds, fetches and checks read it.

load_verified_lock(project, env, target, spec_hash) -> VerifiedLock   the env's lock (current
                                     unless spec_hash is None) and the target's pylock:
                                     present, matching its recorded sha256, well-formed
verify_pylock(project, env, target, entry) -> VerifiedPylock   the pylock alone
parse_pylock(data, where) -> dict    a pylock's TOML, checked where envbuilder reads it
                                     (PEP 751's keys, wheel names, hashes, markers)
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import read_input_bytes, sha256_bytes
from envbuilder.core.project import Project
from envbuilder.lock.lockfile import (
    EnvLock,
    TargetLock,
    load_env_lock,
    require_current,
)


@dataclass(frozen=True)
class VerifiedPylock:
    """A target's pylock as its lock recorded it: the file, its bytes (what was hashed) and its
    parsed content (checked by parse_pylock)."""

    env: str
    target: str
    entry: TargetLock
    path: Path
    data: bytes
    doc: Mapping[str, Any]


@dataclass(frozen=True)
class VerifiedLock:
    """An env's lock (current for the spec unless not asked) and one target's verified pylock."""

    lock: EnvLock
    pylock: VerifiedPylock


class PylockError(LockError):
    """A target's pylock is not what the lock recorded: not locked, missing, edited after
    locking, or malformed. `short` is the line `lock --check` prints."""

    def __init__(self, message: str, short: str) -> None:
        super().__init__(message)
        self.short = short


def verify_pylock(
    project: Project,
    env: str,
    target: str,
    entry: TargetLock | None,
) -> VerifiedPylock:
    """Read the pylock `entry` names (a bare name inside lockfiles/: read_env_lock checked it),
    check its sha256 against the entry and its content with parse_pylock. PylockError
    otherwise, saying which file, what is wrong and what to run."""
    lock_file = project.relative(project.env_lock(env))
    relock = f"`envbuilder lock --env {env}`"
    if entry is None:
        raise PylockError(
            f"env {env!r} is not locked for target {target!r} ({lock_file} has "
            f"no [targets.{target}]); run {relock} first",
            "target not locked",
        )
    path = project.lockfiles / entry.pylock
    name = project.relative(path)
    data = _read_pylock(path, name, f"{lock_file}, targets.{target}.pylock", relock)
    actual = sha256_bytes(data)
    if actual != entry.pylock_sha256:
        raise PylockError(
            f"{name} does not match the sha256 recorded in {lock_file} (targets.{target}."
            f"pylock_sha256 = {entry.pylock_sha256}; the file has {actual}): the pylock was "
            f"edited after locking. Nothing was changed. Restore it (`git checkout {name}`) or "
            f"lock again: {relock}",
            f"{name} was changed by hand (sha256 differs from the lock); run `envbuilder lock` "
            "to re-resolve it",
        )
    try:
        doc = parse_pylock(data, name)
    except LockError as exc:
        raise PylockError(
            f"{exc}. Its sha256 is the one {lock_file} records, so the lock was written or "
            f"edited with this content. Nothing was changed. Restore both files (`git checkout "
            f"lockfiles/`) or lock again: {relock}",
            f"{exc}; run `envbuilder lock` to re-resolve it",
        ) from None
    return VerifiedPylock(env, target, entry, path, data, doc)


def _read_pylock(path: Path, name: str, named_by: str, relock: str) -> bytes:
    """The pylock's bytes; PylockError when it is missing or cannot be read."""
    try:
        return read_input_bytes(path)
    except FileNotFoundError:
        raise PylockError(
            f"{name} is missing (named by {named_by}); run {relock}",
            f"{name} is missing",
        ) from None
    except OSError as exc:
        raise PylockError(
            f"{name} cannot be read ({exc.strerror}); check what is there and its permissions, "
            f"or lock again: {relock}",
            f"{name} cannot be read ({exc.strerror})",
        ) from None


def load_verified_lock(
    project: Project,
    env: str,
    target: str,
    spec_hash: str | None,
) -> VerifiedLock:
    """The env's lock and the target's verified pylock, for anything that builds from them.

    Refuses (LockError, nothing touched): an env never locked, a malformed lock, one naming
    files outside lockfiles/ or another env's lock (UntrustedLockError), a lock older than the
    spec (`spec_hash`, the env's hash now; None only for callers that checked it already), and
    a pylock that is missing, edited after locking or malformed (PylockError)."""
    lock = load_env_lock(project, env)
    if lock is None:
        raise LockError(
            f"env {env!r} is not locked (no {project.relative(project.env_lock(env))});"
            f" run `envbuilder lock --env {env}` first"
        )
    if spec_hash is not None:
        require_current(project, lock, spec_hash)
    return VerifiedLock(lock, verify_pylock(project, env, target, lock.targets.get(target)))


# --- a pylock's content, checked where envbuilder reads it --------------------------------------

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


def url_filename(url: str) -> str:
    """The (unquoted) file name at the end of a URL's path."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def _bad(where: str, key: str, want: str, value: object) -> LockError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return LockError(f"{where}: {key} must be {want}, not {shown}")


def parse_pylock(data: bytes, where: str) -> dict[str, Any]:
    """A pylock's bytes -> its TOML document, after checking every value envbuilder reads from
    it (package names, versions, markers and indexes; artifact URLs, hashes, sizes, upload
    times; wheel file names). LockError naming `where`, the key and what it must be. Keys
    envbuilder does not read are left alone (PEP 751 has many)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockError(
            f"{where}: not UTF-8 text (byte {exc.start} is {data[exc.start : exc.start + 1]!r})"
        ) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{where}: not valid TOML ({exc})") from None
    packages = doc.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, dict) for p in packages):
        raise _bad(where, "packages", "an array of tables ([[packages]])", packages)
    for i, package in enumerate(packages):
        _check_package(package, where, f"packages[{i}]")
    _check_pep751(doc, where)
    return doc


def _check_pep751(doc: dict[str, Any], where: str) -> None:
    """The rest of PEP 751's rules, as packaging.pylock reads them (lock-version, created-by,
    one source per package, ...); the checks above name the keys envbuilder itself reads."""
    from packaging.pylock import Pylock, PylockUnsupportedVersionError, PylockValidationError

    try:
        Pylock.from_dict(doc)
    except (PylockValidationError, PylockUnsupportedVersionError) as exc:
        raise LockError(f"{where}: not a valid PEP 751 lock file: {exc}") from None


def _check_package(package: Mapping[str, Any], where: str, key: str) -> None:
    name = package.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(where, f"{key}.name", "a package name", name)
    key = f"{key} ({name})"
    _check_package_values(package, where, key)
    wheels = package.get("wheels", [])
    if not isinstance(wheels, list) or not all(isinstance(w, dict) for w in wheels):
        raise _bad(where, f"{key}.wheels", "an array of tables", wheels)
    for j, wheel in enumerate(wheels):
        _check_artifact(wheel, where, f"{key}.wheels[{j}]", is_wheel=True)
    for kind in ("archive", "sdist"):
        if kind in package:
            art = package[kind]
            if not isinstance(art, dict):
                raise _bad(where, f"{key}.{kind}", "a table", art)
            is_wheel = kind == "archive" and str(art.get("url", "")).endswith(".whl")
            _check_artifact(art, where, f"{key}.{kind}", is_wheel=is_wheel)


def _check_package_values(package: Mapping[str, Any], where: str, key: str) -> None:
    """A package's version, marker and index (`key` names the package in messages)."""
    for field_name in ("version", "marker"):
        value = package.get(field_name)
        if value is not None and not isinstance(value, str):
            raise _bad(where, f"{key}.{field_name}", "a string", value)
    if isinstance(marker := package.get("marker"), str):
        try:
            Marker(marker)
        except InvalidMarker as exc:
            raise LockError(
                f"{where}: {key}.marker {marker!r} is not a PEP 508 marker: {exc}"
            ) from None
    index = package.get("index")  # the wheel cache may ask this URL for the package's files
    if index is not None and (
        not isinstance(index, str) or not index.startswith(("https://", "http://"))
    ):
        raise _bad(where, f"{key}.index", "the http(s) URL of the package's index", index)


_ARTIFACT_TYPES: dict[str, tuple[type, str]] = {
    "url": (str, "a string"),
    "path": (str, "a string"),
    "name": (str, "a string"),
    "size": (int, "an integer"),
    "upload-time": (datetime.datetime, "a date-time"),
}


def _check_artifact(art: Mapping[str, Any], where: str, key: str, *, is_wheel: bool) -> None:
    for field_name, (kind, want) in _ARTIFACT_TYPES.items():
        value = art.get(field_name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise _bad(where, f"{key}.{field_name}", want, value)
    if "url" not in art and "path" not in art:
        raise LockError(f"{where}: {key} has neither url nor path")
    hashes = art.get("hashes")
    if (
        not isinstance(hashes, dict)
        or not hashes
        or not all(isinstance(v, str) for v in hashes.values())
    ):
        raise _bad(where, f"{key}.hashes", 'a table like { sha256 = "<64 hex digits>" }', hashes)
    if "sha256" in hashes and not _SHA256.match(hashes["sha256"]):
        raise _bad(where, f"{key}.hashes.sha256", "64 lower-case hex digits", hashes["sha256"])
    if is_wheel:
        filename = art.get("name") or url_filename(str(art.get("url") or art.get("path")))
        try:
            parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            raise LockError(
                f"{where}: {key}: {filename!r} is not a wheel file name "
                f"(<name>-<version>-<python>-<abi>-<platform>.whl): {exc}"
            ) from None

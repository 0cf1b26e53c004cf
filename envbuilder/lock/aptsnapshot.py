"""Which snapshot archive apt reads in an image, for a base image and a lock's timestamp
(envbuilder/data/apt.toml, each entry with its source).

A locked image's apt installs the exact versions the lock pins (envbuilder.lock.apt). The
distribution's archive keeps only the newest version of each package, so a pin expires with the
next upload; a snapshot archive keeps every state. So envbuilder writes the snapshot's sources for
the moment the lock resolved its apt versions (`apt_epoch`, or `source_date_epoch` when the
lock records none: envbuilder.lock.lockfile.EnvLock.apt_snapshot_epoch) into the image before
apt runs (the rendered `apt-sources` step), and the container that resolves the apt versions at
lock time reads the same snapshot: every version the lock pins is one that snapshot serves. A
lock that keeps its apt pins keeps that moment, so a Python package's bump leaves the apt steps
of the image as they were (issue 31).

No snapshot (the base's own sources stay) when the base image has no entry, when its entry is
`verified = false`, or when the lock has no real timestamp (`source_date_epoch` is the zip epoch
1980-01-01: no locked file carries an upload time, and no snapshot archive goes back that far).

Where apt really goes is a machine's setting, not the image's: `ENVBUILDER_APT_PROXY` (an HTTP
proxy such as apt-cacher-ng, or the tests' replica of the snapshot archive on 127.0.0.1) is
handed to apt as its `http_proxy` at build and lock time only (envbuilder.core.imagedefs), so the
image and its history are the same with and without it.
"""

from __future__ import annotations

import datetime
import fnmatch
import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from envbuilder.core.errors import CompatDataError
from envbuilder.core.imagedefs import APT_PROXY_VAR

__all__ = ["APT_PROXY_VAR", "AptSources", "SnapshotEntry", "entry_for", "sources_for"]

#: The fallback source_date_epoch (envbuilder.lock.resolve): no snapshot is that old.
ZIP_EPOCH = 315532800


@dataclass(frozen=True)
class SnapshotEntry:
    """One row of data/apt.toml."""

    match: str
    distro: str
    codename: str
    url: str
    lines: tuple[str, ...]
    remove: tuple[str, ...]
    verified: bool
    source: str
    note: str


@dataclass(frozen=True)
class AptSources:
    """The sources an image's apt reads: `lines` for /etc/apt/sources.list, the base's own
    source files to remove, and what they are (for the rendered comment)."""

    lines: tuple[str, ...]
    remove: tuple[str, ...]
    timestamp: str  # YYYYMMDDTHHMMSSZ
    distro: str


def timestamp(epoch: int) -> str:
    """`source_date_epoch` as a snapshot archive names a moment: YYYYMMDDTHHMMSSZ (UTC)."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def _entry(row: Any, i: int) -> SnapshotEntry:
    where = f"data/apt.toml: snapshot[{i}]"
    try:
        entry = SnapshotEntry(
            match=str(row["match"]),
            distro=str(row["distro"]),
            codename=str(row["codename"]),
            url=str(row["url"]),
            lines=tuple(str(x) for x in row["lines"]),
            remove=tuple(str(x) for x in row["remove"]),
            verified=bool(row["verified"]),
            source=str(row["source"]),
            note=str(row.get("note", "")),
        )
    except (KeyError, TypeError) as exc:
        raise CompatDataError(f"{where}: missing or wrong key {exc}") from None
    if not entry.url.startswith("http://") or not entry.source:
        raise CompatDataError(f"{where}: url must be http:// and source must be given")
    return entry


@functools.cache
def entries() -> tuple[SnapshotEntry, ...]:
    """Every row of envbuilder/data/apt.toml, checked."""
    text = resources.files("envbuilder").joinpath("data/apt.toml").read_text(encoding="utf-8")
    rows = tomllib.loads(text).get("snapshot", [])
    return tuple(_entry(row, i) for i, row in enumerate(rows))


def entry_for(base_image: str) -> SnapshotEntry | None:
    """The data row for a base image reference (its digest is ignored), or None."""
    name = base_image.split("@", 1)[0]
    return next((e for e in entries() if fnmatch.fnmatchcase(name, e.match)), None)


def sources_for(base_image: str | None, epoch: int | None) -> AptSources | None:
    """The snapshot sources of an image on `base_image` locked at `epoch`, or None (see the
    module docstring for when there are none)."""
    if base_image is None or epoch is None or epoch <= ZIP_EPOCH:
        return None
    entry = entry_for(base_image)
    if entry is None or not entry.verified:
        return None
    stamp = timestamp(epoch)
    lines = tuple(line.format(url=entry.url, timestamp=stamp) for line in entry.lines)
    return AptSources(lines, entry.remove, stamp, entry.distro)


def shell_lines(sources: AptSources) -> list[str]:
    """The sh commands that point apt at `sources` (the lock-time resolver runs these; the
    rendered Dockerfile's step says the same)."""
    import shlex

    removes = [f"rm -f {shlex.quote(p)}" for p in sources.remove]
    body = " ".join(shlex.quote(line) for line in sources.lines)
    return [*removes, f"printf '%s\\n' {body} > /etc/apt/sources.list"]

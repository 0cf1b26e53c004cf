"""The folder of a venv target and envbuilder's marker in it: what a folder holds, whether
envbuilder made it (the marker proves it), claiming and emptying it, the lock a build holds on
it, and the marker's bytes and state."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envbuilder import __version__
from envbuilder.core.errors import BuildError
from envbuilder.core.fsutil import sha256_bytes
from envbuilder.core.project import Project, venv_folder
from envbuilder.core.statefile import StateFileError, read_state

MARKER = "envbuilder-venv.json"
MARKER_VERSION = 1
#: A marker is a few hundred bytes.
_MAX_MARKER_BYTES = 1 << 20
#: The marker's `state`: "complete" once a build finished; "incomplete" from the moment a build
#: starts changing the venv (an interrupted build leaves it so). A marker without `state` was
#: written by an envbuilder that wrote only complete markers.
COMPLETE, INCOMPLETE = "complete", "incomplete"

#: What the top folder of a venv holds (made by venv/uv/pip/envbuilder), compared in lower case
#: (Windows: Scripts, Lib, Include). Anything else (src/ of `pip install -e`, .git, a user's
#: file) is someone's data: a venv folder holding it is never emptied.
VENV_ENTRIES = frozenset(
    {
        "bin",
        "scripts",
        "lib",
        "lib64",
        "include",
        "share",
        "etc",
        "man",
        "pyvenv.cfg",
        ".gitignore",
        "cachedir.tag",
        ".lock",
        MARKER,
    }
)


FolderKind = Literal["absent", "empty", "ours", "foreign-venv", "other"]


@dataclass(frozen=True)
class VenvFolder:
    """What is at a venv's path before a build, and whether envbuilder may change it.

    kind: "absent" / "empty" (a venv may be made there), "ours" (a valid marker: envbuilder made
    it), "foreign-venv" (a venv without envbuilder's marker: only `--force` takes it over),
    "other" (a file, a link, or a folder that is not a venv: never changed).
    what: a phrase saying what `path` is, for messages ("<path> is <what>").
    strangers: top-level entries a venv does not hold (someone's data), sorted."""

    path: Path
    kind: FolderKind
    what: str
    strangers: tuple[str, ...] = ()


def _is_marker_temp(name: str) -> bool:
    """A temp file of an interrupted marker write (fsutil.atomic_write_bytes names them so)."""
    return name.startswith(f".{MARKER}.") and name.endswith(".tmp")


def _strangers(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        sorted(n for n in names if n.lower() not in VENV_ENTRIES and not _is_marker_temp(n))
    )


def _pyvenv_version(venv: Path) -> str | None:
    """The Python version a pyvenv.cfg names (`version` or `version_info`), if it says."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("version", "version_info"):
            return value.strip()
    return None


def marker_owns(marker: Mapping[str, Any], venv: Path) -> bool:
    """True when `marker` was written for the venv at `venv` (same path, or the same folder by
    another spelling). A marker naming another folder came with a copied or moved venv."""
    recorded = marker.get("venv")
    if not isinstance(recorded, str) or not recorded:
        return False
    if recorded == str(venv):
        return True
    try:
        return Path(recorded).samefile(venv)
    except OSError:
        return False


def _listing(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def inspect_folder(venv: Path) -> VenvFolder:
    """Look at what is at `venv` (reads only; follows no link). OSError when it cannot be read."""
    if venv.is_symlink():
        return VenvFolder(venv, "other", f"a symbolic link (to {venv.readlink()})")
    if not venv.exists():
        return VenvFolder(venv, "absent", "nothing")
    if not venv.is_dir():
        return VenvFolder(venv, "other", "a file, not a folder")
    names = sorted(p.name for p in venv.iterdir())
    if not [n for n in names if not _is_marker_temp(n)]:
        return VenvFolder(venv, "empty", "an empty folder")
    strangers = _strangers(names)
    # a marker that is a link proves nothing about this folder
    marker = None if (venv / MARKER).is_symlink() else read_marker(venv / MARKER)
    if marker is not None and marker_owns(marker, venv):
        return VenvFolder(venv, "ours", "a venv envbuilder made", strangers)
    if not (venv / "pyvenv.cfg").is_file():
        what = f"a folder that is not a venv (no pyvenv.cfg); it holds {_listing(names)}"
        return VenvFolder(venv, "other", what, strangers)
    version = _pyvenv_version(venv)
    what = f"a venv{f' of Python {version}' if version else ''} that envbuilder did not make"
    if marker is not None:
        what += (
            f" (its {MARKER} names another folder, {marker.get('venv')}: it was copied or moved)"
        )
    else:
        what += f" (no {MARKER})"
    if strangers:
        what += f", and it holds files a venv does not: {_listing(strangers)}"
    return VenvFolder(venv, "foreign-venv", what, strangers)


def claim_folder(venv: Path, force: bool) -> VenvFolder:
    """What is at `venv`, when envbuilder may build there; otherwise BuildError saying what is
    there and how to proceed, with nothing changed. `force` takes over a venv envbuilder did not
    make, only when its folder holds a venv and nothing else."""
    try:
        folder = inspect_folder(venv)
    except OSError as exc:  # e.g. a parent folder that cannot be read
        raise BuildError(
            f"cannot look at {venv}: {exc.strerror or exc}; nothing was changed. "
            f"Give another --path"
        ) from None
    if folder.kind in ("absent", "empty", "ours"):
        return folder
    head = (
        f"{venv} is {folder.what}. envbuilder changes only a venv it made itself (its "
        f"{MARKER} proves it), so nothing was changed"
    )
    if folder.kind == "other":
        raise BuildError(
            f"{head}. Give another --path (a new or empty folder); --force does not "
            f"apply: it only takes over a folder that holds a venv and nothing else"
        )
    if folder.strangers:
        raise BuildError(
            f"{head}. Give another --path, or move {_listing(folder.strangers)} out "
            f"and use --force to replace the venv (--force never deletes files that "
            f"are not part of a venv)"
        )
    if not force:
        raise BuildError(
            f"{head}. Use --force to replace that venv with a new one (the packages "
            f"installed in it are removed), or give another --path"
        )
    return folder


def strangers_message(venv: Path, strangers: Sequence[str]) -> str:
    """Why a venv that must be made again (wrong or broken Python) is not: its folder holds
    files a venv does not, which emptying it would delete."""
    return (
        f"the venv at {venv} must be made again (its Python is missing, broken or not the "
        f"one the env needs), but its folder also holds files a venv does not: "
        f"{_listing(strangers)}. Nothing was changed: move them out, or give another --path"
    )


def empty_venv_folder(venv: Path) -> None:
    """Remove everything in the venv folder `venv` but its marker, following no symbolic link out
    of it (a link is removed, never what it points to). Refuses, removing nothing, when the folder
    holds anything a venv does not (someone's data)."""
    try:
        names = sorted(p.name for p in venv.iterdir())
        if strangers := _strangers(names):
            raise BuildError(strangers_message(venv, strangers))
        for name in names:
            if name != MARKER:
                _remove_entry(venv / name)
    except OSError as exc:
        raise BuildError(f"cannot remove the old venv in {venv}: {exc}") from None


def _remove_entry(path: Path) -> None:
    """Remove one entry without following links: shutil.rmtree removes links inside a folder
    and never descends through them (nor through Windows junctions)."""
    is_junction = getattr(os.path, "isjunction", lambda _p: False)(path)
    if path.is_dir() and not path.is_symlink() and not is_junction:
        shutil.rmtree(path)
    elif is_junction:
        path.rmdir()  # removes the junction itself, never its target's content
    else:
        path.unlink()


def venv_lock_path(project: Project, venv: Path) -> Path:
    """The lock a build holds on the venv at `venv` (and hands to the uv it starts), in the
    cache: a file inside the venv would go when the venv is re-created, one beside it would
    be written into the user's folder."""
    key = sha256_bytes(os.path.realpath(venv).encode("utf-8", "surrogateescape"))[:32]
    return project.cache / "locks" / f"venv-{key}.lock"


def busy_message(venv: Path) -> str:
    return (
        f"the venv at {venv} is being changed by another `envbuilder build`, or by the uv "
        "of an earlier build that was killed (uv goes on until it is done); nothing was "
        "changed. Wait until it ends and build again (`fuser` on the lock file in the cache's "
        "locks/ folder names the process)"
    )


def default_venv_path(project: Project, env: str, target: str) -> Path:
    """The venv's folder when `--path` is not given: <project>/.envbuilder/venvs/<env>-<target>
    (gitignored)."""
    return project.root / venv_folder(env, target)


def marker_bytes(
    venv: Path,
    env: str,
    target: str,
    lock_sha256: str,
    python: str,
    packages: Mapping[str, str],
) -> bytes:
    """The marker of a finished build: sorted JSON, no timestamp (same build, same bytes)."""
    data = {
        "marker_version": MARKER_VERSION,
        "state": COMPLETE,
        "venv": str(venv),
        "env": env,
        "target": target,
        "lock_sha256": lock_sha256,
        "python": python,
        "envbuilder_version": __version__,
        "packages": dict(sorted(packages.items())),
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def incomplete_marker_bytes(venv: Path, env: str, target: str) -> bytes:
    """The marker written before a build changes the venv: it still proves envbuilder owns the
    folder, and says the venv is not (yet) what any lock describes."""
    data = {
        "marker_version": MARKER_VERSION,
        "state": INCOMPLETE,
        "venv": str(venv),
        "env": env,
        "target": target,
        "envbuilder_version": __version__,
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def marker_state(marker: Mapping[str, Any]) -> str:
    """ "complete" or "incomplete" (a marker of an older envbuilder has no state: complete)."""
    return INCOMPLETE if marker.get("state", COMPLETE) != COMPLETE else COMPLETE


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's content, or None when it is missing or unreadable (then the venv is synced)."""
    try:  # statefile: a FIFO, a link, a huge or deeply nested marker is no marker
        data = read_state(path, _MAX_MARKER_BYTES, "json", "")
    except StateFileError:
        return None
    return data if isinstance(data, dict) and data.get("marker_version") == MARKER_VERSION else None

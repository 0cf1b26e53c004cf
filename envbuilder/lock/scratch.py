"""A scratch copy of a project: where `build --repin-base-into DIR` re-pins a base image that this
engine's registry does not serve, so the committed lock is never rewritten without a command that
says so (docs/docker.md, "First command").

The copy holds the spec, `lockfiles/` and the rendered folders, and a marker file
(`.envbuilder-scratch.json`) naming the folder, the project it was copied from and the envs whose
base the last build re-pinned there. Only a folder whose marker names that very folder is ever
replaced; anything else at the path is refused with nothing changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from envbuilder.core.errors import BuildError
from envbuilder.core.fsutil import atomic_write_text
from envbuilder.core.project import Project
from envbuilder.core.statefile import StateFileError, read_state
from envbuilder.targets import registry

MARKER = ".envbuilder-scratch.json"
#: The rendered folders beside the spec besides the descriptors' (validate --slurm's scripts).
EXTRA_FOLDERS = ("slurm",)


def scratch_path(project: Project, value: Path) -> Path:
    """Where `--repin-base-into VALUE` puts the copy: VALUE, relative to the project's folder."""
    return value if value.is_absolute() else project.root / value


def read_marker(dest: Path) -> dict[str, Any] | None:
    """The marker of an envbuilder scratch copy at `dest` (None: none, or not one naming dest)."""
    path = dest / MARKER
    if path.is_symlink() or not path.is_file():
        return None
    try:  # statefile: a FIFO, a huge or deeply nested marker is no marker
        marker = read_state(path, 1 << 20, "json", "")
    except StateFileError:
        return None
    if not isinstance(marker, dict) or marker.get("path") != str(dest.resolve()):
        return None
    return marker


def repinned_envs(dest: Path) -> list[str]:
    """The envs whose base the last build re-pinned in the scratch copy at `dest`."""
    marker = read_marker(dest)
    envs = marker.get("repinned", []) if marker else []
    return [e for e in envs if isinstance(e, str)]


def _folders(project: Project) -> list[str]:
    names = {d.output_dir for d in registry.all() if d.output_dir}
    return sorted({*names, *EXTRA_FOLDERS, project.lockfiles.name})


def make_scratch(project: Project, dest: Path) -> Project:
    """A fresh scratch copy of `project` at `dest` (replacing an earlier one, proven by its
    marker). BuildError, with nothing changed, when `dest` holds anything else."""
    if dest.resolve() == project.root.resolve():
        raise BuildError(f"--repin-base-into {dest}: that is the project itself")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise BuildError(f"--repin-base-into {dest}: a file or link is there; choose another path")
    if dest.is_dir() and any(dest.iterdir()):
        if read_marker(dest) is None:
            raise BuildError(
                f"--repin-base-into {dest}: the folder holds files envbuilder did not put there "
                f"(no {MARKER} naming it); nothing was changed: choose an empty or new folder"
            )
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(project.spec_path, dest / project.spec_path.name)
    for name in _folders(project):
        source = project.root / name
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, dest / name, symlinks=True)
    write_marker(dest, project, [])
    return Project.from_spec(dest / project.spec_path.name, cache=project.cache)


def write_marker(dest: Path, project: Project, repinned: list[str]) -> None:
    """(Re)write the scratch copy's marker: its path, its origin, the envs re-pinned in it."""
    marker = {
        "made_by": "envbuilder build --repin-base-into",
        "path": str(dest.resolve()),
        "copied_from": str(project.root.resolve()),
        "repinned": sorted(set(repinned)),
    }
    atomic_write_text(dest / MARKER, json.dumps(marker, indent=2) + "\n")


def forget_env(dest: Path, env: str) -> None:
    """The last build of `env` needed no re-pin: the scratch copy no longer stands for it."""
    marker = read_marker(dest)
    if marker is None or env not in marker.get("repinned", []):
        return
    marker["repinned"] = [e for e in marker["repinned"] if e != env]
    atomic_write_text(dest / MARKER, json.dumps(marker, indent=2) + "\n")

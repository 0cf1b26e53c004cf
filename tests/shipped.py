"""The shipped project's committed parts, named the way envbuilder names them: the rendered
targets' output folders come from the target registry and the per-env extras from what
`envbuilder render` passes (slurm/), so that a test's copy of the project never lags behind a new
target or a new rendered folder (a copy without one makes `render --check` fail)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from envbuilder.builders.devcontainer import DEVCONTAINERS
from envbuilder.core.project import Project
from envbuilder.slurm.script import SCRIPTS
from envbuilder.targets import registry

REPO = Path(__file__).resolve().parents[1]
SPEC = "environments.toml"
LOCKFILES = "lockfiles"


def rendered_folders() -> tuple[str, ...]:
    """The committed folders `envbuilder render` writes: each rendered target's output folder,
    then the extras' (e.g. ("dockerfiles", "wsl", "windows", "slurm"))."""
    project = Project(root=REPO, spec_path=REPO / SPEC, cache=REPO / ".unused-cache")
    folders = [d.output_dir for d in registry.all() if d.rendered and d.output_dir is not None]
    folders.append(SCRIPTS.root(project).relative_to(REPO).as_posix())
    folders.append(DEVCONTAINERS.root(project).relative_to(REPO).as_posix())
    return tuple(dict.fromkeys(folders))


def project_parts() -> tuple[str, ...]:
    """Everything a copy of the shipped project needs: the spec, the locks, the rendered files."""
    return (SPEC, LOCKFILES, *rendered_folders())


def copy_shipped(dest: Path, parts: Iterable[str] | None = None) -> Path:
    """Copy `parts` (default: project_parts()) of the repository's project into `dest` (made
    if missing); returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in project_parts() if parts is None else parts:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        else:
            shutil.copy(src, dest / name)
    return dest

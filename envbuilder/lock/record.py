"""Recording what a build made in the env's lock: `record_artifact` merges values into
[artifacts.<target>], atomically and serialised between processes, never writing what the
reader would refuse; the spec hash is not touched (`lock --check` ignores artifacts)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import exclusive
from envbuilder.core.project import Project
from envbuilder.lock import artifacts as artifactlock
from envbuilder.lock.lockfile import load_env_lock, write_env_lock


@contextlib.contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """Serialize read-modify-write of lock files between processes (builds running side by
    side record artifacts of different targets)."""
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder):
        yield


def record_artifact(project: Project, env: str, target: str, **values: str) -> None:
    """Merge `values` into `artifacts.<target>` of the env's lock (atomic; spec hash untouched).

    Raises LockError when the env or that target was never locked."""
    if not values:
        return
    bad = [k for k, v in values.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"artifact values must be strings: {', '.join(bad)}")
    with _exclusive(project.lockfiles):
        lock = load_env_lock(project, env)
        if lock is None or target not in lock.targets:
            raise LockError(
                f"env {env!r} target {target!r} is not locked; "
                f"run `envbuilder lock --env {env}` first"
            )
        artifacts = {k: dict(v) for k, v in lock.artifacts.items()}
        artifacts.setdefault(target, {}).update(values)
        where = project.relative(project.env_lock(env))
        # never write what reads refuse
        artifactlock.parse_artifacts(artifacts, lock.targets, where)
        write_env_lock(project, replace(lock, artifacts=artifacts))

"""The Docker build context of one env and target, laid out as the build-context contract says:

    Dockerfile                     copy of the rendered Dockerfile
    envbuilder/pylock.toml         the env's pylock for that target
    envbuilder/requirements.txt    one hash-pinned line per locked artifact
    (envbuilder.lock.wheelcache) envbuilder/wheels/<filename>   the locked artifacts from the host
    wheel cache (hash-verified) envbuilder/ca.crt              optional extra CA bundle (build stage
    only) envbuilder/<conf files>        wsl2 only: wsl.conf, wsl-distribution.conf, oobe.sh

The Dockerfile's build stage copies `envbuilder/` to /tmp/envbuilder/ and installs offline from
it; the final stage copies only the venv, so nothing here reaches the final image.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from envbuilder.core.errors import BuildError, LockError
from envbuilder.core.fsutil import temp_dir, write_error
from envbuilder.core.model import Index
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project

#: Rendered files, besides the Dockerfile, that go into `envbuilder/` (wsl2 images).
EXTRA_FILES = ("wsl.conf", "wsl-distribution.conf", "oobe.sh")
CA_BUNDLE_ENV = "ENVBUILDER_CA_BUNDLE"


def ca_bundle_path(spec_value: str | None, project: Project) -> Path | None:
    """The extra CA bundle to trust at build time: the spec's value (relative to the spec's
    folder), else $ENVBUILDER_CA_BUNDLE, else None. Raises BuildError when it does not exist."""
    value = spec_value or os.environ.get(CA_BUNDLE_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = project.root / path
    if not path.is_file():
        source = "the spec" if spec_value else f"${CA_BUNDLE_ENV}"
        raise BuildError(
            f"the CA bundle {path} (from {source}) does not exist; give the path of a PEM file"
        )
    return path


def assemble_context(
    project: Project,
    env: str,
    target: str,
    dockerfile_dir: Path,
    progress: ProgressFn = no_progress,
    *,
    indexes: Mapping[str, Index],
    ca_bundle: Path | None = None,
) -> Path:
    """Lay out a fresh temp dir as the build context of `env` for `target`; return its path.
    `indexes`: the env's named indexes (EnvSpec.indexes), whose mirrors the wheel cache tries.

    The folder lies in the project's cache folder; the caller removes it (shutil.rmtree).
    Prefer `assembled()`, which removes it however the block ends.
    Wheels come from the host wheel cache (downloaded once by sha256, verified) and are
    hard-linked.
    Raises BuildError/LockError saying which command produces a missing input.
    """
    inputs = _inputs(project, env, target, dockerfile_dir, indexes, ca_bundle)
    context = Path(tempfile.mkdtemp(prefix=f"context-{env}-{target}-", dir=project.cache))
    try:
        _fill(inputs, context, progress)
    except BaseException:
        shutil.rmtree(context, ignore_errors=True)
        raise
    return context


@contextlib.contextmanager
def assembled(
    project: Project,
    env: str,
    target: str,
    dockerfile_dir: Path,
    progress: ProgressFn = no_progress,
    *,
    indexes: Mapping[str, Index],
    ca_bundle: Path | None = None,
) -> Iterator[Path]:
    """`assemble_context` for a with-block: the context folder is removed when the block ends
    in any way, and an interrupt at any moment cannot leave it behind (fsutil.temp_dir)."""
    inputs = _inputs(project, env, target, dockerfile_dir, indexes, ca_bundle)
    with temp_dir(f"context-{env}-{target}-", project.cache) as context:
        _fill(inputs, context, progress)
        yield context


@dataclass(frozen=True)
class _ContextInputs:
    """What goes into one build context: the rendered Dockerfile (its folder holds the extra
    files), the pylock, the indexes whose mirrors the wheel cache tries, the CA bundle."""

    project: Project
    env: str
    target: str
    dockerfile: Path
    pylock: Path
    indexes: Mapping[str, Index]
    ca_bundle: Path | None


def _inputs(
    project: Project,
    env: str,
    target: str,
    dockerfile_dir: Path,
    indexes: Mapping[str, Index],
    ca_bundle: Path | None,
) -> _ContextInputs:
    """The context's inputs, the Dockerfile and the pylock checked present (BuildError/LockError
    naming the command that makes a missing one); the cache folder is made, since the context
    lies beside the wheel cache so that the wheels are hard-linked rather than copied."""
    dockerfile = dockerfile_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise BuildError(f"{dockerfile} does not exist; run `envbuilder render --env {env}` first")
    pylock = project.pylock(env, target)
    if not pylock.is_file():
        raise LockError(f"{pylock} does not exist; run `envbuilder lock --env {env}` first")
    try:
        project.cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(project.cache, exc, "create") from None
    return _ContextInputs(project, env, target, dockerfile, pylock, indexes, ca_bundle)


def _fill(inputs: _ContextInputs, context: Path, progress: ProgressFn) -> None:
    from envbuilder.lock import wheelcache  # the lock helper's module; imported where it is needed

    inner = context / "envbuilder"
    inner.mkdir()
    shutil.copyfile(inputs.dockerfile, context / "Dockerfile")
    shutil.copyfile(inputs.pylock, inner / "pylock.toml")
    for name in EXTRA_FILES:
        extra = inputs.dockerfile.parent / name
        if extra.is_file():
            shutil.copyfile(extra, inner / name)
    wheelcache.write_wheelhouse(
        inputs.project,
        inputs.env,
        inputs.target,
        inner,
        progress=progress,
        indexes=inputs.indexes,
    )
    if inputs.ca_bundle is not None:
        shutil.copyfile(inputs.ca_bundle, inner / "ca.crt")


def context_digest(context: Path) -> str:
    """sha256 over what decides the image's content: every file's path and content hash,
    except the CA bundle (a build-time trust setting, not content). Equal digests, equal images.

    Wheels are named by requirements.txt with their sha256, so they are not read again.
    """
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        rel = path.relative_to(context).as_posix()
        if rel == "envbuilder/ca.crt" or rel.startswith("envbuilder/wheels/"):
            continue
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()

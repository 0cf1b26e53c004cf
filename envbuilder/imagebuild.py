"""Build an image from a rendered folder (dockerfiles/<env>/ or wsl/<env>/): assemble the build
context, skip the build when an image with the same context digest already has the tag, else
build it with the engine. The docker and wsl2 targets both build this way.

With `deterministic` (both targets pass it), the engine's image is tagged
`envbuilder-engine/...` (its layer cache) and the tag names the image envbuilder writes from it,
whose id depends only on the lock and the base image's digest (envbuilder.repro,
docs/reproducibility.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuilder import aptlock, buildcontext, docker_engine, repro
from envbuilder.errors import BuildError
from envbuilder.imagedefs import CONTEXT_LABEL, needs_host_network
from envbuilder.model import Index
from envbuilder.ociimage.writer import REPRO_FORMAT, REPRO_LABEL
from envbuilder.progress import ProgressFn
from envbuilder.project import Project


def build_rendered_image(
    client: Any,
    project: Project,
    env: str,
    target: str,
    rendered: Path,
    *,
    tag: str,
    labels: Mapping[str, str],
    build_args: Mapping[str, str],
    progress: ProgressFn,
    ca_bundle: Path | None,
    indexes: Mapping[str, Index],
    nocache: bool = False,
    deterministic: repro.Deterministic | None = None,
) -> tuple[str, bool]:
    """Build `rendered` as `tag` (or find it up to date: the tag's image carries this context's
    digest). `labels` are added to the context label; `indexes` are the env's named indexes
    (EnvSpec.indexes: their mirrors are where the wheel cache looks first). Returns (image id,
    whether a build ran). The assembled context is removed in every case, an interrupt
    included."""
    progress(f"{env}/{target}: assembling the build context", 0, None)
    with buildcontext.assembled(
        project, env, target, rendered, progress, indexes=indexes, ca_bundle=ca_bundle
    ) as context:
        if deterministic is not None:
            repro.normalize_context_modes(context)
        digest = buildcontext.context_digest(context)
        current = None if nocache else docker_engine.existing_image(client, tag)
        if (
            current is not None
            and current.labels.get(CONTEXT_LABEL) == digest
            and (deterministic is None or current.labels.get(REPRO_LABEL) == REPRO_FORMAT)
        ):
            progress(f"{env}/{target}: {tag} is up to date", 1, 1)
            return str(current.id), False
        build_tag = tag if deterministic is None else repro.engine_tag(tag)
        try:
            image_id = docker_engine.build_image(
                client,
                context,
                build_tag,
                {CONTEXT_LABEL: digest, **labels},
                dict(build_args),
                progress,
                nocache=nocache,
                network_mode="host" if needs_host_network(build_args) else None,
            )
        except BuildError as exc:  # a locked apt version the archive no longer serves
            raise aptlock.explain_build_failure(exc, env, target) from None
        if deterministic is not None:
            progress(f"{env}/{target}: writing the reproducible image", 0, None)
            image_id = repro.write_deterministic(
                client, image_id, tag, deterministic, project.cache, progress
            )
        return image_id, True

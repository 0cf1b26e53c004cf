"""Build an image from a rendered folder (dockerfiles/<env>/ or wsl/<env>/): assemble the build
context, skip the build when an image with the same context digest already has the tag, else
build it with the engine. The docker and wsl2 targets both build this way."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuilder import buildcontext, docker_engine
from envbuilder.imagedefs import CONTEXT_LABEL, needs_host_network
from envbuilder.model import Index
from envbuilder.progress import ProgressFn
from envbuilder.project import Project


def build_rendered_image(
    client: Any, project: Project, env: str, target: str, rendered: Path, *, tag: str,
    labels: Mapping[str, str], build_args: Mapping[str, str], progress: ProgressFn,
    ca_bundle: Path | None, indexes: Mapping[str, Index], nocache: bool = False,
) -> tuple[str, bool]:
    """Build `rendered` as `tag` (or find it up to date: the tag's image carries this context's
    digest). `labels` are added to the context label; `indexes` are the env's named indexes
    (EnvSpec.indexes: their mirrors are where the wheel cache looks first). Returns (image id,
    whether a build ran). The assembled context is removed in every case, an interrupt
    included."""
    progress(f"{env}/{target}: assembling the build context", 0, None)
    with buildcontext.assembled(project, env, target, rendered, progress,
                                indexes=indexes, ca_bundle=ca_bundle) as context:
        digest = buildcontext.context_digest(context)
        current = None if nocache else docker_engine.existing_image(client, tag)
        if current is not None and current.labels.get(CONTEXT_LABEL) == digest:
            progress(f"{env}/{target}: {tag} is up to date", 1, 1)
            return str(current.id), False
        image_id = docker_engine.build_image(
            client, context, tag, {CONTEXT_LABEL: digest, **labels}, dict(build_args), progress,
            nocache=nocache, network_mode="host" if needs_host_network(build_args) else None,
        )
        return image_id, True

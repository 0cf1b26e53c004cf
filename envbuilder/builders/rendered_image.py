"""Build an image from a rendered folder (dockerfiles/<env>/ or wsl/<env>/): assemble the build
context, skip the build when an image with the same context digest already has the tag, else
build it with the engine. The docker and wsl2 targets both build this way.

With `deterministic` (both targets pass it), the engine's image is tagged
`envbuilder-engine/...` (its layer cache) and the tag names the image envbuilder writes from it,
whose id depends only on the lock and the base image's digest (envbuilder.image.repro,
docs/reproducibility.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envbuilder.builders import context as buildcontext
from envbuilder.core.errors import BuildError, EngineError
from envbuilder.core.imagedefs import CONTEXT_LABEL, needs_host_network
from envbuilder.core.model import Index
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.image import engine, repro
from envbuilder.image.oci.writer import REPRO_FORMAT, REPRO_LABEL
from envbuilder.lock import apt


@dataclass(frozen=True)
class RenderedBuild:
    """One build of a rendered folder: the env's `target` folder `rendered`, tagged `tag`.
    `labels` are added to the context label; `indexes` are the env's named indexes
    (EnvSpec.indexes: their mirrors are where the wheel cache looks first)."""

    env: str
    target: str
    rendered: Path
    tag: str
    labels: Mapping[str, str]
    build_args: Mapping[str, str]
    ca_bundle: Path | None
    indexes: Mapping[str, Index]
    nocache: bool = False
    deterministic: repro.Deterministic | None = None


def build_rendered_image(
    client: engine.Client, project: Project, build: RenderedBuild, progress: ProgressFn
) -> tuple[str, bool]:
    """Build `build.rendered` as `build.tag` (or find it up to date: the tag's image carries
    this context's digest). Returns (image id, whether a build ran). The assembled context is
    removed in every case, an interrupt included."""
    env, target = build.env, build.target
    progress(f"{env}/{target}: assembling the build context", 0, None)
    with buildcontext.assembled(
        project,
        env,
        target,
        build.rendered,
        progress,
        indexes=build.indexes,
        ca_bundle=build.ca_bundle,
    ) as context:
        if build.deterministic is not None:
            repro.normalize_context_modes(context)
        digest = buildcontext.context_digest(context)
        current = _up_to_date_image(client, build, digest)
        if current is not None:
            progress(f"{env}/{target}: {build.tag} is up to date", 1, 1)
            return current, False
        image_id = _engine_build(client, context, build, digest, progress)
        if build.deterministic is not None:
            progress(f"{env}/{target}: writing the reproducible image", 0, None)
            image_id = repro.write_deterministic(
                client, image_id, build.tag, build.deterministic, project.cache, progress
            )
        return image_id, True


def _up_to_date_image(client: engine.Client, build: RenderedBuild, digest: str) -> str | None:
    """The id of the tag's image when it was built from this context (and, for a
    deterministic build, written in the current reproducible format)."""
    current = None if build.nocache else engine.existing_image(client, build.tag)
    if (
        current is not None
        and current.labels.get(CONTEXT_LABEL) == digest
        and (build.deterministic is None or current.labels.get(REPRO_LABEL) == REPRO_FORMAT)
    ):
        return str(current.id)
    return None


def _engine_build(
    client: engine.Client, context: Path, build: RenderedBuild, digest: str, progress: ProgressFn
) -> str:
    build_tag = build.tag if build.deterministic is None else repro.engine_tag(build.tag)
    try:
        return engine.build_image(
            client,
            context,
            build_tag,
            {CONTEXT_LABEL: digest, **build.labels},
            dict(build.build_args),
            progress,
            nocache=build.nocache,
            network_mode="host" if needs_host_network(build.build_args) else None,
        )
    except BuildError as exc:  # a locked apt version the archive no longer serves
        raise apt.explain_build_failure(exc, build.env, build.target) from None


def image_dpkg_status(client: engine.Client, image: str | None) -> bytes | None:
    """/var/lib/dpkg/status of the engine's image `image` (its id or tag), copied out of a
    created container, for the SBOM's deb purls (the docker image, the wsl2 rootfs image the
    `.wsl` is exported from); None when there is none or the engine cannot give it (the SBOM
    then says the lock's arch: docs/sbom.md)."""
    if not image:
        return None
    from envbuilder.lock.sbom import DPKG_STATUS

    try:
        return engine.image_files(client, image, [DPKG_STATUS]).get(DPKG_STATUS)
    except EngineError:
        return None

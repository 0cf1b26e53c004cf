"""Reproducible images for the image targets (docker, wsl2): the glue between a build, the lock
and the deterministic writer (envbuilder.image.oci).

    Deterministic(base, source_date_epoch)     what the written image depends on besides the
                                               build context (both from the lock)
    write_deterministic(...)                   after the engine's build: write the image, tag it
    Prediction                                 what the lock records after a build, in
                                               [artifacts.<target>]: image_id (the config
                                               digest), layers (diff_ids above the base),
                                               repro_format (envbuilder.image.oci's format)
    check_prediction(...)                      `build --verify`: BuildError naming the first
                                               differing layer and file
    status_lines(...)                          `pull` / `validate`: is the image at hand the one
                                               the lock predicts?

The engine's own image (with its layer cache) stays tagged `envbuilder-engine/...`, so the next
build of a changed lock reuses the unchanged steps; the tag users see names the written image.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuilder.core.errors import BuildError, EngineError
from envbuilder.core.progress import ProgressFn, byte_size, no_progress
from envbuilder.image import engine
from envbuilder.image.oci.blobs import digest_bytes
from envbuilder.image.oci.diff import describe_difference
from envbuilder.image.oci.loadarchive import image_manifest, saved_layers
from envbuilder.image.oci.saved import read_saved
from envbuilder.image.oci.writer import (
    REPRO_FORMAT,
    REPRO_LABEL,
    WrittenImage,
    expected_id,
    image_store,
    open_save_stream,
    write_image,
)

if TYPE_CHECKING:
    from envbuilder.image.engine import Client

#: Repository prefix of the images the engine built (kept for its layer cache).
ENGINE_PREFIX = "envbuilder-engine/"
#: Keys of [artifacts.<target>] this module writes (image_id is shared with the targets).
IMAGE_ID, LAYERS, FORMAT = "image_id", "layers", "repro_format"
#: The digest of the manifest envbuilder writes for the image (its id in a containerd store).
MANIFEST = "manifest_digest"

#: The images this process wrote: engine id -> (config digest, manifest digest). An engine with
#: the containerd store names an image by its manifest's digest and shows no config digest; a
#: classic one the other way round: what envbuilder wrote, it knows both of without a save.
_WRITTEN: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class Deterministic:
    """What the written image depends on besides the build context: the base image the
    Dockerfile starts FROM (the lock's pin; None: no base) and the lock's SOURCE_DATE_EPOCH."""

    base: str | None
    source_date_epoch: int


def engine_tag(tag: str) -> str:
    """Where the engine's own image of `tag` stays: `envbuilder/cpu:abc` ->
    `envbuilder-engine/envbuilder-cpu:abc`."""
    repository, _, name = tag.rpartition(":")
    if not repository or "/" in name:
        repository, name = tag, "latest"
    flat = re.sub(r"[^a-z0-9._-]+", "-", repository.lower()).strip("-._")
    return f"{ENGINE_PREFIX}{flat}:{name}"


def normalize_context_modes(context: Path) -> None:
    """Files of the build context 0644, folders 0755 (the wheels, hard links into the cache, are
    only read by pip): a COPY keeps the mode, which would otherwise follow the umask of
    whoever assembled the context."""
    for folder, dirs, files in os.walk(context):
        here = Path(folder)
        if here.relative_to(context).as_posix().startswith("envbuilder/wheels"):
            continue
        here.chmod(0o755)
        for name in files:
            path = here / name
            if not path.is_symlink():
                path.chmod(0o644)
        dirs.sort()


def new_layers_line(client: Client, repository: str, engine_id: str, written: WrittenImage) -> str:
    """How many of the written image's layers above its base are new against the engine's
    other images of `repository` (the env's earlier builds): what a push of it would send."""
    known = {
        d
        for image in engine.list_images(client, repository)
        if image.id != engine_id
        for d in image.diff_ids
    }
    new = [layer for layer in written.layers if layer.diff_id not in known]
    size = sum(layer.size for layer in new)
    total = sum(layer.size for layer in written.layers)
    if not known:
        return (
            f"{len(written.layers)} layers above the base ({byte_size(total)}); no earlier "
            f"image of {repository} here"
        )
    return (
        f"{len(new)} of {len(written.layers)} layers above the base are new against the "
        f"earlier images of {repository} here: {byte_size(size)} of {byte_size(total)}"
    )


def write_deterministic(
    client: Client,
    engine_image: str,
    tag: str,
    inputs: Deterministic,
    workdir: Path,
    progress: ProgressFn = no_progress,
) -> str:
    """Write the deterministic image of `engine_image` (see envbuilder.image.oci.writer), tag it
    `tag`, return its id."""
    written = write_image(
        client,
        engine_image,
        base=inputs.base,
        source_date_epoch=inputs.source_date_epoch,
        workdir=workdir,
        progress=progress,
    )
    engine_id = written.engine_id  # the writer asked the engine for its image store already
    _WRITTEN[engine_id] = (written.image_id, written.manifest_digest)
    repository, _, name = tag.rpartition(":")
    progress(new_layers_line(client, repository, engine_id, written), 0, None)
    engine.tag_image(client, engine_id, repository, name)
    return engine_id


# ----------------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Prediction:
    """The image a lock predicts: its id (sha256 of its config), the diff_ids of its layers
    above the base image, the format of the writer that made it, and the digest of the manifest
    envbuilder writes for it ("" when not known: a lock recorded before it was)."""

    image_id: str
    layers: tuple[str, ...]
    format: str = REPRO_FORMAT
    manifest_digest: str = ""

    def artifacts(self) -> dict[str, str]:
        """The [artifacts.<target>] values that record it."""
        values = {IMAGE_ID: self.image_id, LAYERS: " ".join(self.layers), FORMAT: self.format}
        if self.manifest_digest:
            values[MANIFEST] = self.manifest_digest
        return values

    def engine_id(self, store: str) -> str:
        """The id an engine with image store `store` gives this image ("" when the lock does
        not record the digest that store uses)."""
        return expected_id(self.image_id, self.manifest_digest, store)

    @classmethod
    def from_artifacts(cls, values: Mapping[str, str]) -> Prediction | None:
        """The prediction an [artifacts.<target>] table records; None when it records none
        (nothing built, or built before images were written deterministically)."""
        if not values.get(FORMAT) or not values.get(IMAGE_ID):
            return None
        layers = tuple(values.get(LAYERS, "").split())
        return cls(values[IMAGE_ID], layers, values[FORMAT], values.get(MANIFEST, ""))


def observe(
    client: Client, image: str, base: str | None, hint: Prediction | None = None
) -> Prediction:
    """The Prediction that describes `image` as the engine has it (`base`: the image it was
    built on, whose layers are not counted; when the engine lacks it, as after a pull, the
    recorded prediction `hint` says how many layers lie above it)."""
    found = engine.image_info(client, image)
    if found is None:
        raise EngineError(f"the engine has no image {image}")
    layers = found.diff_ids
    below = 0
    base_image = engine.image_info(client, base) if base else None
    if base_image is not None:
        below = len(base_image.diff_ids)
    elif hint is not None and len(hint.layers) <= len(layers):
        below = len(layers) - len(hint.layers)
    config, manifest = _digests(client, found.id, hint)
    return Prediction(config, layers[below:], found.labels.get(REPRO_LABEL, ""), manifest)


def _digests(client: Client, engine_id: str, hint: Prediction | None) -> tuple[str, str]:
    """(config digest, manifest digest) of the engine's image `engine_id`: known when this
    process wrote it or the lock records it under that id; else read from `docker save`."""
    if engine_id in _WRITTEN:
        return _WRITTEN[engine_id]
    store = image_store(client)
    if hint is not None and hint.manifest_digest and hint.engine_id(store) == engine_id:
        return hint.image_id, hint.manifest_digest
    return saved_digests(client, engine_id)


def saved_digests(client: Client, image: str) -> tuple[str, str]:
    """(config digest, envbuilder's manifest digest) of `image`, from its `docker save` (the
    whole image is read: the manifest names every layer's uncompressed size)."""
    with tempfile.TemporaryDirectory(prefix="digests-") as tmp:
        saved = read_saved(open_save_stream(client, image), lambda _d: False, Path(tmp), image)
    manifest = image_manifest(saved.config_bytes, saved_layers(saved))
    return digest_bytes(saved.config_bytes), digest_bytes(manifest)


def recorded(lock_artifacts: Mapping[str, Mapping[str, str]], target: str) -> Prediction | None:
    """The prediction the lock's artifacts record for `target`, if any."""
    return Prediction.from_artifacts(lock_artifacts.get(target, {}))


def require_prediction(
    lock_artifacts: Mapping[str, Mapping[str, str]], target: str, env: str, lock_file: str
) -> Prediction:
    """The recorded prediction, for `build --verify`; BuildError saying how to record one."""
    found = recorded(lock_artifacts, target)
    if found is None:
        raise BuildError(
            f"{lock_file} records no image digest for {env}/{target} ([artifacts.{target}] "
            f"{IMAGE_ID}, {LAYERS}, {FORMAT}) to verify against; build once without --verify "
            f"(`envbuilder build --target {target} --env {env}`) and commit the lock"
        )
    if found.format != REPRO_FORMAT:
        raise BuildError(
            f"{lock_file} records the image of {env}/{target} in repro format {found.format}, "
            f"this envbuilder writes format {REPRO_FORMAT}: the digests are not comparable; "
            "build without --verify to record the new one"
        )
    return found


def check_prediction(
    client: Client,
    expected: Prediction,
    actual: Prediction,
    *,
    env: str,
    target: str,
    base: str | None,
    workdir: Path,
) -> None:
    """Nothing when `actual` is the image `expected` predicts; otherwise BuildError naming the
    first differing layer (its Dockerfile step) and, when the predicted image is on this
    engine, the first differing file."""
    if expected.image_id == actual.image_id:
        if expected.manifest_digest and expected.manifest_digest != actual.manifest_digest:
            raise BuildError(
                f"{env}/{target}: the rebuilt image has the predicted config "
                f"{actual.image_id}, but its manifest is {actual.manifest_digest}, not the "
                f"lock's {expected.manifest_digest}: a layer's size differs (the writer's "
                "format changed?). The lock is left as it was"
            )
        return
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="verify-", dir=workdir))
    try:
        store = image_store(client)  # the engine names the images by its store's digest
        detail = describe_difference(
            client,
            expected.engine_id(store) or expected.image_id,
            expected.layers,
            actual.engine_id(store),
            actual.layers,
            base=base,
            workdir=tmp,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    raise BuildError(
        f"{env}/{target}: the rebuilt image is {actual.image_id}, but the lock predicts "
        f"{expected.image_id}: {detail}. The lock is left as it was; the rebuilt image is "
        "tagged as the build's image, for inspection"
    )


def prediction_note(previous: Prediction | None, actual: Prediction) -> str:
    """How a plain build's image relates to what the lock recorded before it."""
    if previous is None:
        return "recorded"
    if previous.image_id == actual.image_id:
        if not previous.manifest_digest:
            return f"matches the lock (manifest digest {actual.manifest_digest} recorded)"
        return "matches the lock"
    return f"differs from the lock's {previous.image_id}"


def status_line(
    env: str,
    target: str,
    what: str,
    actual: str | None,
    expected: Prediction | None,
    store: str = "classic",
) -> tuple[bool, str]:
    """(ok, line) saying whether `what` (an image with the engine id `actual`, on an engine
    whose image store is `store`) is the one the lock predicts: a classic store's id is the
    config digest (the lock's image_id), a containerd store's the manifest digest."""
    if expected is None:
        return True, (
            f"{env}/{target}: the lock records no image digest (build to record "
            "one); nothing to compare"
        )
    if actual is None:
        return False, f"{env}/{target}: {what} is not on this engine"
    wanted = expected.engine_id(store)
    kind = "manifest" if store == "containerd" else "config"
    if not wanted:
        return False, (
            f"{env}/{target}: {what} {actual}: the lock records no {kind} digest, which this "
            f"engine's {store} image store names images by; build once to record it"
        )
    if actual == wanted:
        return True, (
            f"{env}/{target}: {what} {actual} is the image the lock predicts ({kind} digest, "
            f"{store} image store)"
        )
    return False, (
        f"{env}/{target}: {what} {actual} is NOT the image the lock predicts ({kind} digest "
        f"{wanted}, {store} image store)"
    )


def image_line(
    client: Client, env: str, target: str, tag: str, what: str, expected: Prediction | None
) -> tuple[bool, str]:
    """status_line for the engine's image `tag` (`what` names it in the line)."""
    image = engine.image_info(client, tag)
    actual = image.id if image is not None else None
    return status_line(env, target, what, actual, expected, image_store(client))


def image_report(target: object, project: object, env: object) -> list[tuple[bool, str]]:
    """(ok, line) for each image of `env` a target has (its `image_status`), none for targets
    without images."""
    status = getattr(target, "image_status", None)
    return list(status(project, env)) if status is not None else []

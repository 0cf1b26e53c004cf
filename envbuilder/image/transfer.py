"""Pushing and pulling an image target's image by digest: one helper for every target whose
artifact is (or is made from) an image in a registry (docker's image, wsl2's rootfs image).

A push uploads envbuilder's own manifest of the image with the registry API (not `docker push`,
which compresses the layers with the engine's gzip: its digest would depend on the engine), so
the repository digest is the lock's manifest_digest whichever engine pushed.

Both ways check the lock label (`org.envbuilder.lock-sha256`): a push sends only an image built
from the current lock, and a pull tags nothing unless the pulled image was built from it (and is
the image the lock recorded, when it recorded one).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from envbuilder.core.errors import LockError, RegistryError
from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.core.progress import ProgressFn, byte_size
from envbuilder.image import engine, engine_streams, engine_values, registry_api
from envbuilder.image.oci.blobs import digest_bytes
from envbuilder.image.oci.loadarchive import LayerBlob, image_manifest, saved_layers
from envbuilder.image.oci.saved import read_saved
from envbuilder.image.oci.writer import open_save_stream
from envbuilder.image.registry_api import OCI_MANIFEST
from envbuilder.image.repro import Prediction


def lock_mismatch(
    image: engine_values.ImageInfo, pylock_sha256: str, expected_id: str | None = None
) -> str | None:
    """Why `image` is not the lock's image (its lock label, then the id the lock predicts for
    this engine's image store), or None."""
    label = image.labels.get(LOCK_LABEL)
    if label != pylock_sha256:
        return (
            f"it was built from lock {label or '(no label)'}, but the pylock's sha256 "
            f"is {pylock_sha256}; build and push again, or check out the matching lock"
        )
    if expected_id and image.id != expected_id:
        return f"its image id {image.id} is not the recorded {expected_id}"
    return None


def push_locked(
    client: engine.Client,
    tag: str,
    repository: str,
    pylock_sha256: str,
    build_hint: str,
    progress: ProgressFn,
    workdir: Path,
) -> tuple[str, str]:
    """Push the local image `tag` (built from the pylock with that sha256) to `repository`,
    tagged with the lock's short hash, as envbuilder's own manifest (every layer uncompressed,
    envbuilder.image.oci.loadarchive), so that its digest is the lock's manifest_digest from
    every engine; returns (config digest, "HOST/REPO@sha256:<manifest digest>"). No local
    image, or one built from another lock, is a RegistryError (`build_hint`: how to build it).
    The image is read with `docker save` into a folder in `workdir`, removed afterwards."""
    image = engine.existing_image(client, tag)
    if image is None:
        raise RegistryError(f"no image {tag} to push; run `{build_hint}`")
    if problem := lock_mismatch(image, pylock_sha256):
        raise RegistryError(f"refusing to push {tag}: {problem}")
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="push-", dir=workdir) as tmp:
        saved = read_saved(open_save_stream(client, tag, progress), lambda _d: True, Path(tmp), tag)
        blobs = saved_layers(saved)
        manifest = image_manifest(saved.config_bytes, blobs)
        _upload(
            client, repository, pylock_sha256[:12], saved.config_bytes, blobs, manifest, progress
        )
    return digest_bytes(saved.config_bytes), f"{repository}@{digest_bytes(manifest)}"


def _upload(
    client: engine.Client,
    repository: str,
    tag: str,
    config: bytes,
    blobs: list[LayerBlob],
    manifest: bytes,
    progress: ProgressFn,
) -> None:
    host, _, name = repository.partition("/")
    registry = registry_api.registry_for(client, registry_api.DOCKER_HUB_API.get(host, host))
    registry.put_blob(name, config)
    sent_bytes = sent_layers = 0
    for n, blob in enumerate(blobs, 1):
        if blob.path is None:
            raise RegistryError(f"`docker save` of the image lacks its layer {blob.diff_id}")
        sent = registry.put_blob_file(name, blob.diff_id, blob.path)
        sent_layers, sent_bytes = sent_layers + sent, sent_bytes + (blob.size if sent else 0)
        status = "pushed" if sent else "already there"
        progress(
            f"layer {n}/{len(blobs)} {blob.diff_id[:19]} ({blob.size} B) {status}", n, len(blobs)
        )
    registry.put_manifest(name, tag, manifest, OCI_MANIFEST)
    total = sum(b.size for b in blobs)
    progress(
        f"pushed {sent_layers} of {len(blobs)} layers, {byte_size(sent_bytes)} new; the "
        f"registry had the other {byte_size(total - sent_bytes)}",
        0,
        None,
    )


def pushed_reference(recorded: dict[str, str], lock_path: str, push_hint: str) -> str:
    """The `repo_digest` a lock's artifacts record for a target, or a LockError saying how to
    push it (`push_hint`)."""
    ref = recorded.get("repo_digest")
    if not ref:
        raise LockError(
            f"{lock_path} records no pushed image (repo_digest in its [artifacts]); "
            f"run `{push_hint}` on the machine that built it"
        )
    return ref


def pulled_line(fetched: engine_streams.PullSummary) -> str:
    """What a pull fetched, for its progress: layers and bytes downloaded, layers at hand."""
    size = byte_size(fetched.fetched_bytes) if fetched.bytes_known else "size not reported"
    return f"fetched {fetched.fetched} layers ({size}); {fetched.present} layers were here already"


def pull_locked(
    client: engine.Client,
    ref: str,
    tag: str,
    pylock_sha256: str,
    expected: Prediction | None,
    progress: ProgressFn,
) -> str:
    """Pull `ref` by digest and tag it `tag` when it was built from the pylock (and is the
    image the lock predicts, when it predicts one: its config digest on a classic store or
    podman, its manifest digest on a containerd store); returns its id. A mismatch is a
    RegistryError and tags nothing."""
    image_id, fetched = engine.pull_image_counted(client, ref, progress)
    progress(pulled_line(fetched), 0, None)
    # By the reference pulled, not the bare id: a containerd store may still hold another
    # record under that id (the removed local image's), whose config it no longer shows.
    image = engine.image_info(client, ref)
    if image is None:
        raise RegistryError(f"pull of {ref} finished but the image {image_id} is not on the engine")
    wanted = expected.engine_id(engine.engine_info(client).image_store) if expected else None
    if problem := lock_mismatch(image, pylock_sha256, wanted):
        raise RegistryError(f"refusing {ref}: {problem}")
    repository, name = engine.split_reference(tag)
    engine.tag_image(client, image_id, repository, name or "latest")
    return image_id

"""Pushing and pulling an image target's image by digest: one helper for every target whose
artifact is (or is made from) an image in a registry (docker's image, wsl2's rootfs image).

Both ways check the lock label (`org.envbuilder.lock-sha256`): a push sends only an image built
from the current lock, and a pull tags nothing unless the pulled image was built from it (and is
the image the lock recorded, when it recorded one).
"""

from __future__ import annotations

from envbuilder.core.errors import LockError, RegistryError
from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.core.progress import ProgressFn
from envbuilder.image import engine


def lock_mismatch(
    image: engine.ImageInfo, pylock_sha256: str, recorded_id: str | None = None
) -> str | None:
    """Why `image` is not the lock's image (its lock label, then the recorded id), or None."""
    label = image.labels.get(LOCK_LABEL)
    if label != pylock_sha256:
        return (
            f"it was built from lock {label or '(no label)'}, but the pylock's sha256 "
            f"is {pylock_sha256}; build and push again, or check out the matching lock"
        )
    if recorded_id and image.id != recorded_id:
        return f"its image id {image.id} is not the recorded {recorded_id}"
    return None


def push_locked(
    client: engine.Client,
    tag: str,
    repository: str,
    pylock_sha256: str,
    build_hint: str,
    progress: ProgressFn,
) -> tuple[str, str]:
    """Push the local image `tag` (built from the pylock with that sha256) to `repository`,
    tagged with the lock's short hash; returns (image id, "HOST/REPO@sha256:..."). No local
    image, or one built from another lock, is a RegistryError (`build_hint`: how to build it)."""
    image = engine.existing_image(client, tag)
    if image is None:
        raise RegistryError(f"no image {tag} to push; run `{build_hint}`")
    if problem := lock_mismatch(image, pylock_sha256):
        raise RegistryError(f"refusing to push {tag}: {problem}")
    digest_ref = engine.push_image(client, tag, repository, pylock_sha256[:12], progress)
    return image.id, digest_ref


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


def pull_locked(
    client: engine.Client,
    ref: str,
    tag: str,
    pylock_sha256: str,
    recorded_id: str | None,
    progress: ProgressFn,
) -> str:
    """Pull `ref` by digest and tag it `tag` when it was built from the pylock (and is the
    recorded image, when one is recorded); returns its id. A mismatch is a RegistryError and
    tags nothing."""
    image_id = engine.pull_image(client, ref, progress)
    image = engine.image_info(client, image_id)
    if image is None:
        raise RegistryError(f"pull of {ref} finished but the image {image_id} is not on the engine")
    if problem := lock_mismatch(image, pylock_sha256, recorded_id):
        raise RegistryError(f"refusing {ref}: {problem}")
    repository, name = engine.split_reference(tag)
    engine.tag_image(client, image_id, repository, name or "latest")
    return image_id

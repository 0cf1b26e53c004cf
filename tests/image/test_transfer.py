"""The one push/pull helper of the image targets (envbuilder.image.transfer, issue 24): both ways
check the lock label, for docker's image and wsl2's rootfs image alike. Real engine, real
registry on 127.0.0.1: a one-layer image labelled with a made-up pylock sha256, built from the
seeded base."""

from __future__ import annotations

import contextlib
import io
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envbuilder.core.errors import LockError, RegistryError
from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.core.progress import no_progress
from envbuilder.image import engine, transfer
from envbuilder.image.repro import Prediction

SHA = "ab" * 32
OTHER = "cd" * 32


@pytest.fixture
def labelled(docker_client: Any) -> Iterator[str]:
    """A local image labelled as built from pylock SHA; its tag (removed afterwards)."""
    tag = f"envbuilder-test/imageregistry:{secrets.token_hex(4)}"
    dockerfile = f'FROM debian:bookworm-slim\nLABEL {LOCK_LABEL}="{SHA}"\n'
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    for name in docker_client.images.get(tag).tags:  # the test's own tags of it, pushed ones too
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(name, force=True)


def test_push_refuses_an_image_built_from_another_lock(
    docker_client: Any, registry: str, labelled: str, tmp_path: Path
) -> None:
    repository = engine.registry_repository(f"{registry}/envbuilder-test", "imgreg")
    with pytest.raises(RegistryError, match=rf"refusing to push {labelled}: .* built from lock"):
        transfer.push_locked(
            docker_client, labelled, repository, OTHER, "build it", no_progress, tmp_path
        )
    with pytest.raises(RegistryError, match=r"no image .*:missing to push; run `build it`"):
        transfer.push_locked(
            docker_client,
            labelled.rsplit(":", 1)[0] + ":missing",
            repository,
            SHA,
            "build it",
            no_progress,
            tmp_path,
        )


def test_pull_tags_only_an_image_built_from_the_lock(
    docker_client: Any, registry: str, labelled: str, tmp_path: Path
) -> None:
    repository = engine.registry_repository(f"{registry}/envbuilder-test", "imgreg")
    config_digest, ref = transfer.push_locked(
        docker_client, labelled, repository, SHA, "build it", no_progress, tmp_path
    )
    assert ref.startswith(f"{repository}@sha256:")
    image_id = docker_client.images.get(labelled).id  # this engine's store: the config digest
    assert config_digest == image_id
    predicted = Prediction(config_digest, (), manifest_digest=ref.partition("@")[2])
    wrong_tag = f"envbuilder-test/imageregistry-pulled:{secrets.token_hex(4)}"
    with pytest.raises(RegistryError, match=rf"refusing {ref}: it was built from lock {SHA}"):
        transfer.pull_locked(docker_client, ref, wrong_tag, OTHER, None, no_progress)
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(wrong_tag)  # nothing was tagged
    with pytest.raises(RegistryError, match=r"is not the recorded sha256:"):
        transfer.pull_locked(
            docker_client, ref, wrong_tag, SHA, Prediction("sha256:" + "0" * 64, ()), no_progress
        )
    tag = f"envbuilder-test/imageregistry-pulled:{secrets.token_hex(4)}"
    assert transfer.pull_locked(docker_client, ref, tag, SHA, predicted, no_progress) == image_id
    assert docker_client.images.get(tag).id == image_id
    docker_client.images.remove(tag)


def test_a_lock_without_a_pushed_image_says_how_to_push() -> None:
    with pytest.raises(LockError, match=r"x.lock.toml records no pushed image .*run `push it`"):
        transfer.pushed_reference({}, "x.lock.toml", "push it")
    assert transfer.pushed_reference({"repo_digest": "r@sha256:1"}, "x", "p") == "r@sha256:1"

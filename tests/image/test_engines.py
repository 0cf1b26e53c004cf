"""The engine contract (issue 29): one image, whichever engine and image store wrote it.

A small Dockerfile (a RUN that leaves a build log, a random machine-id and a new user; a RUN that
removes a folder of the base and makes it again) is built and written by envbuilder on every
engine CI runs: Debian 12's dockerd 20.10 (the main engine, classic store), Debian sid's dockerd
28 with the containerd image store and with the classic store, and podman 5. Then, per engine:

* the written image's config digest and envbuilder's manifest digest are the main engine's;
* the engine names it by the digest its store uses (config: classic, podman; manifest:
  containerd), and a status line that compared the other digest would say "NOT";
* `push` uploads envbuilder's manifest, so the repository digest is the manifest digest from
  every engine, and a pull by that digest gives the engine's id the lock predicts.

The cpu env's whole chain (build from the committed lock, --verify, validate, push, pull, run)
on the current engines is tests/image/test_engines_cpu.py.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.core.progress import no_progress
from envbuilder.image import engine, transfer
from envbuilder.image.oci.writer import WrittenImage, expected_id, write_image
from envbuilder.image.repro import Prediction, status_line

BASE = "debian:bookworm-slim"
SDE = 1_795_456_873
SHA = "ef" * 32
DOCKERFILE = f"""\
FROM {BASE}
ARG SOURCE_DATE_EPOCH
RUN mkdir -p /app /var/log/app \\
 && echo "built at $(date +%s%N)" > /var/log/app/build.log \\
 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /etc/machine-id \\
 && echo hello > /app/hello \\
 && useradd --create-home --uid 1000 tester
RUN rm -rf /usr/share/doc/bash && mkdir -p /usr/share/doc/bash \\
 && echo again > /usr/share/doc/bash/note && touch /app/stamp
COPY hello.txt /app/
LABEL {LOCK_LABEL}="{SHA}"
USER 1000
"""
CURRENT = ("sid-containerd", "sid-classic", "podman")


@dataclass(frozen=True)
class Written:
    """An image envbuilder wrote on one engine: the client, what the writer returned."""

    client: Any
    image: WrittenImage
    store: str


def _write_on(client: Any, workdir: Path, name: str) -> Written:
    context = workdir / "context"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "hello.txt").write_text("hello\n")
    (context / "hello.txt").chmod(0o644)
    built = engine.build_image(
        client,
        context,
        f"envbuilder-test-engines/tiny-engine:{name}",
        {},
        {"SOURCE_DATE_EPOCH": str(SDE)},
        nocache=True,
    )
    image = write_image(client, built, base=BASE, source_date_epoch=SDE, workdir=workdir / "w")
    return Written(client, image, engine.engine_info(client).image_store)


def _remove(client: Any, *refs: str) -> None:
    for ref in refs:
        with contextlib.suppress(Exception):
            engine.remove_image(client, ref, force=True)


@pytest.fixture(scope="module")
def reference(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """The image written on the main engine (Debian 12's dockerd 20.10, classic store)."""
    written = _write_on(docker_client, tmp_path_factory.mktemp("main"), "main")
    yield written
    _remove(docker_client, written.image.image_id, "envbuilder-test-engines/tiny-engine:main")


@pytest.fixture(params=CURRENT)
def current(
    request: pytest.FixtureRequest, engine_hosts: dict[str, str], tmp_path: Path
) -> Iterator[Written]:
    """The same image written on one of the current engines."""
    import docker

    name = str(request.param)
    if name not in engine_hosts:
        pytest.fail(f"ENVBUILDER_TEST_ENGINES names no {name} engine", pytrace=False)
    client = docker.DockerClient(base_url=engine_hosts[name], timeout=600)
    written = _write_on(client, tmp_path, name)
    yield written
    ids = (written.image.image_id, written.image.manifest_digest)
    _remove(client, *ids, f"envbuilder-test-engines/tiny-engine:{name}")
    client.close()


def test_every_engine_writes_the_main_engines_image(reference: Written, current: Written) -> None:
    assert current.image.image_id == reference.image.image_id
    assert current.image.manifest_digest == reference.image.manifest_digest
    assert current.image.diff_ids == reference.image.diff_ids


def test_the_engine_names_the_image_by_its_stores_digest(current: Written) -> None:
    config, manifest = current.image.image_id, current.image.manifest_digest
    by_store = manifest if current.store == "containerd" else config
    other = config if current.store == "containerd" else manifest
    found = engine.image_info(current.client, by_store)
    assert found is not None and found.id == by_store != other
    assert expected_id(config, manifest, current.store) == by_store
    predicted = Prediction(config, current.image.diff_ids, manifest_digest=manifest)
    ok, line = status_line("tiny", "docker", "image", found.id, predicted, current.store)
    assert ok, line
    wrong_store = "classic" if current.store == "containerd" else "containerd"
    ok, line = status_line("tiny", "docker", "image", found.id, predicted, wrong_store)
    assert not ok and "is NOT the image the lock predicts" in line


def test_push_gives_the_manifest_digest_and_pull_the_stores_id(
    current: Written, registry: str, tmp_path: Path
) -> None:
    client, image = current.client, current.image
    repository = f"{registry}/envbuilder-test/engines-{secrets.token_hex(3)}"
    tag = f"envbuilder-test-engines/tiny-pushed:{secrets.token_hex(3)}"
    engine_id = expected_id(image.image_id, image.manifest_digest, current.store)
    engine.tag_image(client, engine_id, *engine.split_reference(tag))  # type: ignore[arg-type]
    config, ref = transfer.push_locked(
        client, tag, repository, SHA, "build it", no_progress, tmp_path
    )
    assert (config, ref) == (image.image_id, f"{repository}@{image.manifest_digest}")
    _remove(client, tag, engine_id)
    assert engine.image_info(client, engine_id) is None
    predicted = Prediction(image.image_id, image.diff_ids, manifest_digest=image.manifest_digest)
    pulled_tag = f"envbuilder-test-engines/tiny-pulled:{secrets.token_hex(3)}"
    pulled = transfer.pull_locked(client, ref, pulled_tag, SHA, predicted, no_progress)
    assert pulled == engine_id
    _remove(client, pulled_tag, ref)

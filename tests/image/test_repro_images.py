"""Reproducible images on the real engine, with a tiny image: two engine builds that differ (times,
logs, a random id) give one written image; another SOURCE_DATE_EPOCH gives another; `docker
load` gives the computed id; a differing build is reported by layer and file."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuilder.core.errors import BuildError
from envbuilder.image import engine, repro
from envbuilder.image.oci.blobs import digest_bytes
from envbuilder.image.oci.writer import REPRO_FORMAT, REPRO_LABEL, WrittenImage, write_image

pytestmark = pytest.mark.docker

BASE = "debian:bookworm-slim"
SDE = 1_795_456_873
#: Every build leaves a different log, random id, mtimes; GREETING decides /app/hello.
DOCKERFILE = """\
FROM debian:bookworm-slim
ARG SOURCE_DATE_EPOCH
ARG GREETING=hello
RUN mkdir -p /app /var/log/app \\
 && echo "built at $(date +%s%N)" > /var/log/app/build.log \\
 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /etc/machine-id \\
 && echo "$GREETING" > /app/hello \\
 && useradd --create-home --uid 1000 tester
RUN ldconfig && touch /app/stamp
ENV APP=/app
USER 1000
"""


@pytest.fixture
def tiny_builds(docker_client: Any, tmp_path: Path) -> Iterator[list[str]]:
    """Tags made by `build()` below, removed afterwards."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


def build(client: Any, tmp_path: Path, tags: list[str], name: str, greeting: str = "hello") -> str:
    """A no-cache engine build of DOCKERFILE; its image id."""
    context = tmp_path / f"ctx-{name}"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE)
    tag = f"envbuilder-test-repro/tiny:{name}"
    tags.append(tag)
    return engine.build_image(
        client,
        context,
        tag,
        {},
        {"GREETING": greeting, "SOURCE_DATE_EPOCH": str(SDE)},
        nocache=True,
    )


def write(client: Any, tmp_path: Path, image: str, sde: int = SDE) -> WrittenImage:
    return write_image(client, image, base=BASE, source_date_epoch=sde, workdir=tmp_path / "w")


def test_two_engine_builds_give_one_image(
    docker_client: Any, tmp_path: Path, tiny_builds: list[str]
) -> None:
    first = build(docker_client, tmp_path, tiny_builds, "one")
    second = build(docker_client, tmp_path, tiny_builds, "two")
    assert first != second  # the engine's images differ (times, log, machine-id)

    a = write(docker_client, tmp_path, first)
    b = write(docker_client, tmp_path, second)
    assert a.image_id == b.image_id
    assert a.config == b.config and a.diff_ids == b.diff_ids
    # The engine's id of the loaded image is the sha256 of the config envbuilder wrote.
    assert digest_bytes(a.config) == a.image_id
    assert docker_client.images.get(a.image_id).id == a.image_id
    assert b"2026-12-03" not in a.config
    config = json.loads(a.config)
    assert config["config"]["Labels"][REPRO_LABEL] == REPRO_FORMAT
    assert config["config"]["Env"][-1] == "APP=/app" and config["config"]["User"] == "1000"
    assert a.base_layers == len(docker_client.images.get(BASE).attrs["RootFS"]["Layers"])
    assert len(a.layers) == 2 and "mkdir -p /app" in a.layers[0].created_by
    assert a.layers[0].dropped == 1  # the build log
    tiny_builds.append(a.image_id)

    # What runs is what was built: the file, the user; no build log, an empty machine-id.
    out = docker_client.containers.run(
        a.image_id,
        ["sh", "-c", "cat /app/hello; id -u; ls /var/log/app; wc -c </etc/machine-id"],
        remove=True,
    ).decode()
    assert out.split() == ["hello", "1000", "0"]


def test_another_lock_time_gives_another_image_with_the_same_layers(
    docker_client: Any, tmp_path: Path, tiny_builds: list[str]
) -> None:
    """A newer lock (a bumped package elsewhere) dates the image, not its layers: every file
    time is LAYER_EPOCH, so the same build steps give byte-identical layers (issue 31)."""
    built = build(docker_client, tmp_path, tiny_builds, "sde")
    one = write(docker_client, tmp_path, built)
    other = write(docker_client, tmp_path, built, sde=SDE + 86400)
    assert one.image_id != other.image_id  # the config's `created` is the lock's time
    assert one.diff_ids == other.diff_ids
    assert one.layers and all(layer.size for layer in one.layers)
    tiny_builds += [one.image_id, other.image_id]


def test_verify_names_the_first_differing_layer_and_file(
    docker_client: Any, tmp_path: Path, tiny_builds: list[str]
) -> None:
    predicted_image = write(
        docker_client, tmp_path, build(docker_client, tmp_path, tiny_builds, "hello")
    )
    rebuilt_image = write(
        docker_client, tmp_path, build(docker_client, tmp_path, tiny_builds, "bye", greeting="bye")
    )
    tiny_builds += [predicted_image.image_id, rebuilt_image.image_id]
    predicted = repro.observe(docker_client, predicted_image.image_id, BASE)
    rebuilt = repro.observe(docker_client, rebuilt_image.image_id, BASE)
    assert predicted.layers[0] != rebuilt.layers[0]

    with pytest.raises(BuildError) as caught:
        repro.check_prediction(
            docker_client,
            predicted,
            rebuilt,
            env="tiny",
            target="docker",
            base=BASE,
            workdir=tmp_path / "v",
        )
    message = str(caught.value)
    assert "layer 2 of the image (1 above the base)" in message
    assert "GREETING" in message or "mkdir -p /app" in message  # the step that made it
    assert "first differing file: /app/hello: " in message and "content sha256" in message

    # Without the predicted image on the engine, the layer is still named.
    missing = repro.Prediction("sha256:" + hashlib.sha256(b"gone").hexdigest(), predicted.layers)
    with pytest.raises(BuildError, match="not on this engine, so no file can be named"):
        repro.check_prediction(
            docker_client,
            missing,
            rebuilt,
            env="tiny",
            target="docker",
            base=BASE,
            workdir=tmp_path / "v2",
        )
    repro.check_prediction(
        docker_client,
        predicted,
        predicted,
        env="tiny",
        target="docker",
        base=BASE,
        workdir=tmp_path / "v3",
    )  # the same image passes

"""The typed engine interface (envbuilder.image.engine, issue 29): EngineInfo parsed from what
real engines answer to GET /version, GET /info and GET /_ping, ImageInfo from an image
inspect, and the image operations against the real engine.

The answers below are trimmed to the fields envbuilder reads (and a few around them), in the
shapes the engines document and send:

* Docker Engine API (moby), docs.docker.com/reference/api/engine/version/v1.51/ ("System"):
  /version's `Version`, `ApiVersion`, `Os`, `Arch`, `Components` [{Name: "Engine", ...}];
  /info's `Driver`, `DriverStatus` ([[key, value], ...]), `SecurityOptions`
  (["name=seccomp,profile=builtin", "name=rootless", ...]), `OSType`, `Architecture`;
  /_ping's headers `Api-Version` and `Builder-Version` ("1" legacy, "2" BuildKit; absent when
  the daemon does not say, as Debian 12's 20.10 with no `features.buildkit`). With the
  containerd image store (docs.docker.com/engine/storage/containerd/) /info has
  `Driver: "overlayfs"` and `DriverStatus: [["driver-type", "io.containerd.snapshotter.v1"]]`.
* podman's Docker-compatible API, docs.podman.io/en/latest/_static/api.html ("compat"; the
  handlers are containers/podman pkg/api/handlers/compat/version.go and info.go): /version has
  `Components` [{Name: "Podman Engine", ...}, {Name: "Conmon"}, {Name: "OCI Runtime (crun)"}],
  `ApiVersion` "1.41" (the Docker API it speaks), `Version` podman's own; /info has
  containers/storage's `Driver: "overlay"`, its graph status as DriverStatus, `Architecture`
  GOARCH ("amd64"), `SecurityOptions` with "name=rootless" when rootless (and a top-level
  `Rootless`); /_ping sends `Libpod-Api-Version` and an empty `BuildKit-Version`.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.builders.proberun import with_engine
from envbuilder.core.errors import BuildError, EngineError, ValidationError
from envbuilder.image import engine
from envbuilder.image.engine_values import EngineInfo, ImageInfo, parse_engine_info

# ------------------------------------------------------------------- Docker 20.10 (Debian 12)
# What this repository's CI engine (Debian 12's docker.io 20.10.24) answers, as read from it.
DOCKER_20_VERSION = {
    "Platform": {"Name": ""},
    "Components": [
        {"Name": "Engine", "Version": "20.10.24+dfsg1", "Details": {"ApiVersion": "1.41"}},
        {"Name": "containerd", "Version": "1.6.20~ds1", "Details": {}},
        {"Name": "runc", "Version": "1.1.5+ds1", "Details": {}},
    ],
    "Version": "20.10.24+dfsg1",
    "ApiVersion": "1.41",
    "MinAPIVersion": "1.12",
    "Os": "linux",
    "Arch": "amd64",
    "KernelVersion": "6.1.0-28-amd64",
}
DOCKER_20_INFO = {
    "ServerVersion": "20.10.24+dfsg1",
    "Driver": "overlay2",
    "DriverStatus": [
        ["Backing Filesystem", "extfs"],
        ["Supports d_type", "true"],
        ["Native Overlay Diff", "true"],
        ["userxattr", "false"],
    ],
    "SecurityOptions": ["name=seccomp,profile=default"],
    "OSType": "linux",
    "Architecture": "x86_64",
    "OperatingSystem": "Debian GNU/Linux 12 (bookworm)",
}
DOCKER_20_PING = {"Api-Version": "1.41", "Docker-Experimental": "false", "Ostype": "linux"}

# --------------------------------------------------------------------------- Docker 28 (sid)
DOCKER_28_VERSION = {
    "Platform": {"Name": ""},
    "Components": [
        {"Name": "Engine", "Version": "28.5.2+dfsg1", "Details": {"ApiVersion": "1.51"}},
        {"Name": "containerd", "Version": "2.1.4~ds1", "Details": {}},
        {"Name": "runc", "Version": "1.3.0+ds1", "Details": {}},
        {"Name": "docker-init", "Version": "0.19.0", "Details": {}},
    ],
    "Version": "28.5.2+dfsg1",
    "ApiVersion": "1.51",
    "MinAPIVersion": "1.24",
    "Os": "linux",
    "Arch": "amd64",
}
DOCKER_28_CONTAINERD_INFO = {
    "ServerVersion": "28.5.2+dfsg1",
    "Driver": "overlayfs",
    "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
    "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"],
    "OSType": "linux",
    "Architecture": "x86_64",
}
DOCKER_28_CLASSIC_INFO = {
    "ServerVersion": "28.5.2+dfsg1",
    "Driver": "overlay2",
    "DriverStatus": [
        ["Backing Filesystem", "extfs"],
        ["Supports d_type", "true"],
        ["Using metacopy", "false"],
        ["Native Overlay Diff", "true"],
        ["userxattr", "false"],
    ],
    "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"],
    "OSType": "linux",
    "Architecture": "x86_64",
}
#: Docker 23+ on Linux builds with BuildKit by default and says so in /_ping.
DOCKER_28_PING = {"Api-Version": "1.51", "Builder-Version": "2", "Ostype": "linux"}
#: A rootless Docker 28 (dockerd-rootless.sh): the classic store, "name=rootless".
DOCKER_28_ROOTLESS_INFO = {
    **DOCKER_28_CLASSIC_INFO,
    "SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"],
}

# --------------------------------------------------------------------------- podman 5
PODMAN_5_VERSION = {
    "Platform": {"Name": "linux/amd64/debian-13"},
    "Components": [
        {
            "Name": "Podman Engine",
            "Version": "5.4.2",
            "Details": {"APIVersion": "5.4.2", "MinAPIVersion": "4.0.0", "Os": "linux"},
        },
        {"Name": "Conmon", "Version": "conmon version 2.1.12", "Details": {}},
        {"Name": "OCI Runtime (crun)", "Version": "crun version 1.21", "Details": {}},
    ],
    "Version": "5.4.2",
    "ApiVersion": "1.41",
    "MinAPIVersion": "1.24",
    "Os": "linux",
    "Arch": "amd64",
}
PODMAN_5_INFO = {
    "ServerVersion": "5.4.2",
    "Driver": "overlay",
    "DriverStatus": [
        ["Backing Filesystem", "extfs"],
        ["Native Overlay Diff", "true"],
        ["Supports d_type", "true"],
        ["Supports shifting", "false"],
        ["Supports volatile", "true"],
        ["Using metacopy", "false"],
    ],
    "SecurityOptions": ["name=apparmor", "name=seccomp,profile=default", "name=rootless"],
    "OSType": "linux",
    "Architecture": "amd64",
    "ProductLicense": "Apache-2.0",
    "Rootless": True,
}
PODMAN_5_PING = {
    "Api-Version": "1.41",
    "Buildkit-Version": "",
    "Libpod-Api-Version": "5.4.2",
    "Libpod-Buildah-Version": "1.39.4",
}


@pytest.mark.parametrize(
    ("version", "info", "ping", "expected"),
    [
        pytest.param(
            DOCKER_20_VERSION,
            DOCKER_20_INFO,
            DOCKER_20_PING,
            EngineInfo(
                "docker", "20.10.24+dfsg1", "1.41", "classic", "overlay2", "legacy", True, False,
                "linux", "amd64",
            ),
            id="docker-20.10",
        ),
        pytest.param(
            DOCKER_28_VERSION,
            DOCKER_28_CONTAINERD_INFO,
            DOCKER_28_PING,
            EngineInfo(
                "docker", "28.5.2+dfsg1", "1.51", "containerd", "overlayfs", "buildkit", True,
                False, "linux", "amd64",
            ),
            id="docker-28-containerd",
        ),
        pytest.param(
            DOCKER_28_VERSION,
            DOCKER_28_CLASSIC_INFO,
            DOCKER_28_PING,
            EngineInfo(
                "docker", "28.5.2+dfsg1", "1.51", "classic", "overlay2", "buildkit", True, False,
                "linux", "amd64",
            ),
            id="docker-28-classic",
        ),
        pytest.param(
            DOCKER_28_VERSION,
            DOCKER_28_ROOTLESS_INFO,
            DOCKER_28_PING,
            EngineInfo(
                "docker", "28.5.2+dfsg1", "1.51", "classic", "overlay2", "buildkit", True, True,
                "linux", "amd64",
            ),
            id="docker-28-rootless",
        ),
        pytest.param(
            PODMAN_5_VERSION,
            PODMAN_5_INFO,
            PODMAN_5_PING,
            EngineInfo(
                "podman", "5.4.2", "1.41", "podman", "overlay", "legacy", False, True, "linux",
                "amd64",
            ),
            id="podman-5",
        ),
    ],
)  # fmt: skip
def test_engine_info_from_real_shaped_answers(
    version: dict[str, Any], info: dict[str, Any], ping: dict[str, str], expected: EngineInfo
) -> None:
    assert parse_engine_info(version, info, ping) == expected


def test_header_names_are_case_insensitive_and_a_legacy_default_is_said() -> None:
    """HTTP header names are case-insensitive (requests' headers are; a plain dict is not)."""
    found = parse_engine_info(DOCKER_28_VERSION, DOCKER_28_CLASSIC_INFO, {"builder-version": "1"})
    assert (found.builder, found.buildkit) == ("legacy", True)


def test_podman_rootful_is_not_rootless() -> None:
    info = {**PODMAN_5_INFO, "SecurityOptions": ["name=seccomp,profile=default"], "Rootless": False}
    assert not parse_engine_info(PODMAN_5_VERSION, info, PODMAN_5_PING).rootless


def test_podman_is_known_by_its_ping_headers_too() -> None:
    version = {**PODMAN_5_VERSION, "Components": []}
    found = parse_engine_info(version, {**PODMAN_5_INFO, "Rootless": False}, PODMAN_5_PING)
    assert (found.product, found.image_store, found.buildkit) == ("podman", "podman", False)
    assert found.rootless  # from SecurityOptions alone


def test_a_rootless_option_with_more_fields_counts() -> None:
    info = {**DOCKER_28_CLASSIC_INFO, "SecurityOptions": ["name=rootless,foo=bar"]}
    assert parse_engine_info(DOCKER_28_VERSION, info, DOCKER_28_PING).rootless


def test_summary_and_json_say_what_doctor_and_reports_show() -> None:
    found = parse_engine_info(DOCKER_28_VERSION, DOCKER_28_CONTAINERD_INFO, DOCKER_28_PING)
    assert found.summary() == (
        "docker 28.5.2+dfsg1 (API 1.51), containerd image store (overlayfs), builder buildkit, "
        "rootful, linux/amd64"
    )
    assert found.as_dict() == {
        "product": "docker",
        "version": "28.5.2+dfsg1",
        "api_version": "1.51",
        "image_store": "containerd",
        "storage_driver": "overlayfs",
        "builder": "buildkit",
        "buildkit": True,
        "rootless": False,
        "os": "linux",
        "arch": "amd64",
    }
    old = parse_engine_info(DOCKER_20_VERSION, DOCKER_20_INFO, DOCKER_20_PING)
    assert "builder legacy (BuildKit available)" in old.summary()


def test_image_info_from_an_inspect() -> None:
    """GET /images/{name}/json, trimmed (docs.docker.com/reference/api/engine, ImageInspect):
    on the containerd store the Id is the manifest digest, the layers are still diff_ids."""
    attrs = {
        "Id": "sha256:dc5b9c9b" + "0" * 56,
        "RepoTags": ["debian:bookworm-slim"],
        "RepoDigests": ["debian@sha256:" + "1" * 64],
        "Created": "2025-01-13T00:00:00Z",
        "Config": {
            "Env": ["PATH=/usr/bin:/bin"],
            "User": "1000",
            "Labels": {"org.envbuilder.lock-sha256": "abc"},
            "Cmd": ["bash"],
        },
        "Architecture": "amd64",
        "Os": "linux",
        "Size": 74800000,
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + "2" * 64]},
    }
    image = ImageInfo.from_inspect(attrs)
    assert image.id == attrs["Id"]
    assert image.repo_tags == ("debian:bookworm-slim",)
    assert image.repo_digests == ("debian@sha256:" + "1" * 64,)
    assert image.diff_ids == ("sha256:" + "2" * 64,)
    assert (image.size, image.user, image.env) == (74800000, "1000", ("PATH=/usr/bin:/bin",))
    assert image.labels == {"org.envbuilder.lock-sha256": "abc"}
    assert image.config["Cmd"] == ["bash"]
    # No Config labels at all (podman's scratch imports), no layers: empty, not None.
    bare = ImageInfo.from_inspect({"Id": "sha256:" + "3" * 64, "Config": {"Labels": None}})
    assert (bare.labels, bare.diff_ids, bare.repo_tags, bare.size) == ({}, (), (), 0)


ROOT = Path(__file__).resolve().parents[2]
REPORT_SCHEMA = json.loads(
    (ROOT / "envbuilder/data/schemas/probe-report.schema.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize(
    "detected",
    [
        parse_engine_info(DOCKER_28_VERSION, DOCKER_28_CONTAINERD_INFO, DOCKER_28_PING).as_dict(),
        parse_engine_info(PODMAN_5_VERSION, PODMAN_5_INFO, PODMAN_5_PING).as_dict(),
        {"product": "wsl", "version": "2.4.4.0"},
    ],
)
def test_a_report_with_its_engine_validates(detected: dict[str, Any]) -> None:
    """What validate writes for an image target: the probe's report plus `engine`, valid in
    probe-report.schema.json v1 (a real report, tests/data/probe/h200-standard.json)."""
    report = (ROOT / "tests/data/probe/h200-standard.json").read_bytes()
    jsonschema.validate(json.loads(report), REPORT_SCHEMA)  # valid without it too
    stamped = json.loads(with_engine(report, detected))
    jsonschema.validate(stamped, REPORT_SCHEMA)
    assert stamped["engine"] == detected
    assert {k: v for k, v in stamped.items() if k != "engine"} == json.loads(report)


def test_the_schema_refuses_an_engine_it_does_not_know() -> None:
    report = json.loads((ROOT / "tests/data/probe/h200-standard.json").read_bytes())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "engine": {"product": "lxc", "version": "5"}}, REPORT_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "engine": {"product": "docker"}}, REPORT_SCHEMA)


def test_a_report_that_is_not_json_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="not JSON"):
        with_engine(b"{half", {"product": "docker", "version": "28"})
    with pytest.raises(ValidationError, match="not a JSON object"):
        with_engine(b"[]", {"product": "docker", "version": "28"})


# --------------------------------------------------------------------------- the real engine

BASE = "debian:bookworm-slim"


@pytest.fixture(scope="module")
def client(docker_client: Any) -> Iterator[engine.Client]:
    """An engine client made by envbuilder (docker_client: the engine is there)."""
    made = engine.connect()
    if engine.image_info(made, BASE) is None:
        engine.pull_image(made, BASE)
    yield made
    engine.disconnect(made)


def test_engine_info_of_the_real_engine(client: engine.Client, docker_client: Any) -> None:
    found = engine.engine_info(client)
    version = docker_client.version()
    assert (found.version, found.api_version) == (version["Version"], version["ApiVersion"])
    assert found.product in ("docker", "podman")
    assert found.image_store in ("classic", "containerd", "podman")
    assert found.storage_driver == docker_client.info()["Driver"]


def test_image_info_history_tag_and_remove(client: engine.Client) -> None:
    image = engine.image_info(client, BASE)
    assert image is not None and image.id.startswith("sha256:") and image.diff_ids
    assert engine.image_info(client, "envbuilder-test/absent:nothing") is None
    assert engine.image_history(client, BASE)
    repository = "envbuilder-test/engine-iface"
    engine.tag_image(client, BASE, repository, "t1")
    tagged = engine.image_info(client, f"{repository}:t1")
    assert tagged is not None and tagged.id == image.id
    assert f"{repository}:t1" in tagged.repo_tags
    assert [i.id for i in engine.list_images(client, repository)] == [image.id]
    engine.remove_image(client, f"{repository}:t1")
    assert engine.image_info(client, f"{repository}:t1") is None
    engine.remove_image(client, f"{repository}:t1")  # absent is fine
    with pytest.raises(EngineError, match="absent:nothing"):
        engine.tag_image(client, "envbuilder-test/absent:nothing", repository, "t2")


def test_save_then_load_gives_the_same_image(client: engine.Client) -> None:
    image = engine.image_info(client, BASE)
    assert image is not None
    data = b"".join(engine.save_image_stream(client, BASE, 1 << 20))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert "manifest.json" in tar.getnames()
    messages = engine.load_image_archive(
        client, (data[i : i + 65536] for i in range(0, len(data), 65536))
    )
    assert any(BASE in m or image.id in m for m in messages), messages
    again = engine.image_info(client, BASE)
    assert again is not None and again.id == image.id


def test_load_of_a_broken_archive_is_a_build_error(client: engine.Client) -> None:
    with pytest.raises(BuildError, match="docker load"):
        engine.load_image_archive(client, [b"not a tar archive" * 64])


def test_saving_an_absent_image_is_an_engine_error(client: engine.Client) -> None:
    with pytest.raises(EngineError, match="absent:nothing"):
        b"".join(engine.save_image_stream(client, "envbuilder-test/absent:nothing", 1024))


def test_an_unreachable_engine_is_an_engine_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.connect(timeout_s=5)

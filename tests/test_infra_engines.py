"""The current engines `.ci/services.sh` runs beside Debian 12's dockerd 20.10 (issue 29):
Debian sid's dockerd 28 with the containerd image store (sid-containerd) and with the classic
overlay2 store (sid-classic), and podman 5's Docker-compatible API (podman). Each must answer
the docker SDK at its ENVBUILDER_TEST_ENGINES socket, be the version and image store it is
named for, and hold the seeded debian:bookworm-slim (pulled through the local mirror).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import parse_engine_hosts, service_missing

SEED_IMAGE = "debian:bookworm-slim"
CONTAINERD_SNAPSHOTTER = ["driver-type", "io.containerd.snapshotter.v1"]


@dataclass(frozen=True)
class Expected:
    """What an engine must be: the product in its version's Components, its minimum major
    version, and its storage driver (`info()['Driver']`) and containerd image store or not."""

    component: str
    min_major: int
    driver: str
    containerd_store: bool


ENGINES = {
    "sid-containerd": Expected("Engine", 28, "overlayfs", containerd_store=True),
    "sid-classic": Expected("Engine", 28, "overlay2", containerd_store=False),
    "podman": Expected("Podman Engine", 5, "overlay", containerd_store=False),
}


@dataclass(frozen=True)
class Engine:
    name: str
    host: str
    client: Any
    expected: Expected


def major(version: str) -> int:
    """28 of "28.5.2+dfsg4", 5 of "5.8.6"."""
    return int(version.split(".", 1)[0])


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest, engine_hosts: dict[str, str]) -> Iterator[Engine]:
    import docker
    import docker.errors

    name: str = request.param
    host = engine_hosts.get(name)
    if host is None:
        service_missing(f"ENVBUILDER_TEST_ENGINES names no engine {name!r}")
    try:
        client = docker.DockerClient(base_url=host, timeout=120)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        service_missing(f"engine {name} does not answer at {host}: {exc}")
    try:
        yield Engine(name, host, client, ENGINES[name])
    finally:
        client.close()


def test_version_is_current(engine: Engine) -> None:
    version = engine.client.version()
    components = {c["Name"]: c["Version"] for c in version.get("Components", [])}
    want = engine.expected.component
    assert want in components, f"{engine.name}: components {sorted(components)}, no {want!r}"
    assert major(components[want]) >= engine.expected.min_major, components[want]
    assert major(version["Version"]) >= engine.expected.min_major, version["Version"]


def test_image_store_is_the_one_named(engine: Engine) -> None:
    info = engine.client.info()
    status = [list(pair) for pair in info.get("DriverStatus") or []]
    assert info["Driver"] == engine.expected.driver, (info["Driver"], status)
    assert (CONTAINERD_SNAPSHOTTER in status) == engine.expected.containerd_store, status


def test_seed_image_is_present(engine: Engine) -> None:
    import docker.errors

    try:
        image = engine.client.images.get(SEED_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{engine.name}: no {SEED_IMAGE} (.ci/services.sh pulls it)", pytrace=False)
    # podman names it docker.io/library/debian:bookworm-slim, the dockerds debian:bookworm-slim.
    assert any(tag.endswith(SEED_IMAGE) for tag in image.tags), image.tags


def test_engine_tests_run_in_the_services_group(
    engine: Engine, request: pytest.FixtureRequest
) -> None:
    """One image build at a time on CI's two cores (tests/conftest.py, xdist_group_of)."""
    assert request.node.get_closest_marker("engines") is not None
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not installed: no groups to check")
    mark = request.node.get_closest_marker("xdist_group")
    assert mark is not None
    assert mark.args == ("services",)


def test_parse_engine_hosts() -> None:
    assert parse_engine_hosts(" a=unix:///x.sock  b=tcp://127.0.0.1:9 ") == {
        "a": "unix:///x.sock",
        "b": "tcp://127.0.0.1:9",
    }
    assert parse_engine_hosts("") == {}
    with pytest.raises(ValueError, match="NAME=DOCKER_HOST"):
        parse_engine_hosts("unix:///x.sock")


@pytest.mark.parametrize(("ci", "outcome"), [("", "3 skipped"), ("true", "3 errors")])
def test_missing_engines_skip_locally_and_fail_in_ci(tmp_path: Path, ci: str, outcome: str) -> None:
    """The engines pointed at sockets that do not exist, in a child pytest."""
    tests = Path(__file__).resolve().parent
    (tmp_path / "tests").mkdir()
    for name in ("conftest.py", "test_infra_engines.py"):
        shutil.copy(tests / name, tmp_path / "tests" / name)
    nowhere = " ".join(f"{name}=unix://{tmp_path}/{name}.sock" for name in ENGINES)
    env = {**os.environ, "CI": ci, "ENVBUILDER_TEST_ENGINES": nowhere}
    argv = ["-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *argv,
            "tests/test_infra_engines.py::test_version_is_current",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert outcome in result.stdout, result.stdout + result.stderr
    assert "does not answer at unix://" in result.stdout

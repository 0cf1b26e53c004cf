"""Shared fixtures: the real Docker engine, the local registries, the two-node Slurm cluster and
the current engines (`engine_hosts`: Debian sid's dockerd 28 and podman 5) that `.ci/services.sh`
starts.

Rule for every service fixture: locally a missing service skips the test with the reason and
the command that starts it; under CI (`CI=true`) it FAILS, because CI promises the service.
Tests that use these fixtures get the `docker` / `registry` / `slurm` / `engines` marker
automatically, so `pytest -m "not docker"` deselects them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

START_HINT = 'start them with: eval "$(.ci/services.sh)"'
DEFAULT_REGISTRY = "127.0.0.1:5000"
DEFAULT_AUTH_REGISTRY = "127.0.0.1:5001"
DEFAULT_AUTH_USER = "envbuilder"
DEFAULT_AUTH_PASSWORD = "envbuilder-test"
# Where .ci/services.sh writes slurm.conf (its $STATE_DIR/slurm), when SLURM_CONF is not set.
DEFAULT_SLURM_CONF = (
    Path(os.environ.get("ENVBUILDER_CI_STATE", "/var/lib/envbuilder-ci")) / "slurm" / "slurm.conf"
)
SLURM_NODES = ("n1", "n2")
# sinfo's short states of a node that answers and takes jobs (not down, drained, unknown; a
# trailing `*` would mean "not responding").
SLURM_UP_STATES = frozenset({"idle", "alloc", "mix", "comp"})
# The current engines .ci/services.sh runs from its Debian sid root (ENVBUILDER_TEST_ENGINES says
# where; these are its sockets when the variable is not set).
_SID_RUN = (
    Path(os.environ.get("ENVBUILDER_CI_STATE", "/var/lib/envbuilder-ci"))
    / "sid-root/run/envbuilder"
)
DEFAULT_TEST_ENGINES = {
    "sid-containerd": f"unix://{_SID_RUN}/sid-containerd/docker.sock",
    "sid-classic": f"unix://{_SID_RUN}/sid-classic/docker.sock",
    "podman": f"unix://{_SID_RUN}/podman/podman.sock",
}

_SERVICE_MARKERS = {
    "docker_client": "docker",
    "registry": "registry",
    "auth_registry": "registry",
    "auth_registry_credentials": "registry",
    "slurm_cluster": "slurm",
    "engine_hosts": "engines",
}


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start, however pytest itself was started.

    A shell without job control starts a background command (`bash .ci/run &`, `nohup`) with
    SIGINT ignored, and an ignored signal stays ignored across exec: every envbuilder child
    then shrugged off the SIGINT of the interrupt tests, which failed with exit code 0 (seen:
    four tests of a clean-clone run started that way). Python installs its handler only when
    SIGINT is not ignored, so the default is put back here, before any child starts."""
    del config
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def in_ci() -> bool:
    """True when the environment says this is CI (`CI=true`, as GitHub/GitLab set it)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def service_missing(reason: str) -> NoReturn:
    """Skip locally, fail under CI: CI promises Docker and the registries."""
    if in_ci():
        pytest.fail(f"{reason} -- CI=true requires it ({START_HINT})", pytrace=False)
    pytest.skip(f"{reason} ({START_HINT})")


# tryfirst: pytest-xdist reads the xdist_group markers in its own modifyitems hook (it appends
# the group to each node id there), so they must be on the items before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the services they use, so `-m "not docker"` works without bookkeeping;
    under pytest-xdist, also put them in the group that runs them (see `xdist_group_of`)."""
    grouping = config.pluginmanager.hasplugin("xdist")
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, marker in _SERVICE_MARKERS.items():
            if fixture in fixtures:
                item.add_marker(getattr(pytest.mark, marker))
        if grouping:
            item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))


def xdist_group_of(item: pytest.Item) -> str:
    """The pytest-xdist group of a test (`--dist loadgroup` runs a group on one worker).

    Every test that uses the Docker engine, the registries or the Slurm cluster is in ONE group:
    they share one engine's images and containers (the cpu image is built, pushed, removed and
    pulled by some, run on the Slurm nodes by others: a run in parallel removed the containers of
    another), and the two-node cluster runs one exclusive job at a time, so parallel submissions
    would queue and the timeouts of the tests would measure the queue. Every other test stays
    with its module, whose module-scoped fixtures (replicas, resolved locks) are then built once.

    The tests of the current engines (`engine_hosts`) are in that group too. Beside it, in a
    group of their own, the small image's push/pull test (in "services": it needs a registry)
    and the cpu builds of test_engines_cpu ran on the same containerd engine at once, and once
    the pulled image read back without its labels; in one group the engine tests never overlap.
    It costs time: 33.8 min of tests on a clean clone, against 27.6 min with a group of their
    own (docs/benchmarks.md).
    """
    marks = {mark.name for mark in item.iter_markers()}
    if marks & {"docker", "registry", "slurm", "engines"}:
        return "services"
    return item.nodeid.split("::", 1)[0]


def registry_status(hostport: str) -> int | None:
    """HTTP status of `GET http://HOSTPORT/v2/` (200 open, 401 auth required); None if down."""
    try:
        with urllib.request.urlopen(f"http://{hostport}/v2/", timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker SDK client for the engine at DOCKER_HOST (default: the local socket)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        service_missing(f"no Docker engine at {where}: {exc}")
    try:
        yield client
    finally:
        client.close()


def _registry(variable: str, default: str, expected_status: int) -> str:
    hostport = os.environ.get(variable, default)
    status = registry_status(hostport)
    if status != expected_status:
        seen = "nothing answers" if status is None else f"GET /v2/ gave HTTP {status}"
        service_missing(
            f"no registry at {hostport} ({variable}): {seen}, expected HTTP {expected_status}"
        )
    return hostport


@pytest.fixture(scope="session")
def registry() -> str:
    """HOST:PORT of the local registry without auth (ENVBUILDER_TEST_REGISTRY)."""
    return _registry("ENVBUILDER_TEST_REGISTRY", DEFAULT_REGISTRY, 200)


@pytest.fixture(scope="session")
def auth_registry() -> str:
    """HOST:PORT of the local htpasswd registry (ENVBUILDER_TEST_AUTH_REGISTRY)."""
    return _registry("ENVBUILDER_TEST_AUTH_REGISTRY", DEFAULT_AUTH_REGISTRY, 401)


@pytest.fixture(scope="session")
def auth_registry_credentials(auth_registry: str) -> tuple[str, str]:
    """(user, password) that the auth registry accepts."""
    return (
        os.environ.get("ENVBUILDER_TEST_AUTH_USER", DEFAULT_AUTH_USER),
        os.environ.get("ENVBUILDER_TEST_AUTH_PASSWORD", DEFAULT_AUTH_PASSWORD),
    )


@dataclass(frozen=True)
class SlurmCluster:
    """The local Slurm cluster: its slurm.conf and node names; `run` calls its client commands."""

    conf: Path
    nodes: tuple[str, ...]

    def env(self) -> dict[str, str]:
        """This process's environment with SLURM_CONF pointing at the cluster's slurm.conf."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(
        self, *args: str, timeout: float = 120, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (sinfo, srun, sbatch, ...) against this cluster; never raises on
        a non-zero exit (tests assert on it), but a hang past `timeout` does raise."""
        return subprocess.run(
            list(args),
            env=self.env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def node_states(self) -> dict[str, str]:
        """{node: sinfo short state}, e.g. {"n1": "idle", "n2": "alloc"}; {} if sinfo fails."""
        result = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=30)
        if result.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in result.stdout.splitlines():
            node, _, state = line.strip().partition(" ")
            if node:
                states[node] = state.strip()
        return states


def _slurm_conf_path() -> Path:
    configured = os.environ.get("SLURM_CONF")
    return Path(configured) if configured else DEFAULT_SLURM_CONF


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The two-node cluster (n1, n2 on 127.0.0.1) of `.ci/services.sh`, every node answering."""
    conf = _slurm_conf_path()
    if shutil.which("sinfo") is None:
        service_missing("no Slurm client (sinfo) on PATH: the Slurm cluster is not installed")
    if not conf.is_file():
        service_missing(f"no Slurm cluster: {conf} (SLURM_CONF) does not exist")
    cluster = SlurmCluster(conf=conf, nodes=SLURM_NODES)
    try:
        states = cluster.node_states()
    except subprocess.TimeoutExpired:
        states = {}
    seen = {node: states.get(node, "absent") for node in SLURM_NODES}
    if any(state not in SLURM_UP_STATES for state in seen.values()):
        seen_text = ", ".join(f"{node}={state}" for node, state in seen.items())
        service_missing(f"the Slurm cluster of {conf} is not up: sinfo says {seen_text}")
    return cluster


def drop_tags(host: str, repository: str) -> None:
    """Remove every tag of `repository` on the engine at `host` (DOCKER_HOST), so the next
    build writes its image again (the engine's layer cache stays)."""
    import docker

    client = docker.DockerClient(base_url=host, timeout=600)
    try:
        for image in client.images.list(name=repository):
            for name in image.tags:
                client.images.remove(name, force=True)
    finally:
        client.close()


def parse_engine_hosts(value: str) -> dict[str, str]:
    """`NAME=DOCKER_HOST NAME=DOCKER_HOST ...` (ENVBUILDER_TEST_ENGINES) as {name: DOCKER_HOST}."""
    hosts: dict[str, str] = {}
    for pair in value.split():
        name, sep, host = pair.partition("=")
        if not (name and sep and host):
            raise ValueError(f"ENVBUILDER_TEST_ENGINES: {pair!r} is not NAME=DOCKER_HOST")
        hosts[name] = host
    return hosts


@pytest.fixture(scope="session")
def engine_hosts() -> dict[str, str]:
    """{name: DOCKER_HOST} of the current engines (ENVBUILDER_TEST_ENGINES; .ci/services.sh's
    sockets when unset). Whether each answers is the test's to check (`service_missing`)."""
    value = os.environ.get("ENVBUILDER_TEST_ENGINES")
    if value is None:
        return dict(DEFAULT_TEST_ENGINES)
    hosts = parse_engine_hosts(value)
    if not hosts:
        service_missing("ENVBUILDER_TEST_ENGINES is empty: no current engines were started")
    return hosts

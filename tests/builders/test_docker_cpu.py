"""Issue 5's acceptance on the shipped CPU env: build, validate, static checks, push/pull by digest.

Uses a copy of the checkout's spec, lockfiles/ and dockerfiles/ (the lock's [artifacts] get
written there, not in the working tree) and the user's wheel cache, so a second run rebuilds
nothing. One image for the whole module; the cold build takes a few minutes on CI's 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from clirun import in_project

from envbuilder.builders.docker import image_tag
from envbuilder.core.imagedefs import LOCK_LABEL
from envbuilder.core.project import Project
from envbuilder.lock import lockfile

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu"


@pytest.fixture(scope="module")
def cpu_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A copy of the checkout's CPU env inputs (skip/fail when they are not there)."""
    inputs = [ROOT / "environments.toml", ROOT / "lockfiles", ROOT / "dockerfiles" / ENV]
    missing = [str(p.relative_to(ROOT)) for p in inputs if not p.exists()]
    if missing:
        pytest.fail(f"the checkout lacks {', '.join(missing)} (run envbuilder lock/render)")
    root = tmp_path_factory.mktemp("cpu-project")
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / ENV, root / "dockerfiles" / ENV)
    return Project.from_spec(root / "environments.toml")


@pytest.fixture(scope="module")
def cpu_image(docker_client: Any, cpu_project: Project) -> str:
    """The CPU image's tag, built through the CLI (`envbuilder build --target docker`)."""
    assert in_project(cpu_project, "build", "--target", "docker", "--env", ENV) == 0
    lock = lockfile.load_env_lock(cpu_project, ENV)
    assert lock is not None
    return image_tag(ENV, lock.targets["docker"].pylock_sha256)


@pytest.fixture(scope="module")
def cpu_host(docker_client: Any, cpu_image: str) -> Iterator[Any]:
    testinfra = pytest.importorskip("testinfra")
    container = docker_client.containers.run(cpu_image, ["sleep", "infinity"], detach=True)
    try:
        yield testinfra.get_host(f"docker://{container.id}")
    finally:
        with contextlib.suppress(docker.errors.NotFound):  # the pull test removes it first
            container.remove(force=True)


def test_build_labels_and_records_the_image(
    docker_client: Any, cpu_project: Project, cpu_image: str
) -> None:
    lock = lockfile.load_env_lock(cpu_project, ENV)
    assert lock is not None
    image = docker_client.images.get(cpu_image)
    assert image.labels[LOCK_LABEL] == lock.targets["docker"].pylock_sha256
    assert lock.artifacts["docker"]["image_id"] == image.id


def test_probe_passes_inside_the_image(cpu_project: Project, cpu_image: str) -> None:
    code = in_project(
        cpu_project,
        "validate",
        "--target",
        "docker",
        "--env",
        ENV,
        "--level",
        "quick",
        "--expect",
        "cpu",
    )
    report = json.loads((cpu_project.reports / "cpu.docker.json").read_text())
    assert code == 0, report
    assert report["status"] == "pass"
    assert report["labels"] == {"env": "cpu", "target": "docker"}
    assert report["fingerprint"]["torch"].startswith("2.13.0")
    conformance = next(c for c in report["checks"] if c["name"] == "conformance")
    release = conformance["details"]["release"]  # issue 24: what was expected and found
    assert release["expected"] == {"accelerator": "cpu", "rocm": None, "hip": None, "gfx": []}
    assert release["summary"] == "no ROCm expected (cpu env): torch 2.13.0+cpu, no GPU"


def test_static_image_checks(cpu_host: Any, docker_client: Any, cpu_image: str) -> None:
    user = cpu_host.user()
    assert (user.uid, user.name) == (1000, "envbuilder")
    assert cpu_host.run("command -v python").stdout.strip() == "/opt/venv/bin/python"
    version = cpu_host.run("python -c 'import torch; print(torch.__version__)'").stdout
    assert version.strip() == "2.13.0+cpu"
    env = cpu_host.environment()
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert env["PYTHONUNBUFFERED"] == "1"
    labels = docker_client.images.get(cpu_image).labels
    assert labels["org.envbuilder.env"] == "cpu"


def test_no_wheels_caches_ca_or_proxy_in_the_image(
    cpu_host: Any, docker_client: Any, cpu_image: str
) -> None:
    found = cpu_host.run(
        "find / -xdev \\( -name '*.whl' -o -name ca.crt -o -path /tmp/envbuilder "
        "-o -path '*/.cache/pip' -o -name requirements.txt -path '*envbuilder*' \\) "
        "-print 2>/dev/null"
    ).stdout
    assert found == ""
    assert cpu_host.run("ls /var/lib/apt/lists | grep -v -x -e lock -e partial").stdout == ""
    assert cpu_host.run("ls /var/cache/apt | grep '[.]bin$'").stdout == ""
    assert "proxy" not in cpu_host.run("env").stdout.lower()
    image = docker_client.images.get(cpu_image)
    text = (json.dumps(image.history()) + json.dumps(image.attrs["Config"])).lower()
    for word in ("proxy", "ca.crt", ".whl", "/tmp/envbuilder"):
        assert word not in text, word


def test_push_remove_pull_validate(
    docker_client: Any,
    cpu_project: Project,
    cpu_image: str,
    cpu_host: Any,
    registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no credentials needed here
    (tmp_path / "config.json").write_text("{}")
    assert (
        in_project(cpu_project, "push", "--env", ENV, "--registry", f"{registry}/envbuilder-ci")
        == 0
    )
    lock = lockfile.load_env_lock(cpu_project, ENV)
    assert lock is not None
    digest_ref = lock.artifacts["docker"]["repo_digest"]
    assert digest_ref.startswith(f"{registry}/envbuilder-ci/cpu@sha256:")

    image_id = docker_client.images.get(cpu_image).id
    # The static checks are done: free the image (its testinfra container goes too).
    for container in docker_client.containers.list(all=True, filters={"ancestor": image_id}):
        container.remove(force=True)
    docker_client.images.remove(image_id, force=True)
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(image_id)

    assert in_project(cpu_project, "pull", "--env", ENV) == 0
    assert docker_client.images.get(cpu_image).id == image_id
    assert in_project(cpu_project, "validate", "--target", "docker", "--env", ENV) == 0

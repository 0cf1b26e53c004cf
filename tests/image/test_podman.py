"""The cpu env on podman (issue 29): `build`, `run` and `validate --target docker` against podman
5's Docker-compatible API (the `podman` engine of ENVBUILDER_TEST_ENGINES, rootful), one build.

A scratch copy of the project (spec, lockfiles/, dockerfiles/cpu) takes the lock's [artifacts];
each command runs as a user's shell runs it (`python -m envbuilder`, DOCKER_HOST=podman's socket).
The written image is removed first and built again (from podman's cached steps: CI's time;
`build --verify`, every step again, gave the same digest on 2026-12-05, docs/benchmarks.md):
podman's buildah must give the image the committed lock predicts (the canonical layers and
history of repro format 4 make buildah's wording of its steps and its io.buildah.version label
irrelevant), so the lock is left as it is.

Measured on a 2-core machine shared with other work (load 5): 234 s with podman's cache cold (the
build about 3.5 minutes of it, validate about 45 s), 43 s when podman has the image already (the
build finds it up to date).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import requests.exceptions
from clirun import as_process
from conftest import drop_tags, service_missing

from envbuilder.core.errors import BuildError
from envbuilder.core.progress import no_progress
from envbuilder.image import engine, engine_streams

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu"


@pytest.fixture(scope="module")
def podman_host(engine_hosts: dict[str, str]) -> str:
    """DOCKER_HOST of the podman engine .ci/services.sh starts, answering."""
    host = engine_hosts.get("podman")
    if host is None:
        service_missing("ENVBUILDER_TEST_ENGINES lists no podman engine")
    try:
        client = docker.DockerClient(base_url=host, timeout=30)
        client.ping()
        client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        service_missing(f"the podman engine at {host} does not answer: {exc}")
    return host


def _scratch_project(root: Path) -> Path:
    (root / "dockerfiles").mkdir(parents=True)
    for path in ("environments.toml", "lockfiles", f"dockerfiles/{ENV}"):
        source, dest = ROOT / path, root / path
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copy(source, dest)
    return root


def _artifacts(project: Path) -> dict[str, Any]:
    lock = tomllib.loads((project / "lockfiles" / f"{ENV}.lock.toml").read_text())
    return dict(lock["artifacts"]["docker"])


def _locked_torch(project: Path) -> str:
    pylock = tomllib.loads((project / "lockfiles" / "pylock.cpu-docker.toml").read_text())
    return next(str(p["version"]) for p in pylock["packages"] if p["name"] == "torch")


def test_build_run_validate_on_podman(podman_host: str, tmp_path: Path) -> None:
    project = _scratch_project(tmp_path / "project")
    env = {**os.environ, "DOCKER_HOST": podman_host}
    committed = _artifacts(project)

    # written again, from podman's cached steps (CI's time)
    drop_tags(podman_host, f"envbuilder/{ENV}")
    build = as_process("build", "--env", ENV, "--target", "docker", cwd=project, env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    recorded = _artifacts(project)
    assert recorded == committed  # podman built the image the committed lock predicts
    podman = docker.DockerClient(base_url=podman_host, timeout=600)
    try:
        image = podman.images.get(recorded["tag"])
        # podman names an image by its config digest, which the lock records as image_id.
        assert image.id == recorded["image_id"]
        assert image.labels["org.envbuilder.env"] == ENV
    finally:
        podman.close()
    assert recorded["layers"] == committed["layers"], "podman's layers are not the lock's"

    run = as_process(
        "run",
        "--env",
        ENV,
        "--target",
        "docker",
        "--",
        "python",
        "-c",
        "import torch; print(torch.__version__)",
        cwd=project,
        env=env,
        quiet=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == _locked_torch(project)

    validate = as_process("validate", "--env", ENV, "--target", "docker", cwd=project, env=env)
    assert (project / "reports" / f"{ENV}.docker.json").is_file(), validate.stdout + validate.stderr
    report = json.loads((project / "reports" / f"{ENV}.docker.json").read_text())
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert report["status"] == "pass"
    assert report["engine"]["product"] == "podman"
    assert report["fingerprint"]["torch"] == _locked_torch(project)


def test_podman_build_steps_are_reported_and_quoted_on_failure() -> None:
    """buildah's step lines ("[1/3] STEP 4/6: RUN ...") are steps, as Docker's "Step 4/6 : ..."."""
    seen: list[tuple[str, int, int | None]] = []

    def progress(what: str, done: int, total: int | None) -> None:
        seen.append((what, done, total))

    state = engine_streams.BuildState()
    for text in (
        "[1/3] STEP 1/6: FROM debian:bookworm-slim AS runtime\n",
        "[1/3] STEP 4/6: RUN apt-get update\n",
        "E: Failed to fetch\n",
    ):
        engine_streams.on_build_event({"stream": text}, state, progress)
    engine_streams.on_build_event(
        {"stream": "STEP 2/2: USER 1000\n"}, engine_streams.BuildState(), progress
    )
    assert [s for s in seen if "step" in s[0]] == [
        ("stage 1/3, step 1/6: FROM debian:bookworm-slim AS runtime", 1, 6),
        ("stage 1/3, step 4/6: RUN apt-get update", 4, 6),
        ("step 2/2: USER 1000", 2, 2),
    ]
    with pytest.raises(BuildError) as failed:
        engine_streams.on_build_event({"error": "exit status 100"}, state, no_progress)
    assert str(failed.value) == (
        "docker build failed at stage 1/3, step 4/6 (RUN apt-get update): exit status 100\n"
        "  last output of that step:\n    E: Failed to fetch"
    )


def test_podman_gets_nvidia_gpus_as_a_cdi_device() -> None:
    """podman's compat API drops Docker's `capabilities=[["gpu"]]` request; a CDI one it keeps."""
    (request,) = engine.device_run_options("nvidia", podman=True)["device_requests"]
    assert request["Driver"] == "cdi"
    assert request["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert engine.device_run_options("cpu", podman=True) == engine.device_run_options("cpu")

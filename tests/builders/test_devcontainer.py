"""Dev Containers (issue 23): `.devcontainer/<env>/devcontainer.json` rendered per docker env,
tested with the real Dev Containers CLI (@devcontainers/cli from npm, which .ci/services.sh
installs) against the real engine: `devcontainer up` of the shipped cpu env's image, then
`devcontainer exec python -c "import torch"` inside it, as the image's non-root user."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from conftest import in_ci, service_missing
from shipped import copy_shipped

from envbuilder.builders.devcontainer import devcontainer_path, document, run_args
from envbuilder.commands._cli import main
from envbuilder.core.project import Project
from envbuilder.image import runflags
from envbuilder.lock import lockfile
from envbuilder.lock.record import record_artifact
from envbuilder.spec.load import load_spec

ENV = "cpu"
CLI_ENV = "ENVBUILDER_DEVCONTAINER_CLI"


def jsonc(data: bytes) -> dict[str, Any]:
    """devcontainer.json without its // comment lines (the header)."""
    text = "\n".join(
        line for line in data.decode("utf-8").splitlines() if not line.lstrip().startswith("//")
    )
    parsed: dict[str, Any] = json.loads(text)
    return parsed


# --- what is rendered ----------------------------------------------------------------------------


def test_the_shipped_cpu_env_names_its_local_image_and_no_devices() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = jsonc((root / ".devcontainer" / ENV / "devcontainer.json").read_bytes())
    lock = lockfile.load_env_lock(Project.from_spec(root / "environments.toml"), ENV)
    assert lock is not None
    assert doc["image"] == f"envbuilder/cpu:{lock.targets['docker'].pylock_sha256[:12]}"
    assert doc["runArgs"] == []  # a CPU env: no device flags
    assert (doc["remoteUser"], doc["updateRemoteUserUID"]) == ("envbuilder", False)


def test_a_pushed_image_is_named_by_its_digest(tmp_path: Path) -> None:
    project = Project.from_spec(copy_shipped(tmp_path) / "environments.toml")
    digest = "127.0.0.1:5000/envbuilder/cpu@sha256:" + "ab" * 32
    record_artifact(project, ENV, "docker", repo_digest=digest)
    assert main(["-q", "render", "--env", ENV, "--spec", str(project.spec_path)]) == 0
    assert jsonc(devcontainer_path(project, ENV).read_bytes())["image"] == digest
    assert main(["-q", "render", "--check", "--spec", str(project.spec_path)]) == 0


def test_rocm_run_args_are_validates_flags_with_the_hosts_gids_from_the_environment() -> None:
    args = run_args("native-rocm")
    flags = runflags.host_run_flags("native-rocm", lambda name: None)
    own = dataclasses.replace(flags, security_opt=(), cap_add=(), gpu_request=False)
    assert args[: len(runflags.cli_arguments(own))] == runflags.cli_arguments(own)
    assert "--device=/dev/kfd" in args and "--device=/dev/dri" in args
    assert not [a for a in args if a.startswith(("--cap-add", "--security-opt", "--gpus"))]
    assert args[len(runflags.cli_arguments(own)) :] == [
        "--group-add=${localEnv:ENVBUILDER_GID_VIDEO:video}",
        "--group-add=${localEnv:ENVBUILDER_GID_RENDER:render}",
    ]


def _doc(accelerator: Literal["rocm", "cuda", "cpu"]) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    spec = load_spec(root / "environments.toml")
    cpu_lock = lockfile.load_env_lock(Project.from_spec(root / "environments.toml"), ENV)
    assert cpu_lock is not None
    env = spec.env("rocm714") if accelerator == "rocm" else spec.env(ENV)
    # the lock only names the image here
    return document(dataclasses.replace(env, accelerator=accelerator), cpu_lock)


def test_a_rocm_env_gets_the_rocm_host_flags_in_the_specs_properties() -> None:
    doc = _doc("rocm")
    flags = runflags.host_run_flags("native-rocm", lambda name: None)
    assert doc["runArgs"] == run_args("native-rocm")
    assert doc["capAdd"] == list(flags.cap_add) and doc["securityOpt"] == list(flags.security_opt)
    # No hostRequirements.gpu: the Dev Containers CLI honours it with NVIDIA's --gpus only
    # (it warns on an AMD host); /dev/kfd and /dev/dri come with the device flags.
    assert "hostRequirements" not in doc
    assert any("/dev/kfd" in a for a in doc["runArgs"]), doc["runArgs"]


def test_a_cuda_env_asks_for_an_optional_gpu() -> None:
    doc = _doc("cuda")
    assert doc["hostRequirements"] == {"gpu": "optional"}
    assert "--gpus=all" not in doc["runArgs"]  # the CLI adds it where the host has a GPU


def test_a_cpu_env_has_no_gpu_requirement_nor_gid_check() -> None:
    doc = _doc("cpu")
    assert "hostRequirements" not in doc and "initializeCommand" not in doc


def _initialize(command: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The initializeCommand as the Dev Containers tooling runs it: ${localEnv:NAME}
    substituted with the host's variable ("" when unset), then run by sh on the host."""
    text = re.sub(r"\$\{localEnv:(\w+)\}", lambda m: environ.get(m.group(1), ""), command)
    return subprocess.run(
        ["sh", "-c", text], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    ("environ", "ok"),
    [
        ({"ENVBUILDER_GID_VIDEO": "44", "ENVBUILDER_GID_RENDER": "992"}, True),
        ({"ENVBUILDER_GID_VIDEO": "44"}, False),
        ({}, False),
    ],
)
def test_the_initialize_command_stops_on_an_unset_gid(environ: dict[str, str], ok: bool) -> None:
    done = _initialize(_doc("rocm")["initializeCommand"], environ)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "export ENVBUILDER_GID_RENDER=$(getent group render | cut -d: -f3)" in done.stderr


# --- the real CLI against the real engine --------------------------------------------------------


def _devcontainer_cli() -> str:
    found = os.environ.get(CLI_ENV) or shutil.which("devcontainer")
    if not found or not Path(found).exists():
        reason = (
            f"the Dev Containers CLI is not installed (npm install @devcontainers/cli; "
            f"{CLI_ENV} names its `devcontainer`, as .ci/services.sh exports it)"
        )
        service_missing(reason)
    assert found is not None
    return found


@pytest.fixture
def up(docker_client: Any, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """The cpu env's dev container, up (the image built first), removed afterwards."""
    cli = _devcontainer_cli()
    project = copy_shipped(tmp_path / "project")
    assert main(["-q", "build", "--target", "docker", "--env", ENV,
                 "--spec", str(project / "environments.toml")]) == 0  # fmt: skip
    label = f"envbuilder.test={uuid.uuid4().hex}"
    where = [
        "--workspace-folder", str(project),
        "--config", str(project / ".devcontainer" / ENV / "devcontainer.json"),
        "--id-label", label,
    ]  # fmt: skip
    try:
        result = subprocess.run(
            [cli, "up", *where], capture_output=True, text=True, timeout=600, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        outcome = json.loads(result.stdout.strip().splitlines()[-1])
        assert outcome["outcome"] == "success", outcome
        yield cli, where
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": label}):
            container.remove(force=True)


@pytest.mark.slow
def test_devcontainer_up_then_exec_imports_torch(up: tuple[str, list[str]]) -> None:
    cli, where = up
    script = "import os, torch; print(torch.__version__, os.getuid(), os.getcwd())"
    result = subprocess.run(
        [cli, "exec", *where, "python", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    version, uid, cwd = result.stdout.strip().splitlines()[-1].split()
    assert (version, uid) == ("2.13.0+cpu", "1000")
    assert cwd.startswith("/workspaces/")  # the CLI mounted the project folder


def test_cli_is_installed_in_ci() -> None:
    if not in_ci():
        pytest.skip("outside CI the Dev Containers CLI is optional")
    _devcontainer_cli()

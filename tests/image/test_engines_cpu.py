"""Issue 29's acceptance on the current engines: the shipped cpu env from the committed lock.

On Debian sid's dockerd 28 with the containerd image store and with the classic store (the
engines `.ci/services.sh` runs beside Debian 12's, `engine_hosts`), in a copy of the checkout:

* `envbuilder build --target docker --env cpu` writes the image again (the engine's cached
  steps; the written tag removed first) and gets the digest the committed lock predicts, so the
  lock is left byte for byte as committed; on the containerd store `--verify` also rebuilds
  every step without cache to the same digest;
* `validate` passes, says the image is the one the lock predicts, and its report names the
  engine and image store that ran it;
* `run` runs a command in the image;
* on the containerd store, `build --target wsl2` writes the `.wsl` whose sha256 the committed
  lock records.

The same chain on Debian 12's engine is tests/builders/test_docker_cpu.py and
tests/image/test_repro_build.py;
the tiny-image contract (push and pull by digest included) on every engine,
tests/image/test_engines.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from clirun import as_process
from conftest import drop_tags

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu"
STORES = {"sid-containerd": "containerd", "sid-classic": "classic"}


@dataclass(frozen=True)
class Scratch:
    """A copy of the checkout's cpu env inputs, and the environment that points at one engine."""

    root: Path
    env: dict[str, str]
    engine: str

    def run(self, *argv: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        return as_process(*argv, cwd=self.root, env=self.env, timeout=timeout)

    def lock_bytes(self) -> bytes:
        return (self.root / "lockfiles" / f"{ENV}.lock.toml").read_bytes()


@pytest.fixture(scope="module", params=sorted(STORES))
def scratch(
    request: pytest.FixtureRequest,
    engine_hosts: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Scratch:
    name = str(request.param)
    if name not in engine_hosts:
        pytest.fail(f"ENVBUILDER_TEST_ENGINES names no {name} engine", pytrace=False)
    root = tmp_path_factory.mktemp(f"cpu-{name}")
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    for folder in ("dockerfiles", "wsl"):
        shutil.copytree(ROOT / folder / ENV, root / folder / ENV)
    env = {**os.environ, "DOCKER_HOST": engine_hosts[name]}
    return Scratch(root, env, name)


@pytest.fixture(scope="module")
def verified(scratch: Scratch) -> Scratch:
    """A build from the committed lock on the scratch's engine: the image written again (from
    the engine's cached steps) must be the one the lock predicts, so the lock is unchanged."""
    drop_tags(scratch.env["DOCKER_HOST"], f"envbuilder/{ENV}")
    before = scratch.lock_bytes()
    done = scratch.run("build", "--target", "docker", "--env", ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(built)" in done.stdout
    assert scratch.lock_bytes() == before  # the engine reproduced the committed prediction
    return scratch


def test_build_reproduces_the_committed_digest(verified: Scratch) -> None:
    # (the fixture holds the assertions; this names them in the report)
    assert (verified.root / "lockfiles" / f"{ENV}.lock.toml").is_file()


def test_build_verify_rebuilds_without_cache_to_the_committed_digest(verified: Scratch) -> None:
    if verified.engine != "sid-containerd":
        pytest.skip("--verify (every step again) on the containerd store only (CI's time)")
    before = verified.lock_bytes()
    done = verified.run("build", "--target", "docker", "--env", ENV, "--verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified: the digest the lock records" in done.stdout
    assert verified.lock_bytes() == before


def test_validate_passes_and_names_the_engine(verified: Scratch) -> None:
    done = verified.run("validate", "--target", "docker", "--env", ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is the image the lock predicts" in done.stderr
    report = json.loads((verified.root / "reports" / f"{ENV}.docker.json").read_text())
    assert report["engine"]["image_store"] == STORES[verified.engine]
    assert report["engine"]["version"].startswith("28.")


def test_run_runs_a_command_in_the_image(verified: Scratch) -> None:
    code = "import torch; print(torch.__version__)"
    done = verified.run("run", "--env", ENV, "--target", "docker", "--", "python", "-c", code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "2.13.0+cpu"


def test_the_wsl_file_has_the_committed_sha256(verified: Scratch) -> None:
    if verified.engine != "sid-containerd":
        pytest.skip("the .wsl is checked on the containerd store only (CI's time)")
    before = verified.lock_bytes()
    done = verified.run("build", "--target", "wsl2", "--env", ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert verified.lock_bytes() == before

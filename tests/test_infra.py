"""The test infrastructure itself: CI scripts, the skip-locally/fail-in-CI rule, the services.

The first tests need no service, so a test run never collects nothing (pytest exit 5).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import in_ci, registry_status, service_missing

ROOT = Path(__file__).resolve().parent.parent
CI_SCRIPTS = [ROOT / ".ci" / "services.sh", ROOT / ".ci" / "run"]

_PROBE_TESTS = """
def test_engine(docker_client):
    pass

def test_registry(registry):
    pass

def test_auth_registry(auth_registry):
    pass
"""


def _run_fixture_probe(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    """Run three fixture-using tests in a child pytest with every service pointed nowhere."""
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_probe.py").write_text(_PROBE_TESTS)
    env = dict(os.environ)
    env.update(
        CI=ci,
        # Port 9 (discard) on loopback: nothing listens there on any sane machine.
        DOCKER_HOST="tcp://127.0.0.1:9",
        ENVBUILDER_TEST_REGISTRY="127.0.0.1:9",
        ENVBUILDER_TEST_AUTH_REGISTRY="127.0.0.1:9",
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("script", CI_SCRIPTS, ids=lambda p: p.name)
def test_ci_scripts_are_executable_and_strict(script: Path) -> None:
    text = script.read_text()
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text


@pytest.mark.parametrize("script", CI_SCRIPTS, ids=lambda p: p.name)
def test_ci_scripts_pass_shellcheck(script: Path) -> None:
    if shutil.which("shellcheck") is None:
        service_missing("shellcheck is not installed")
    result = subprocess.run(
        ["shellcheck", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_missing_services_skip_locally_with_a_reason(tmp_path: Path) -> None:
    result = _run_fixture_probe(tmp_path, ci="")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 skipped" in result.stdout
    assert "no Docker engine at tcp://127.0.0.1:9" in result.stdout
    assert "no registry at 127.0.0.1:9" in result.stdout
    assert ".ci/services.sh" in result.stdout


def test_missing_services_fail_under_ci(tmp_path: Path) -> None:
    result = _run_fixture_probe(tmp_path, ci="true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 errors" in result.stdout or "3 failed" in result.stdout, result.stdout
    assert "CI=true requires it" in result.stdout


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("1", True), ("", False), ("false", False)]
)
def test_in_ci_reads_the_ci_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_registry_status_of_a_closed_port_is_none() -> None:
    assert registry_status("127.0.0.1:9") is None


def test_registries_answer_as_configured(registry: str, auth_registry: str) -> None:
    assert registry_status(registry) == 200
    # htpasswd realm: anonymous requests are refused.
    assert registry_status(auth_registry) == 401


def test_seeded_base_image_is_served_by_the_mirror(docker_client: Any) -> None:
    data = docker_client.images.get_registry_data("debian:bookworm-slim")
    assert data.id.startswith("sha256:")
    image = docker_client.images.pull("debian:bookworm-slim")
    assert image.attrs["Os"] == "linux"


def test_seeded_base_image_has_a_working_apt_and_no_python(docker_client: Any) -> None:
    # apt-get must find packages (our Dockerfiles install python3 that way); the official slim
    # image ships no python, and neither must the seed, or renders would pass here only.
    out = docker_client.containers.run(
        "debian:bookworm-slim",
        ["bash", "-c", "apt-cache policy apt | head -1; command -v python3 || echo no-python"],
        remove=True,
    ).decode()
    assert "apt:" in out
    assert "no-python" in out

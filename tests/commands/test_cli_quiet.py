"""`-q/--quiet` works before and after the command's name (issue 17): `envbuilder build -q ...`
as well as `envbuilder -q build ...`; either way no progress or status line reaches stderr and
stdout is what it is without -q. Real processes on real files (the shipped spec and locks, and a
small env of two local wheels that locks and builds offline)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clirun import as_process
from shipped import copy_shipped
from test_lock_support import FAKE_INDEX_URL, make_wheel

ROOT = Path(__file__).resolve().parents[2]

SMALL_SPEC = """
[indexes.fake]
url = "{url}"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu", "tinydep==2.0"]
index_pins = {{ tinytorch = "fake", tinydep = "fake" }}
targets = ["native"]
"""


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path)


def small_project(root: Path) -> tuple[Path, dict[str, str]]:
    """A spec whose env `small` resolves and builds offline from a folder of two wheels."""
    mirror = root / "mirror"
    make_wheel(mirror, "tinytorch", "1.0+cpu", requires=("tinydep",))
    make_wheel(mirror, "tinydep", "2.0")
    project = root / "project"
    project.mkdir()
    (project / "environments.toml").write_text(
        SMALL_SPEC.format(url=FAKE_INDEX_URL, mirror=mirror), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILDER_MIRROR_")}
    env["ENVBUILDER_CACHE"] = str(root / "cache")
    return project, env


@pytest.mark.parametrize(
    "argv",
    [
        ["-q", "render", "--check"],
        ["render", "-q", "--check"],
        ["render", "--check", "-q"],
        ["render", "--check", "--quiet"],
        ["--quiet", "render", "--check"],
    ],
)
def test_quiet_before_or_after_the_command(shipped: Path, argv: list[str]) -> None:
    loud = as_process("render", "--check", cwd=shipped)
    assert loud.returncode == 0 and "rendered files are up to date" in loud.stderr
    quiet = as_process(*argv, cwd=shipped)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert quiet.stdout == loud.stdout


def test_quiet_after_lock_silences_its_progress(tmp_path: Path) -> None:
    project, env = small_project(tmp_path)
    locked = as_process("lock", "-q", env=env, cwd=project)
    assert locked.returncode == 0, locked.stderr
    assert locked.stderr == ""
    assert "small: wrote lockfiles/small.lock.toml" in locked.stdout  # results stay


def test_build_quiet_after_the_command(tmp_path: Path) -> None:
    """The issue's own example: `envbuilder build -q ...`."""
    project, env = small_project(tmp_path)
    assert as_process("-q", "lock", env=env, cwd=project).returncode == 0
    built = as_process("build", "-q", "--target", "native", "--env", "small", env=env, cwd=project)
    assert built.returncode == 0, built.stderr
    assert built.stderr == ""
    assert built.stdout.startswith("small native ")
    again = as_process("build", "--target", "native", "--env", "small", env=env, cwd=project)
    assert "venv is current" in again.stderr  # without -q the status lines are there


def test_quiet_does_not_hide_errors(shipped: Path) -> None:
    failed = as_process("build", "-q", "--target", "docker", "--env", "nosuch", cwd=shipped)
    assert failed.returncode == 2
    assert "error: " in failed.stderr and "no environment 'nosuch'" in failed.stderr


def test_quiet_is_in_each_commands_help(shipped: Path) -> None:
    proc = as_process("lock", "--help", cwd=shipped)
    assert "-q, --quiet" in proc.stdout

"""Input files that are not regular files: a spec or a pylock that is a FIFO made `check`,
`lock --check` and `build` wait forever for a writer; a spec that is /dev/zero read until memory
ran out (a MemoryError traceback). Each is now one message naming the path and what it is, exit
1, nothing written. Real processes with a timeout, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from clirun import as_process
from shipped import copy_shipped

from envbuilder.core.fsutil import sha256_file


def envbuilder(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": f"unix://{cwd}/no-engine.sock", "UV_OFFLINE": "1"}
    return as_process(*args, cwd=cwd, env=env, timeout=60)


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else "fifo" if p.is_fifo() else sha256_file(p)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("command", ["check", "lock --check", "render --check"])
def test_a_fifo_spec_is_refused_at_once(tmp_path: Path, command: str) -> None:
    spec = tmp_path / "environments.toml"
    os.mkfifo(spec)
    proc = envbuilder(*command.split(), "--spec", str(spec), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "it is a named pipe (FIFO), not a regular file" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environments.toml"]


def test_a_device_spec_is_refused_without_reading_it(tmp_path: Path) -> None:
    proc = envbuilder("check", "--spec", "/dev/zero", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "/dev/zero: file: error: cannot be read (it is a device, not a regular file)" in (
        proc.stdout
    )
    assert "Traceback" not in proc.stderr


def test_a_big_spec_is_refused_without_reading_it(tmp_path: Path) -> None:
    spec = tmp_path / "environments.toml"
    with spec.open("wb") as fh:  # sparse: no disk used
        fh.truncate(65 * 1024 * 1024)
    proc = envbuilder("check", "--spec", str(spec), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "it is over 64 MiB" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "command",
    ["lock --check", "build --target docker --env cpu", "build --target native --env cpu"],
)
def test_a_fifo_pylock_is_refused_at_once(tmp_path: Path, command: str) -> None:
    project = copy_shipped(tmp_path / "proj")
    pylock = project / "lockfiles" / "pylock.cpu-docker.toml"
    if "native" in command:
        pylock = pylock.with_name("pylock.cpu-native.toml")
    pylock.unlink()
    os.mkfifo(pylock)
    before = tree(tmp_path)
    proc = envbuilder(*command.split(), cwd=project)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"lockfiles/{pylock.name} cannot be read (it is a named pipe (FIFO)" in out
    assert "Traceback" not in out
    assert tree(tmp_path) == before

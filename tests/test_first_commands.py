"""The README's first commands hold on a fresh machine: a nox session whose Python is missing
fails instead of being skipped with exit 0 (nox's default outside CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _nox() -> str:
    found = Path(sys.executable).with_name("nox")
    if not found.is_file():
        pytest.fail(f"nox is not installed beside {sys.executable} (the test extra installs it)")
    return str(found)


def test_a_session_without_its_python_fails(tmp_path: Path) -> None:
    shutil.copy(REPO / "noxfile.py", tmp_path / "noxfile.py")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")}
    done = subprocess.run(
        [_nox(), "-f", "noxfile.py", "-s", "build-docker", "--force-python", "3.99", "--", "cpu"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Python interpreter 3.99 not found" in done.stderr and "failed" in done.stderr

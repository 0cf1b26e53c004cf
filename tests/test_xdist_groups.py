"""`nox -s tests` relies on pytest-xdist's `--dist loadgroup` keeping each group on one worker
(tests/conftest.py: the engine, registry and Slurm tests share one engine and one cluster). With
pytest 9.2 and pytest-xdist 3.8 the groups were silently ignored and those tests ran side by
side; this file fails if the installed pair does that again, and if conftest stops grouping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GROUPED = """
import os
from pathlib import Path

import pytest


@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(6))
def test_in_the_group(n: int) -> None:
    out = Path(os.environ["WORKERS_SEEN"])
    with out.open("a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
"""


def test_loadgroup_runs_a_group_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    seen = tmp_path / "workers"
    env = {**os.environ, "WORKERS_SEEN": str(seen)}
    argv = ["-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "test_grouped.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = seen.read_text(encoding="utf-8").split()
    assert len(workers) == 6
    assert len(set(workers)) == 1, f"one group ran on several workers: {sorted(set(workers))}"


def test_conftest_puts_every_test_in_a_group(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not installed: no groups to check")
    mark = request.node.get_closest_marker("xdist_group")
    assert mark is not None
    assert mark.args == ("tests/test_xdist_groups.py",)

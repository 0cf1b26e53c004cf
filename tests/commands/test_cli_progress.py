"""Progress output (issue 17): rich bars only on a terminal; when stderr is not a terminal (a
pipe, a CI log) each step prints one plain line when it starts, and there is no bar, no
percentage and no final bar line. Real processes: `envbuilder lock` and `build --target native`
of a small env that resolves offline from a folder of two wheels, with stderr a pipe or a pty."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_quiet import small_project

from envbuilder.core.ui import UI, StepLines

BAR = "\u2501"  # the character rich's BarColumn draws with


def test_lock_on_a_pipe_prints_each_step_once_and_no_bar(tmp_path: Path) -> None:
    project, env = small_project(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "lock"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "resolving small for x86_64-manylinux_2_28 (Python 3.11)",
        "resolved small",
    ]
    for mark in (BAR, "%", "\r", "\x1b", "-:--:--"):
        assert mark not in proc.stderr


def test_build_on_a_pipe_prints_plain_lines(tmp_path: Path) -> None:
    project, env = small_project(tmp_path)
    assert (
        subprocess.run(
            [sys.executable, "-m", "envbuilder", "-q", "lock"], cwd=project, env=env, check=False
        ).returncode
        == 0
    )
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "build", "--target", "native", "--env", "small"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    # A file fetch reports its bytes many times (a bar on a terminal): here one line each.
    assert lines.count("tinydep-2.0-py3-none-any.whl") == 1
    assert lines.count("tinytorch-1.0+cpu-py3-none-any.whl") == 1
    assert "small/native: venv ready" in lines
    for mark in (BAR, "%", "\r", "\x1b"):
        assert mark not in proc.stderr


def _run_on_a_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run envbuilder with stderr on a pseudo-terminal; (exit code, what the terminal got)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "envbuilder", *argv],
        cwd=cwd,
        env={**env, "TERM": "xterm", "COLUMNS": "120"},
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(controller)
    return proc.wait(timeout=600), b"".join(chunks).decode("utf-8", "replace")


def test_lock_on_a_terminal_draws_a_bar(tmp_path: Path) -> None:
    project, env = small_project(tmp_path)
    code, seen = _run_on_a_terminal(["lock"], project, env)
    assert code == 0, seen
    assert BAR in seen and "100%" in seen and "resolved small" in seen


def test_quiet_on_a_terminal_draws_nothing(tmp_path: Path) -> None:
    project, env = small_project(tmp_path)
    code, seen = _run_on_a_terminal(["lock", "-q"], project, env)
    assert code == 0
    assert seen == ""


def test_step_lines(capsys: pytest.CaptureFixture[str]) -> None:
    lines = StepLines(UI())
    lines("step 1/2: FROM x", 1, 2)
    lines("pull abc", 10, 100)
    lines("pull abc", 100, 100)
    lines("step 2/2: RUN y", 2, 2)
    lines("a message", 0, None)
    lines("a message", 0, None)  # messages are not steps: each one prints
    assert capsys.readouterr().err.splitlines() == [
        "step 1/2: FROM x",
        "pull abc",
        "step 2/2: RUN y",
        "a message",
        "a message",
    ]


def test_progress_with_quiet_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with UI(quiet=True).progress() as progress:
        progress("resolving", 0, 1)
        progress("a message", 0, None)
    assert capsys.readouterr() == ("", "")

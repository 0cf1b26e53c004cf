"""The one way tests run the envbuilder command line (issue 24: seven files had their own).

    in_project(project, *args) -> int            main(["-q", *args, "--spec", <project's spec>]),
                                                 in this process: the exit code
    captured(capsys, *argv) -> (int, str)        main(argv) in this process: the exit code and
                                                 stdout + stderr (what the user would read)
    as_process(*argv, cwd, env, timeout, quiet)  `python -m envbuilder ARGV` in a child process,
                                                 as a user's shell runs it: CompletedProcess

In-process runs are fast and show a traceback as a test failure; a child process is for what
only a real process shows (signals, exit codes of the interpreter, environment variables, the
console script's start-up).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from envbuilder.commands._cli import main
from envbuilder.core.project import Project


def in_project(project: Project, *args: str) -> int:
    """`envbuilder -q ARGS --spec <project's environments.toml>`, in this process."""
    return main(["-q", *args, "--spec", str(project.spec_path)])


def captured(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`envbuilder ARGV` in this process: its exit code and everything it printed."""
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def as_process(
    *argv: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    quiet: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python -m envbuilder [-q] ARGV` in a child process of this interpreter (the venv the
    tests run in), its output captured as text; `env` None inherits this process's."""
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", *(["-q"] if quiet else []), *argv],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )

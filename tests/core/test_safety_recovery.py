"""Killed commits, at every step, and journals that cannot be finished (issue 30, items 4, 6).

Before: a `render` killed past its commit point, whose half-written folder was then removed
(`rm -rf`, `git clean`), made every writing command end in a FileNotFoundError traceback until
the user found and deleted the journal by hand; a kill between the journal's removal and the
receipt's left a receipt no command removed (the flaky
test_interrupts.py::test_sigkill_during_commits_is_finished_or_undone_by_the_next_command).

Here a real `render` is SIGKILLed at each step of the commit protocol in turn (the step counter
envbuilder.core.journal checks: ENVBUILDER_TEST_KILL_AT_STEP, so the kill point is exact, not a
timing), and the next command that writes must leave one complete generation, no temp file, no
journal and no receipt.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from clirun import as_process, captured
from shipped import copy_shipped

from envbuilder.core.journal import KILL_AT_STEP
from envbuilder.core.journalfile import JOURNAL

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL, flock")

RENDER = ("render", "--env", "cpu", "--target", "docker")
#: More steps than a render of one env and target takes (the loop ends when a run survives).
MAX_STEPS = 60


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


def fresh(base: Path) -> Path:
    """The shipped spec and locks, nothing rendered: a render makes folders and files."""
    return copy_shipped(base, ("environments.toml", "lockfiles"))


def killed_render(project: Path, step: str) -> int:
    env = {**os.environ, KILL_AT_STEP: step}
    done = as_process(*RENDER, "--spec", str(project / "environments.toml"), cwd=project, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode


def files(project: Path) -> dict[str, bytes]:
    return {
        p.relative_to(project).as_posix(): p.read_bytes()
        for p in sorted(project.rglob("*"))
        if p.is_file()
    }


def receipts(state: Path) -> list[Path]:
    return sorted(state.rglob("*.json"))


def test_a_journal_whose_folder_was_removed_is_set_aside(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed at the commit point, then the half-written folder removed: the next writer sets
    the journal aside under a dated name, says what happened, what was kept and what to check,
    and goes on (it used to end in a FileNotFoundError traceback, as did every later writer)."""
    project = fresh(tmp_path / "project")
    assert killed_render(project, "committed") == -signal.SIGKILL
    assert (project / JOURNAL).is_file()
    shutil.rmtree(project / "dockerfiles" / "cpu")
    spec = str(project / "environments.toml")
    code, out = captured(capsys, *RENDER, "--spec", spec)
    assert code == 0, out
    assert "Traceback" not in out
    assert "could not be finished" in out and "dockerfiles/cpu was removed since" in out, out
    aside = sorted(project.glob(".envbuilder-commit.set-aside-*.json"))
    assert len(aside) == 1 and f"set aside as {aside[0]}" in out
    assert "kept as they are" in out and "run `envbuilder render`" in out
    assert not (project / JOURNAL).exists()
    assert [p for p in project.rglob("*.tmp")] == []  # its proven temp copies are removed
    assert receipts(state) == []
    code, out = captured(capsys, *RENDER, "--check", "--spec", spec)
    assert code == 0, out
    code, out = captured(capsys, "lock", "--check", "--spec", spec)
    assert "Traceback" not in out and JOURNAL not in out, out


def test_sigkill_at_every_step_of_a_commit_is_finished_or_undone(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A render killed at step 1, 2, ... of its commit (until one runs to its end): `check`
    and `render --check` change nothing (`render --check` names the journal left and the
    command that finishes it, and fails while files are part old, part new: it is read-only,
    and the files are not complete until a writing command finishes them); the next `render`
    leaves the files one complete generation, equal to an uninterrupted render's, with no temp
    file, journal or receipt (an orphan receipt, left by a kill after the journal's removal,
    included)."""
    reference = fresh(tmp_path / "reference")
    assert killed_render(reference, "none") == 0
    expected = files(reference)
    seen = set()
    for step in range(1, MAX_STEPS):
        project = fresh(tmp_path / f"step{step}")
        spec = str(project / "environments.toml")
        code = killed_render(project, str(step))
        if code == 0:
            break
        assert code == -signal.SIGKILL
        seen.add((project / JOURNAL).is_file())
        before = files(project)
        looked, out = captured(capsys, "check", "--spec", spec)
        assert looked == 0 and "Traceback" not in out, out
        assert files(project) == before  # a read-only command finishes nothing
        code, out = captured(capsys, *RENDER, "--check", "--spec", spec)
        assert "Traceback" not in out and files(project) == before, out
        if (project / JOURNAL).is_file():  # read-only: it names the journal and its finisher
            assert "`envbuilder render` finishes or undoes it" in out, out
        code, out = captured(capsys, *RENDER, "--spec", spec)
        assert code == 0 and "Traceback" not in out, (step, out)
        assert files(project) == {**expected}, step
        assert not (project / JOURNAL).exists() and list(project.rglob("*.tmp")) == []
        assert receipts(state) == [], (step, receipts(state))
    else:
        pytest.fail(f"the render was still killed at step {MAX_STEPS}")
    assert step > 10 and seen == {True, False}, (step, seen)

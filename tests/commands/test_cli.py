"""The command line as a whole: every subcommand explains itself, usage errors exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envbuilder.commands._cli import ORDER, _command_modules, build_parser, main


def test_every_planned_command_exists() -> None:
    names = [name for name, _ in _command_modules()]
    assert names[: len(ORDER)] == ORDER


@pytest.mark.parametrize("name", ORDER)
def test_help_of_each_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: envbuilder {name}" in out
    assert len(out.splitlines()) > 3


def test_top_level_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ORDER:
        assert name in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("envbuilder ")

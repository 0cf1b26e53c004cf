"""Empty values are usage errors, for every option and argument of every command (issue 21,
fault 7; docs/cli.md).

Before: `probe --json ""` ran every check and then wrote nothing (exit 1), and `lock
--upgrade-package ""` ran uv for every env. Now the command line is refused (exit 2) before
anything runs: each command's parser is walked, and each option or argument that takes a value
is given an empty one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envbuilder.commands._cli import COMMANDS, build_parser

ENVBUILDER = Path(sys.executable).with_name("envbuilder")


def value_options(name: str) -> list[list[str]]:
    """Every way to give command `name` an empty value: `--opt ""` for each option that takes
    one, `""` for its first positional argument (not a command's own argv, where '' is an
    argument like any other: test_safety_run_print)."""
    parser = build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[name]
    found: list[list[str]] = []
    for action in command._actions:
        if action.nargs == 0 or isinstance(action, argparse._HelpAction):
            continue
        if action.nargs == argparse.REMAINDER:  # `run -- CMD...`: an argv, where '' is valid
            continue
        if action.option_strings:
            found.append([action.option_strings[0], ""])
        elif not any(not f for f in found):
            found.append([""])
    return found


CASES = [
    pytest.param(name, argv, id=f"{name} {argv[0] or '(arg)'}")
    for name in COMMANDS
    for argv in value_options(name)
]


def test_every_command_has_value_options() -> None:
    assert {name for name, *_ in (c.values for c in CASES)} == set(COMMANDS)


@pytest.mark.parametrize(("name", "argv"), CASES)
def test_an_empty_value_is_a_usage_error(
    name: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from envbuilder.commands._cli import main

    with pytest.raises(SystemExit) as exc:
        main([name, *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    # envbuilder's own refusal, or argparse's for a number or a choice ("invalid ... : ''")
    assert ("empty" in err or "''" in err) and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--expect", "cpu", "--level", "quick", "--json", ""],
        ["lock", "--upgrade-package", ""],
    ],
)
def test_the_reported_commands_stop_before_any_work(argv: list[str], tmp_path: Path) -> None:
    """The two commands of the report, as the console script: exit 2 at once (the probe's
    checks take seconds, uv's resolution longer), nothing written."""
    started = time.monotonic()
    done = subprocess.run(
        [str(ENVBUILDER), *argv], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert "empty" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert elapsed < 5, elapsed  # argparse's refusal, not a run that failed later

"""The CLI starts fast (issue 17, part 4): only the command that runs is imported.

`envbuilder --help` lists every command with its one-line HELP from the static table
`envbuilder.commands._cli.COMMANDS` and imports no command module; `envbuilder lock` with nothing to
do imports neither the other commands nor docker, jinja2 or rich. Each case runs in a fresh
interpreter and reads its sys.modules at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.commands._cli import COMMANDS, _command_modules

ROOT = Path(__file__).resolve().parents[2]

#: Runs envbuilder's main() with argv[2:], then writes the names in sys.modules to argv[1].
RUNNER = """
import json, sys
from envbuilder.commands._cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""

#: Heavy imports no quick command needs (docker alone took ~0.3 s of a 0.5 s no-op lock).
HEAVY = ("docker", "jinja2", "rich", "matplotlib", "paramiko", "requests")


def modules_after(cwd: Path, *argv: str) -> set[str]:
    out = cwd / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    names: list[str] = json.loads(out.read_text())
    out.unlink()
    return set(names)


#: The command line itself lives in commands/ (its parser and the option helpers the commands
#: share); a command's module is any other module there.
COMMAND_LINE = frozenset({"envbuilder.commands._cli", "envbuilder.commands._options"})


def _commands(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("envbuilder.commands.")} - COMMAND_LINE


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_help_imports_no_command(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "--help")
    assert _commands(modules) == set()
    assert _heavy(modules) == set()


def test_help_lists_every_command_with_its_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "--help"], capture_output=True, text=True, check=True
    )
    flat = " ".join(proc.stdout.split())
    for name, line in COMMANDS.items():
        assert f"{name} {line}" in flat


def test_command_help_imports_only_that_command(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "lock", "--help")
    assert _commands(modules) == {"envbuilder.commands.lock"}


def test_lock_with_nothing_to_do_imports_only_what_it_needs(tmp_path: Path) -> None:
    shutil.copy(ROOT / "environments.toml", tmp_path / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", tmp_path / "lockfiles")
    modules = modules_after(tmp_path, "lock", "--env", "cpu")
    assert _commands(modules) == {"envbuilder.commands.lock"}
    assert _heavy(modules) == set()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_table_matches_the_modules_help(name: str) -> None:
    """COMMANDS is what `--help` shows without importing the modules: it must say what each
    module's HELP says."""
    modules = dict(_command_modules())
    assert COMMANDS[name] == modules[name].HELP


def test_every_command_module_is_in_the_table() -> None:
    """A command module missing from COMMANDS could not be run."""
    assert [name for name, _ in _command_modules()] == list(COMMANDS)

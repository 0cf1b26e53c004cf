"""`envbuilder completion bash|zsh|fish`: the shell's tab-completion script, from argcomplete.

Completion is argcomplete's (kislyuk/argcomplete), not a hand-written script: the script it
prints calls `envbuilder` at each Tab with _ARGCOMPLETE set, and `complete` (run by cli.main
before anything else) answers from the argparse tree itself, so every command and option is
completed as --help lists it, with no second copy to keep in step. Why argcomplete and not
shtab (which writes a static script): shtab has no fish, and a static script cannot complete
values only the project knows (`--env` completes the env names of the spec found by walking up
from the current folder). The cost is one start of envbuilder per Tab, loading only the
command on the line (docs/benchmarks.md, "Tab completion").
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envbuilder.core.fsutil import read_input_bytes
from envbuilder.core.project import find_spec
from envbuilder.core.ui import UI

HELP = "print the bash, zsh or fish tab-completion script (argcomplete) for envbuilder"
DESCRIPTION = """\
Print the tab-completion script of SHELL on stdout. Install it once:

  bash   envbuilder completion bash > ~/.local/share/bash-completion/completions/envbuilder
  zsh    envbuilder completion zsh > "${fpath[1]}/_envbuilder"   (then: compinit)
  fish   envbuilder completion fish > ~/.config/fish/completions/envbuilder.fish

or for the current shell only: eval "$(envbuilder completion bash)" (zsh: the same;
fish: envbuilder completion fish | source). Commands, options and their choices are completed
from the same argparse tree as --help; --env completes the env names of the spec that commands
find (--spec PATH when given on the line, else the nearest environments.toml above).
"""

SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def run(args: argparse.Namespace, ui: UI) -> int:
    from argcomplete.shell_integration import shellcode

    ui.print(shellcode(["envbuilder"], shell=args.shell).rstrip("\n"))
    return 0


def env_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete completer of --env: the spec's env names (nothing when it cannot be read:
    a completion never prints an error)."""
    spec = getattr(parsed_args, "spec", None) or find_spec(Path.cwd())
    try:
        data = tomllib.loads(read_input_bytes(Path(spec)).decode("utf-8")) if spec else {}
    except (OSError, ValueError):  # ValueError: not UTF-8, not TOML
        return []
    envs = data.get("env")
    return sorted(n for n in envs if n.startswith(prefix)) if isinstance(envs, dict) else []


def completed_command(environ: Mapping[str, str], commands: Iterable[str]) -> str | None:
    """The command named on the line being completed (COMP_LINE up to COMP_POINT, as
    argcomplete's script passes it), None while the command itself is being typed."""
    line = environ.get("COMP_LINE", "")
    point = environ.get("COMP_POINT", "")
    words = line[: int(point)].split() if point.isdigit() else line.split()
    done = words[1:] if line[: int(point or len(line))].endswith(" ") else words[1:-1]
    known = set(commands)
    return next((w for w in done if not w.startswith("-") and w in known), None)


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request (argcomplete exits) when _ARGCOMPLETE is set; --env gets
    the env names."""
    import argcomplete

    for action in _actions(parser):
        if action.dest == "env":
            action.completer = env_names  # type: ignore[attr-defined]  # argcomplete's hook
    argcomplete.autocomplete(parser)


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of `parser` and of its subcommands' parsers."""
    found: list[argparse.Action] = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _actions(sub)
    return found

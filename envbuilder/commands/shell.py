"""`envbuilder shell`: an interactive shell in an env's built, lock-matching artifact."""

from __future__ import annotations

import argparse

from envbuilder.commands.run import add_run_arguments, run_in_env
from envbuilder.core.ui import UI

HELP = "open an interactive shell in an env's built artifact (what `run` runs, without CMD)"
DESCRIPTION = """\
Open an interactive shell in the env's built artifact: `envbuilder run` without a command
(docker and wsl2: bash, as uid 1000 / the distro's user, with this host's device flags; a venv:
your $SHELL with the venv activated). The same artifacts are refused as by run and validate.
--print prints the command line instead (for a venv: the activate script to source).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)


def run(args: argparse.Namespace, ui: UI) -> int:
    return run_in_env(args, ui, ())

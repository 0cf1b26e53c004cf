"""`envbuilder run`: a user's command in an env's built, lock-matching artifact."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap

from envbuilder.builders.lookup import builder_for
from envbuilder.commands._options import add_common_arguments, add_json_argument, path_value
from envbuilder.commands._targets import progress_for, require
from envbuilder.core.errors import EngineError, UsageError
from envbuilder.core.foreground import is_terminal_session, run_foreground
from envbuilder.core.model import EnvSpec
from envbuilder.core.project import Project
from envbuilder.core.ui import UI
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry
from envbuilder.targets.base import RunCommand, RunnableBuilder, RunOptions

HELP = "run a command in an env's built artifact with the devices validate gives the probe"
_INTRO = """\
Run CMD in the env's built artifact, with exactly what `envbuilder validate` gives the probe
there, and exit with CMD's exit code:
"""
_REST = """\
Refused (exit 1, nothing run): an artifact that is missing or not the current lock's (an image
whose lock label differs, a .wsl whose sha256 is not the recorded one, a venv whose marker
names another lock, an incomplete venv), as `validate` refuses it.

--print prints the same command as one line for a shell instead (POSIX sh; PowerShell where
the target starts it on Windows) and runs nothing: e.g. `docker run ...`, or for a Linux venv
`(unset PYTHONPATH ...; export VARS; export VIRTUAL_ENV=... PATH=VENV/bin:"$PATH"; CMD)`.
Pasted into that shell it runs exactly the argv `envbuilder run` starts: every word quoted
where needed, control characters as printf escapes, a first word like `X=1` quoted so that it
stays the command. An empty string in CMD is an argument like any other.

Put `--` before CMD when CMD has options of its own that envbuilder also knows (-q, --env).
"""


def _per_target() -> str:
    """What run does in each target that can run commands: the targets' own words
    (TargetDescriptor.run_help), in registry order."""
    return "".join(
        textwrap.fill(
            d.run_help,
            width=96,
            initial_indent=f"  {d.name:<9} ",
            subsequent_indent=" " * 12,
            break_on_hyphens=False,
        )
        + "\n"
        for d in registry.all()
        if d.has("run")
    )


DESCRIPTION = f"{_INTRO}\n{_per_target()}\n{_REST}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="the command and its arguments (default: an interactive shell)",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What run and shell share: --spec, --env, --target, --path, --workspace, --print."""
    add_common_arguments(parser)
    parser.add_argument("--env", required=True, metavar="NAME", help="the env to run in")
    parser.add_argument(
        "--target",
        choices=sorted(registry.with_capability("run")),
        help="where (default: the env's first target that runs on this host)",
    )
    parser.add_argument(
        "--path", type=path_value, metavar="DIR", help="venv targets: the venv (as for build)"
    )
    parser.add_argument(
        "--workspace",
        type=path_value,
        metavar="DIR",
        help="image targets (docker, wsl2 on Linux): mount DIR read-write at /workspace and "
        "start there (e.g. --workspace .)",
    )
    parser.add_argument(
        "--print",
        action="store_true",
        help="print the command line (for a shell) instead of running it",
    )
    add_json_argument(parser, "the command line (with --print: argv, line, shell)")


def run(args: argparse.Namespace, ui: UI) -> int:
    return run_in_env(args, ui, command_words(args.cmd))


def command_words(words: list[str]) -> tuple[str, ...]:
    """CMD as given: without the `--` that separates it from envbuilder's options."""
    return tuple(words[1:] if words[:1] == ["--"] else words)


def run_in_env(args: argparse.Namespace, ui: UI, command: tuple[str, ...]) -> int:
    """Run (or --print) `command` in the selected artifact; the command's exit status."""
    project = Project.from_spec(args.spec)
    env = load_spec(project.spec_path).env(args.env)
    if args.json and not args.print:
        raise UsageError("--json goes with --print (a command run prints its own output)")
    target = args.target or default_target(env)
    if target not in env.targets:
        raise UsageError(
            f"env {env.name!r} has no target {target!r} (its targets: {', '.join(env.targets)})"
        )
    descriptor = require(
        target, "run", "target {target} cannot run commands; run applies to {have}"
    )
    if args.path is not None and not descriptor.has("path"):
        raise UsageError(f"--path applies to the venv targets, not {target}")
    builder = builder_for(descriptor)
    if not isinstance(builder, RunnableBuilder):
        raise TypeError(f"target {target} declares run but its builder has no command()")
    options = RunOptions(command, is_terminal_session(), args.path, args.workspace)
    with progress_for(ui) as progress:
        prepared = builder.command(project, env, options, progress)
    if args.print:
        ui.print(prepared.line)
        if args.json:
            ui.json(
                {
                    "command": args.command,
                    "ok": True,
                    "env": env.name,
                    "target": target,
                    "argv": list(prepared.argv),
                    "line": prepared.line,
                    "shell": prepared.shell,
                }
            )
        return 0
    _require_program(prepared)
    return run_foreground(prepared.argv, prepared.environment)


def default_target(env: EnvSpec) -> str:
    """The env's first target (spec order) that runs commands on this kind of host."""
    host = "windows" if sys.platform == "win32" else "linux"
    for name in env.targets:
        descriptor = registry.get(name)
        if descriptor.has("run") and host in descriptor.capabilities.host:
            return name
    raise UsageError(
        f"env {env.name!r} has no target that runs here (its targets: "
        f"{', '.join(env.targets)}); name one with --target"
    )


def _require_program(prepared: RunCommand) -> None:
    """The program the target said the command needs (RunCommand.requires), said with the fix
    when it is not on PATH."""
    if prepared.requires is not None and shutil.which(prepared.argv[0]) is None:
        raise EngineError(prepared.requires)

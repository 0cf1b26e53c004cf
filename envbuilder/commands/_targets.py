"""What build, validate, push and pull share: picking (env, target) pairs and showing progress.

Private (leading underscore): the CLI does not discover it as a command.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from envbuilder.cli import add_common_arguments, add_json_argument
from envbuilder.errors import UsageError
from envbuilder.progress import ProgressFn
from envbuilder.project import Project
from envbuilder.spec import TARGETS, EnvSpec, load_spec
from envbuilder.ui import UI


def add_selection_arguments(parser: argparse.ArgumentParser, default_target: str | None) -> None:
    """--spec, --env NAME (repeatable), --target T (required unless a default is given), --json."""
    add_common_arguments(parser)
    parser.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="env to work on (repeatable; default: every env having the target)")
    parser.add_argument("--target", choices=TARGETS, default=default_target,
                        required=default_target is None,
                        help="deployment target" + (f" (default: {default_target})"
                                                    if default_target else ""))
    add_json_argument(parser, "the results")


#: Targets that make a venv, whose build() and validate() take `path`.
VENV_TARGETS = ("native", "windows")


def path_option(args: argparse.Namespace, one_env: bool) -> dict[str, Any]:
    """{"path": args.path} when --path was given, for build/validate of a venv target; {} when
    not. UsageError for another target, or (`one_env`) unless exactly one --env is named."""
    if args.path is None:
        return {}
    if args.target not in VENV_TARGETS:
        raise UsageError(f"--path applies to the venv targets ({', '.join(VENV_TARGETS)}), "
                         f"not {args.target}")
    if one_env and len(args.env) != 1:
        raise UsageError("--path needs exactly one --env (one venv per folder)")
    return {"path": args.path}


def selected(args: argparse.Namespace) -> tuple[Project, list[EnvSpec]]:
    """The project and the envs `args` name that have `args.target` (all such when none named).

    UsageError when a named env does not have the target, or when no env has it.
    """
    project = Project.from_spec(args.spec)
    spec = load_spec(project.spec_path)
    envs = spec.select(args.env)
    if args.env:
        for env in envs:
            if args.target not in env.targets:
                raise UsageError(
                    f"env {env.name!r} has no target {args.target!r} (its targets: "
                    f"{', '.join(env.targets)}); add it to env.{env.name}.targets in "
                    f"{project.spec_path.name}"
                )
        return project, envs
    envs = [env for env in envs if args.target in env.targets]
    if not envs:
        raise UsageError(f"no env in {project.spec_path.name} has the target {args.target!r}")
    return project, envs


@contextmanager
def progress_for(ui: UI, bytes_: bool = False) -> Iterator[ProgressFn]:
    """A ProgressFn for library calls while the block runs: bars on a terminal, one line per
    step otherwise (envbuilder.ui.UI.progress)."""
    with ui.progress(bytes_=bytes_) as progress:
        yield progress

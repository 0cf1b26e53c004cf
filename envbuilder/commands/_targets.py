"""What build, validate, push and pull share: picking (env, target) pairs, refusing options and
verbs a target lacks the capability for (a UsageError naming the targets that have it), running
each env on after another env failed, and showing progress.

Private (leading underscore): the CLI does not discover it as a command.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from envbuilder.builders.lookup import builder_for
from envbuilder.commands._options import add_common_arguments, add_json_argument
from envbuilder.core import interrupts
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.core.redact import redact
from envbuilder.core.ui import UI
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry
from envbuilder.targets.base import (
    Capability,
    InstallOptions,
    RegistryBuilder,
    TargetDescriptor,
)

T = TypeVar("T")


def add_selection_arguments(parser: argparse.ArgumentParser, default_target: str | None) -> None:
    """--spec, --env NAME (repeatable), --target T (required unless a default is given), --json."""
    add_common_arguments(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="env to work on (repeatable; default: every env having the target)",
    )
    parser.add_argument(
        "--target",
        choices=registry.names(),
        default=default_target,
        required=default_target is None,
        help="deployment target" + (f" (default: {default_target})" if default_target else ""),
    )
    add_json_argument(parser, "the results")


def require(target: str, capability: Capability, message: str) -> TargetDescriptor:
    """The descriptor of `target`, when it has `capability`; otherwise UsageError with
    `message` formatted with {target} and the targets that have it, sorted: {have} ("a, b")
    or {have_and} ("a and b")."""
    descriptor = registry.get(target)
    if not descriptor.has(capability):
        have = sorted(registry.with_capability(capability))
        have_and = " and ".join([", ".join(have[:-1]), have[-1]] if len(have) > 1 else have)
        raise UsageError(message.format(target=target, have=", ".join(have), have_and=have_and))
    return descriptor


def registry_builder(target: str, verb: Literal["push", "pull"]) -> RegistryBuilder:
    """The builder of `target` for push or pull; UsageError when the target lacks the
    capability (naming the targets that have it)."""
    descriptor = require(
        target, verb, "target {target} has no registry; " + verb + " applies to {have_and}"
    )
    builder = builder_for(descriptor)
    if not isinstance(builder, RegistryBuilder):  # a descriptor promising what it cannot do
        raise TypeError(
            f"target {target} declares {verb} but its builder {descriptor.builder} "
            f"has no {verb}() (a bug in that target)"
        )
    return builder


#: The environment variables that give InstallOptions (docs/wsl2.md; `nox -s build-wsl2 --
#: NAME --replace` sets the first): the CLI's edge, read here and passed on typed.
INSTALL_REPLACE_ENV = "ENVBUILDER_WSL_REPLACE"
INSTALL_LOCATION_ENV = "ENVBUILDER_WSL_LOCATION"


def install_options(target: str, environ: Mapping[str, str] | None = None) -> InstallOptions:
    """How build and pull install the artifact of a target with the `install` capability:
    replace with INSTALL_REPLACE_ENV=1, the disks' folder from INSTALL_LOCATION_ENV (empty or
    unset: the target's default). The defaults for any other target."""
    env = os.environ if environ is None else environ
    if not registry.get(target).has("install"):
        return InstallOptions()
    location = env.get(INSTALL_LOCATION_ENV)
    return InstallOptions(
        replace=env.get(INSTALL_REPLACE_ENV) == "1",
        location=Path(location) if location else None,
    )


#: The refusal of --path (and of --force) for a target without the `path` capability.
PATH_REFUSAL = "{option} applies to the venv targets ({have}), not {target}"


def path_option(args: argparse.Namespace, one_env: bool) -> Path | None:
    """args.path when --path was given, for build/validate of a target with the `path`
    capability (venv targets). UsageError for another target, or (`one_env`) unless exactly one
    --env is named."""
    if args.path is None:
        return None
    require(args.target, "path", PATH_REFUSAL.replace("{option}", "--path"))
    if one_env and len(args.env) != 1:
        raise UsageError("--path needs exactly one --env (one venv per folder)")
    path: Path = args.path
    return path


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


@dataclass(frozen=True)
class EnvFailure:
    """One env whose work raised an error a user can fix: reported, and the next env runs."""

    env: str
    target: str
    error: EnvbuilderError

    def as_json(self, **status: str) -> dict[str, Any]:
        """Its entry in the command's --json list (docs/cli.md): env, target, `status` (build:
        state "failed", validate: status "error") and the error object of a failed command."""
        return {
            "env": self.env,
            "target": self.target,
            **status,
            "error": {
                "kind": type(self.error).__name__,
                "message": redact(str(self.error)),
                "exit_code": self.error.exit_code,
            },
        }


def each_env(
    envs: Sequence[EnvSpec], target: str, ui: UI, work: Callable[[EnvSpec], T]
) -> list[T | EnvFailure]:
    """`work(env)` for every env, in order: one env's EnvbuilderError is said on stderr (with
    its env's name when several run) and recorded as an EnvFailure, and the next env still
    runs. An interrupt (Ctrl-C, SIGTERM) is no EnvbuilderError: it ends the whole run at once,
    also one that Python dropped where it could not raise it (interrupts.swallowed)."""
    results: list[T | EnvFailure] = []
    for env in envs:
        try:
            results.append(work(env))
        except EnvbuilderError as exc:
            ui.error(f"{env.name}/{target}: {exc}" if len(envs) > 1 else str(exc))
            results.append(EnvFailure(env.name, target, exc))
        if (lost := interrupts.swallowed()) is not None:
            raise lost
    failures = [r for r in results if isinstance(r, EnvFailure)]
    if failures and len(envs) > 1:
        names = ", ".join(f.env for f in failures)
        ui.error(f"{len(failures)} of {len(envs)} envs failed ({names}); the others ran")
    return results


def failure_exit_code(results: Sequence[object], findings: bool = False) -> int:
    """The exit code of a multi-env run: 0 when every env succeeded (and no `findings`), else
    the highest of 1 (a finding, e.g. a failed probe) and the failed envs' own codes (2 for a
    usage error), so that one env alone exits as it did before."""
    codes = [r.error.exit_code for r in results if isinstance(r, EnvFailure)]
    return max([*codes, 1]) if codes or findings else 0


@contextmanager
def progress_for(ui: UI, bytes_: bool = False) -> Iterator[ProgressFn]:
    """A ProgressFn for library calls while the block runs: bars on a terminal, one line per
    step otherwise (envbuilder.core.ui.UI.progress)."""
    with ui.progress(bytes_=bytes_) as progress:
        yield progress

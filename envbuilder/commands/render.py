"""`envbuilder render`: write (or check) dockerfiles/, wsl/, windows/ and slurm/ from the spec and
locks."""

from __future__ import annotations

import argparse
from typing import Any

from envbuilder.builders.devcontainer import DEVCONTAINERS
from envbuilder.builders.render import RenderResult, render_all, rendered_targets
from envbuilder.commands._options import add_common_arguments, add_json_argument
from envbuilder.core.errors import UsageError
from envbuilder.core.project import Project
from envbuilder.core.ui import UI
from envbuilder.slurm.script import SCRIPTS
from envbuilder.spec.load import load_spec

#: The files rendered per env beside the targets': what `render` writes, and so what the next
#: command may finish of an interrupted render (envbuilder.commands._cli._journal_scope).
EXTRAS = (SCRIPTS, DEVCONTAINERS)

HELP = "render Dockerfiles, WSL rootfs files and Windows scripts; --check verifies them"
DESCRIPTION = """\
Render each env's definitions for its targets, beside the spec:

  dockerfiles/<env>/Dockerfile                 multi-stage image: the venv, a uid-1000 user
  wsl/<env>/Dockerfile, wsl.conf,              the WSL distro's root filesystem, its WSL settings
      wsl-distribution.conf, oobe.sh           and first-launch script
  windows/<env>/setup.ps1, README.md           a venv on native Windows without envbuilder
  slurm/<env>/validate.sbatch                  validation on every node of a Slurm job (with
                                               the docker files; docs/cluster.md)

Files are deterministic (a header with an input hash, no timestamp): rendering twice gives the
same bytes. Base images are pinned by digest once the env is locked (`envbuilder lock`). An env
whose lock is older than the spec (or is another env's lock) is refused, --check included: run
`envbuilder lock --env NAME` first. An env never locked renders unpinned, saying so in a header.

--check writes nothing: it exits 1 listing files that are stale, missing, or left over (in the
output folders but no longer rendered). Without --check, changed files are rewritten and
leftover generated files removed.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="env to render (repeatable; default: all)",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        choices=rendered_targets(),
        help=f"target to render (repeatable; default: {', '.join(rendered_targets())})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the files on disk; write nothing; exit 1 when stale",
    )
    add_json_argument(parser, "the files written, removed or (--check) out of date")


def _report(project: Project, result: RenderResult, ui: UI) -> int:
    if result.check:
        for label, paths in (
            ("stale", result.stale),
            ("missing", result.missing),
            ("leftover", result.leftover),
        ):
            for path in paths:
                ui.print(f"{label}: {project.relative(path)}")
        if result.ok:
            ui.info(f"{len(result.unchanged)} rendered files are up to date")
            return 0
        ui.error("rendered files are out of date; run `envbuilder render` and commit the result")
        return 1
    for path in result.written:
        ui.print(f"wrote {project.relative(path)}")
    for path in result.removed:
        ui.print(f"removed {project.relative(path)} (no longer rendered)")
    for path in result.kept:
        ui.warn(f"{project.relative(path)} is not rendered by envbuilder and was left alone")
    ui.info(f"{len(result.written)} written, {len(result.unchanged)} unchanged")
    return 0


def run(args: argparse.Namespace, ui: UI) -> int:
    project = Project.from_spec(args.spec)
    spec = load_spec(project.spec_path)
    if args.env and args.target:
        for env in spec.select(args.env):
            if not set(args.target) & set(env.targets):
                raise UsageError(
                    f"env {env.name!r} has none of the targets {', '.join(args.target)} (its "
                    f"targets: {', '.join(env.targets)}); see env.{env.name}.targets in "
                    f"{project.spec_path.name}"
                )
    result = render_all(
        project,
        spec,
        args.env or None,
        args.target or None,
        check=args.check,
        extras=EXTRAS,
    )
    code = _report(project, result, ui)
    if args.json:
        ui.json(_json_result(project, result))
    return code


#: RenderResult's lists, by the name they have in the --json object.
_JSON_LISTS = ("written", "unchanged", "removed", "kept", "stale", "missing", "leftover")


def _json_result(project: Project, result: RenderResult) -> dict[str, Any]:
    """The --json object (docs/cli.md): each list of files, relative to the spec's folder."""
    ok = result.ok if result.check else True
    return {
        "command": "render",
        "check": result.check,
        "ok": ok,
        **{name: [project.relative(p) for p in getattr(result, name)] for name in _JSON_LISTS},
    }

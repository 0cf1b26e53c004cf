"""`envbuilder build`: build each selected env's artifact for one target."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envbuilder.commands._targets import (
    add_selection_arguments,
    path_option,
    progress_for,
    selected,
)
from envbuilder.errors import UsageError
from envbuilder.targets import get_target
from envbuilder.ui import UI

HELP = "build the locked, rendered envs for a target (docker image, .wsl, venv)"
DESCRIPTION = """\
Build each selected env (--env, repeatable; default: every env having the target) from its lock
and its rendered files, and record the artifact in lockfiles/<env>.lock.toml:

  docker    image envbuilder/<env>:<short lock hash>, built by the engine DOCKER_HOST names
            (the local one by default); proxies from HTTP(S)_PROXY/NO_PROXY and an extra CA
            bundle ($ENVBUILDER_CA_BUNDLE) are used at build time and never stored in the image
  wsl2      dist/<env>.wsl
  native    a venv (--path DIR, default .envbuilder/venvs/<env>-native)
  windows   a venv on Windows (--path DIR)

Building again with nothing changed builds nothing. Prints one line per artifact on stdout:
    <env> <target> <reference> <digest> (built|up to date)

Reproducible images (docker, wsl2): the engine runs the steps, envbuilder writes the final image
(sorted layers, fixed times, no logs or caches), so its digest (the image id) depends only on
the lock and the base image's digest; the lock records it ([artifacts.<target>] image_id,
layers). A build whose digest differs from the recorded one says so. --verify rebuilds without
any cache and fails unless the digest is the recorded one, naming the first differing layer and
file (docs/reproducibility.md).
"""

#: Targets that build an image with the engine, whose build() takes `no_cache` and `verify`.
NO_CACHE_TARGETS = ("docker", "wsl2")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser, default_target=None)
    parser.add_argument("--path", type=Path, metavar="DIR",
                        help="venv targets (native, windows): where the venv goes")
    parser.add_argument("--no-cache", action="store_true",
                        help="image targets (docker, wsl2): build every step again "
                             "(no layer cache, no up-to-date check)")
    parser.add_argument("--verify", action="store_true",
                        help="image targets (docker, wsl2): rebuild from the lock without any "
                             "cache and fail unless the image digest is the one the lock "
                             "records, naming the first differing layer and file")


def _target_options(args: argparse.Namespace) -> dict[str, Any]:
    """Target-specific keyword arguments; refuses options the target does not take."""
    options = path_option(args, one_env=True)
    for flag, key in (("--no-cache", "no_cache"), ("--verify", "verify")):
        if getattr(args, key):
            if args.target not in NO_CACHE_TARGETS:
                raise UsageError(f"{flag} applies to the image targets "
                                 f"({', '.join(NO_CACHE_TARGETS)}), not {args.target}")
            options[key] = True
    return options


def run(args: argparse.Namespace, ui: UI) -> int:
    options = _target_options(args)
    project, envs = selected(args)
    target = get_target(args.target)
    for env in envs:
        with progress_for(ui) as progress:
            artifact = target.build(project, env, progress, **options)
        state = "up to date" if artifact.details.get("changed") == "no" else "built"
        if options.get("verify"):
            state += ", verified: the digest the lock records"
        note = artifact.details.get("prediction", "")
        if note.startswith("differs"):
            ui.warn(f"{env.name}/{artifact.target}: the image {note}; the lock now records "
                    "this one (`envbuilder build --verify` checks a recorded digest)")
        ui.print(f"{env.name} {artifact.target} {artifact.reference} "
                 f"{artifact.digest or '-'} ({state})")
    return 0

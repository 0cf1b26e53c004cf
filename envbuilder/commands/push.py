"""`envbuilder push`: push built images to a registry and record their digests in the lock."""

from __future__ import annotations

import argparse
from typing import Any

from envbuilder.commands._targets import (
    EnvFailure,
    add_selection_arguments,
    each_env,
    failure_exit_code,
    progress_for,
    registry_builder,
    selected,
)
from envbuilder.core.model import EnvSpec
from envbuilder.core.ui import UI
from envbuilder.image.engine import registry_repository
from envbuilder.targets.base import PushOptions

HELP = "push built images (docker, wsl2) to a registry; records the repository digest in the lock"
DESCRIPTION = """\
Push each selected env's image from `envbuilder build` to a registry and record its repository
digest in lockfiles/<env>.lock.toml, so that `envbuilder pull` elsewhere gets exactly this image:

  docker    envbuilder/<env>:<short lock hash> -> REGISTRY/<env>:<short lock hash>
            ([artifacts.docker] repo_digest)
  wsl2      the rootfs image the .wsl is exported from, envbuilder-wsl2/<env>:<short lock hash>
            -> REGISTRY/<env>-wsl2:<short lock hash> ([artifacts.wsl2] repo_digest)

The venv targets (native, windows) have no registry. REGISTRY is HOST[:PORT]/PATH, e.g.
registry.example.com/ml or 127.0.0.1:5000/envbuilder. Credentials come from the Docker config
(`docker login HOST`; $DOCKER_CONFIG or ~/.docker, credential helpers included). Prints
<env> <repository@sha256:...> per env on stdout. An env that fails is said on stderr and the
next env is still pushed; the exit code is then non-zero (docs/cli.md).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser, default_target="docker")
    parser.add_argument(
        "--registry",
        required=True,
        metavar="HOST[:PORT]/PATH",
        help="where to push (the env's name is appended)",
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    registry_repository(args.registry, "env")  # a malformed --registry fails before any work
    builder = registry_builder(args.target, "push")
    options = PushOptions(registry=args.registry)
    project, envs = selected(args)

    def one(env: EnvSpec) -> dict[str, str]:
        with progress_for(ui, bytes_=True) as progress:
            digest_ref = builder.push(project, env, options, progress)
        ui.print(f"{env.name} {digest_ref}")
        return {
            "env": env.name,
            "target": args.target,
            "reference": digest_ref,
            "digest": digest_ref.rpartition("@")[2],
        }

    results = each_env(envs, args.target, ui, one)
    if args.json:
        ui.json(_json_result(args.target, args.registry, results))
    return failure_exit_code(results)


def _json_result(
    target: str, registry: str, results: list[dict[str, str] | EnvFailure]
) -> dict[str, Any]:
    """The --json object (docs/cli.md): per env, the pushed image by digest, or its error."""
    return {
        "command": "push",
        "ok": not any(isinstance(r, EnvFailure) for r in results),
        "target": target,
        "registry": registry,
        "pushed": [r.as_json() if isinstance(r, EnvFailure) else r for r in results],
    }

"""`envbuilder pull`: pull the images the lock records, by digest, so validate needs no build."""

from __future__ import annotations

import argparse

from envbuilder.commands._targets import (
    EnvFailure,
    add_selection_arguments,
    each_env,
    failure_exit_code,
    install_options,
    progress_for,
    registry_builder,
    selected,
)
from envbuilder.core.model import EnvSpec
from envbuilder.core.ui import UI
from envbuilder.image.repro import image_report
from envbuilder.targets.base import PullOptions

HELP = "pull the pushed images (docker, wsl2) the lock records, by digest (refuses a mismatch)"
DESCRIPTION = """\
Pull each selected env's image by the digest `envbuilder push` recorded in
lockfiles/<env>.lock.toml, so that `envbuilder validate` runs on it without a build:

  docker    ([artifacts.docker] repo_digest) check that the image was built from the current
            lock (its org.envbuilder.lock-sha256 label) and is the recorded image, and tag it
            envbuilder/<env>:<short lock hash>. A mismatch is refused and nothing is tagged.
            Prints <env> <image id>.
  wsl2      ([artifacts.wsl2] repo_digest) export the pulled rootfs image into dist/<env>.wsl,
            as a build would. When the lock recorded the sha256 of a build, the file must
            have it: a mismatch is an error (the file stays, for inspection).
            Prints <env> <path> sha256:<hex>.

Then says (stderr) whether the image at hand is the one the lock predicts (its digest,
recorded by the build: docs/reproducibility.md).
The venv targets (native, windows) have no registry. Credentials come from the Docker config, as
for `docker pull`. An env that fails is said on stderr and the next env is still pulled; the exit
code is then non-zero (docs/cli.md).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser, default_target="docker")


def run(args: argparse.Namespace, ui: UI) -> int:
    builder = registry_builder(args.target, "pull")
    options = PullOptions(install=install_options(args.target))
    project, envs = selected(args)

    def one(env: EnvSpec) -> dict[str, str]:
        with progress_for(ui, bytes_=True) as progress:
            image_id = builder.pull(project, env, options, progress)
        ui.print(f"{env.name} {image_id}")
        for ok, line in image_report(builder, project, env):
            (ui.info if ok else ui.warn)(line)
        return _pulled_json(env.name, args.target, image_id)

    results = each_env(envs, args.target, ui, one)
    if args.json:
        pulled = [r.as_json() if isinstance(r, EnvFailure) else r for r in results]
        ok = not any(isinstance(r, EnvFailure) for r in results)
        ui.json({"command": "pull", "ok": ok, "target": args.target, "pulled": pulled})
    return failure_exit_code(results)


def _pulled_json(env: str, target: str, printed: str) -> dict[str, str]:
    """One env's entry in the --json object (docs/cli.md), from what pull prints: docker, the
    image id (reference and digest alike); wsl2, "<path> sha256:<hex>"."""
    reference, _, digest = printed.rpartition(" ")
    return {"env": env, "target": target, "reference": reference or digest, "digest": digest}

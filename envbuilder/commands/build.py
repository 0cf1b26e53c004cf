"""`envbuilder build`: build each selected env's artifact for one target."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuilder.builders.lookup import builder_for
from envbuilder.commands._options import path_value
from envbuilder.commands._targets import (
    PATH_REFUSAL,
    EnvFailure,
    add_selection_arguments,
    each_env,
    failure_exit_code,
    install_options,
    path_option,
    progress_for,
    require,
    selected,
)
from envbuilder.core.errors import UsageError
from envbuilder.core.ui import UI
from envbuilder.targets import registry
from envbuilder.targets.base import BuildOptions, DpkgStatusBuilder

if TYPE_CHECKING:
    from pathlib import Path

    from envbuilder.core.model import EnvSpec
    from envbuilder.core.progress import ProgressFn
    from envbuilder.core.project import Project
    from envbuilder.targets.base import Artifact, Builder

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

A venv is built only where nothing is, in an empty folder, or in a venv envbuilder made (its
envbuilder-venv.json marker proves it); only such a venv is ever synced, emptied or re-created.
Anything else at the path is refused with nothing changed: a file, a link, a folder that is not
a venv, a venv holding other files too (src/, .git). A venv envbuilder did not make is replaced
only with --force.

Building again with nothing changed builds nothing. Prints one line per artifact on stdout:
    <env> <target> <reference> <digest> (built|up to date)
An env that fails (a missing lock, a failed step) is said on stderr, `error: <env>/<target>: ...`,
and the next env is still built; the exit code is then non-zero (docs/cli.md). Ctrl-C stops the
whole run.

Beside the report, reports/<env>.<target>.cdx.json: the artifact's SBOM (CycloneDX 1.6 JSON,
validated against its schema): the image (.wsl, venv) with its digest, every package its pylock
installs with the file's sha256, the base image by digest and the apt versions the lock pins
(docs/sbom.md). The same lock gives the same bytes.

Reproducible images (docker, wsl2): the engine runs the steps, envbuilder writes the final image
(sorted layers, fixed times, no logs or caches), so its digest (the image id) depends only on
the lock and the base image's digest; the lock records it ([artifacts.<target>] image_id,
layers). A build whose digest differs from the recorded one says so. --verify rebuilds without
any cache and fails unless the digest is the recorded one, naming the first differing layer and
file (docs/reproducibility.md).

A base image the lock pins by a digest this engine's registry does not serve (the lock was made
against another registry: its base_source says which) stops the build with a message saying so;
a pin that registry should serve but does not is reported as lost or changed. --repin-base-into
DIR (docker) then re-pins the base into a scratch copy of the project at DIR (spec, lockfiles/,
rendered files), renders and builds there, and says what it re-pinned and where; the committed
lock and files are never rewritten by it. Validate that image with
`envbuilder validate --target docker --env ENV --spec DIR/environments.toml`.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser, default_target=None)
    parser.add_argument(
        "--path",
        type=path_value,
        metavar="DIR",
        help="venv targets (native, windows): where the venv goes",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="venv targets (native, windows): replace a venv at the path that "
        "envbuilder did not make (its installed packages are removed); a "
        "folder holding anything but a venv is still refused",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="image targets (docker, wsl2): build every step again "
        "(no layer cache, no up-to-date check)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="image targets (docker, wsl2): rebuild from the lock without any "
        "cache and fail unless the image digest is the one the lock "
        "records, naming the first differing layer and file",
    )
    parser.add_argument(
        "--repin-base-into",
        type=path_value,
        metavar="DIR",
        help="docker: when this engine's registry does not serve the locked base image "
        "(a lock made against another registry), re-pin it in a scratch copy of the "
        "project at DIR (relative to the spec's folder) and build from there; the "
        "committed lock is left as it is",
    )


def build_options(args: argparse.Namespace) -> BuildOptions:
    """The typed options of a build; UsageError (before any work) for an option the target lacks
    the capability for."""
    require(args.target, "build", "target {target} cannot be built; targets that can: {have}")
    path = path_option(args, one_env=True)
    if args.no_cache:
        require(
            args.target,
            "no_cache",
            "--no-cache applies to the image targets ({have}), not {target}",
        )
    if args.verify:
        require(
            args.target,
            "verify",
            "--verify applies to the targets whose lock predicts an image ({have}), not {target}",
        )
    if args.force:
        require(args.target, "path", PATH_REFUSAL.replace("{option}", "--force"))
    if args.repin_base_into is not None and args.target != "docker":
        raise UsageError(f"--repin-base-into applies to the docker target, not {args.target}")
    return BuildOptions(
        path=path,
        force=args.force,
        no_cache=args.no_cache,
        verify=args.verify,
        install=install_options(args.target),
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    options = build_options(args)
    project, envs = selected(args)
    builder = builder_for(registry.get(args.target))

    def one(env: EnvSpec) -> tuple[Artifact, Path]:
        return _build_and_report(project, env, builder, options, args.repin_base_into, ui)

    results = each_env(envs, args.target, ui, one)
    if args.json:
        ui.json(_json_result(args.target, results))
    return failure_exit_code(results)


def _build_and_report(
    project: Project,
    env: EnvSpec,
    builder: Builder,
    options: BuildOptions,
    repin_into: Path | None,
    ui: UI,
) -> tuple[Artifact, Path]:
    """Build one env, write its SBOM and print its line; the artifact and the SBOM's path."""
    from envbuilder.lock.sbom import write_sbom  # the CycloneDX library: imported when building

    artifact, built_in = _build_one(project, env, builder, options, repin_into, ui)
    status = builder.dpkg_status(artifact) if isinstance(builder, DpkgStatusBuilder) else None
    sbom = write_sbom(built_in, env.name, artifact.target, artifact, status)
    ui.info(f"{env.name}/{artifact.target}: SBOM (CycloneDX) {sbom}")
    state = _state(artifact)
    if options.verify:
        state += ", verified: the digest the lock records"
    note = artifact.details.get("prediction", "")
    if note.startswith("differs"):
        ui.warn(
            f"{env.name}/{artifact.target}: the image {note}; the lock now records "
            "this one (`envbuilder build --verify` checks a recorded digest)"
        )
    ui.print(
        f"{env.name} {artifact.target} {artifact.reference} {artifact.digest or '-'} ({state})"
    )
    return artifact, sbom


def _state(artifact: Artifact) -> str:
    return "up to date" if artifact.details.get("changed") == "no" else "built"


def _json_result(target: str, results: list[tuple[Artifact, Path] | EnvFailure]) -> dict[str, Any]:
    """The --json object (docs/cli.md): one entry per env, in the order they were built; an env
    that failed has state "failed" and its error instead of the artifact."""
    return {
        "command": "build",
        "ok": not any(isinstance(r, EnvFailure) for r in results),
        "target": target,
        "artifacts": [
            r.as_json(state="failed") if isinstance(r, EnvFailure) else _artifact_json(*r)
            for r in results
        ],
    }


def _artifact_json(artifact: Artifact, sbom: Path) -> dict[str, Any]:
    return {
        "env": artifact.env,
        "target": artifact.target,
        "reference": artifact.reference,
        "digest": artifact.digest,
        "state": _state(artifact),
        "sbom": str(sbom),
    }


def _build_one(
    project: Project,
    env: EnvSpec,
    builder: Builder,
    options: BuildOptions,
    repin_into: Path | None,
    ui: UI,
) -> tuple[Artifact, Project]:
    """Build one env; with `repin_into`, a base this engine's registry does not serve is
    re-pinned in a scratch copy of the project and built there (never in the committed lock).
    Returns the artifact and the project it was built in (the scratch copy, or `project`)."""
    from envbuilder.lock import basesource, scratch

    with progress_for(ui) as progress:
        try:
            artifact = builder.build(project, env, options, progress)
        except basesource.BaseNotServedError as exc:
            if repin_into is None or exc.diagnosis.kind != "not-served-here":
                raise
            dest = scratch.scratch_path(project, repin_into)
            ui.warn(f"{exc}\nre-pinning into the scratch copy {dest} (asked by --repin-base-into)")
            return _build_in_scratch(project, env, builder, options, dest, ui, progress)
    if repin_into is not None:
        scratch.forget_env(scratch.scratch_path(project, repin_into), env.name)
    return artifact, project


def _build_in_scratch(
    project: Project,
    env: EnvSpec,
    builder: Builder,
    options: BuildOptions,
    dest: Path,
    ui: UI,
    progress: ProgressFn,
) -> tuple[Artifact, Project]:
    """Copy the project to `dest`, re-pin the env's docker base there (lock --refresh-base: the
    apt versions are resolved again on the new base), render, build; print what moved."""
    from envbuilder.builders.render import render_all
    from envbuilder.lock import scratch
    from envbuilder.lock.resolve import LockOptions, lock_env
    from envbuilder.slurm.script import SCRIPTS
    from envbuilder.spec.load import load_spec

    copy = scratch.make_scratch(project, dest)
    spec = load_spec(copy.spec_path)
    (twin,) = spec.select([env.name])
    options_lock = LockOptions(targets=("docker",), refresh_base=True)
    result = lock_env(
        copy, twin, spec.env_hash(env.name), spec.indexes, options_lock, progress=progress
    )
    render_all(copy, spec, [env.name], None, check=False, extras=(SCRIPTS,))
    scratch.write_marker(dest, project, [*scratch.repinned_envs(dest), env.name])
    where = copy.env_lock(env.name)
    for change in result.changes:
        if change.kind == "base":
            ui.print(f"{env.name}: re-pinned {change.line()} in {where}")
    ui.print(
        f"{env.name}: the committed {project.env_lock(env.name)} is unchanged; validate with "
        f"`envbuilder validate --target docker --env {env.name} --spec {copy.spec_path}`"
    )
    return builder.build(copy, twin, options, progress), copy

"""`envbuilder lock`: resolve each env per target with uv into PEP 751 pylocks, pin base images."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from envbuilder.commands._options import add_common_arguments, add_json_argument
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.core.model import EnvSpec, Spec
from envbuilder.core.project import Project
from envbuilder.core.ui import UI
from envbuilder.lock.check import CheckOutcome, check_env
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry

if TYPE_CHECKING:
    from envbuilder.lock.resolve import LockOptions, LockResult

HELP = "resolve envs into lockfiles/ (PEP 751 pylocks + base image digests); --check verifies"
DESCRIPTION = """\
Resolve each env for each of its targets with uv and write, beside the spec:

  lockfiles/pylock.<env>-<target>.toml   PEP 751 lock (pip >= 26 and uv install it directly)
  lockfiles/<env>.lock.toml              spec hash, per-target platform/Python/pylock sha256,
                                         base images pinned by digest, built artifacts

Locking again with nothing changed touches no file and needs no network. When the spec changed,
every target of that env is re-resolved, keeping every pin that still fits; --upgrade-package
re-resolves the named packages only, --upgrade everything (and re-reads base image digests).
A base image's digest is kept while its tag stays the same in the spec; --refresh-base re-reads
it from the registry (the tag now names another image) without re-resolving any package.

The apt packages the rendered Dockerfiles install on a base image are locked too: their exact
versions per build stage ([targets.<t>.apt.<stage>]), resolved in a container of the pinned base
(`apt-get install --simulate`; needs the Docker engine and the base's package archive), kept
while the base stays the same; --refresh-apt resolves them again on the same base (do that when
a build says the archive no longer serves a locked version), as do --refresh-base and --upgrade.
docs/reproducibility.md.

--no-base-digest (no Docker engine) records a new base image by tag, with the reason
(base_digest_missing), and never drops a known digest, --upgrade included.

--check reads only local files: it exits 1 naming each env/target whose lock is stale (the spec
changed, a pylock was edited by hand, is missing or malformed, a lock names a file outside
lockfiles/, a base image lost its digest pin, apt packages a stage installs are not pinned). An
env that was never locked is reported as a note and does not fail the check; so is a base
recorded by tag with --no-base-digest.

A lock naming files outside lockfiles/ (or another env's lock) is never replaced: restore it
from version control, or delete it and lock again.

Mirrors (a machine's setting): ENVBUILDER_MIRROR_<INDEX_NAME> (a folder of wheels or a URL;
empty switches it off), else ~/.config/envbuilder/mirrors.toml ([mirrors], keyed by the index's
canonical URL or name), else the spec's `mirror`, is where uv resolves and envbuilder fetches;
the locks always record the index's canonical URL and each file's sha256.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    _add_selection_arguments(parser)
    _add_resolution_arguments(parser)
    _add_base_image_arguments(parser)
    add_json_argument(parser, "what was locked (or, with --check, what is stale)")


def _add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Which envs and targets, and --check instead of locking."""
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="env to lock (repeatable; default: all)",
    )
    parser.add_argument(
        "--target",
        choices=registry.names(),
        action="append",
        default=[],
        help="limit --upgrade/--upgrade-package/--check to these targets",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="verify lockfiles/ against the spec; no network, writes nothing",
    )


def _add_resolution_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--upgrade-package",
        "-P",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        help="re-resolve these packages (and what they need), keep every other pin (repeatable)",
    )
    parser.add_argument(
        "--upgrade",
        "-U",
        action="store_true",
        help="re-resolve everything and re-read base image digests",
    )


def _add_base_image_arguments(parser: argparse.ArgumentParser) -> None:
    """The base images' digests and the apt versions locked on them."""
    parser.add_argument(
        "--refresh-base",
        action="store_true",
        help="re-read the base images' digests from their registries (the tag "
        "now names another image) and resolve the apt versions on them "
        "again; the pylocks are not re-resolved",
    )
    parser.add_argument(
        "--refresh-apt",
        action="store_true",
        help="resolve the apt versions on the locked base images again (the "
        "archive no longer serves a locked one); nothing else changes",
    )
    parser.add_argument(
        "--no-base-digest",
        action="store_true",
        help="no Docker engine: keep known digests (also with --upgrade), "
        "record new base images by tag (render then uses the tag; "
        "lock --check notes it)",
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    if args.check and (
        args.upgrade or args.upgrade_package or args.refresh_base or args.refresh_apt
    ):
        raise UsageError(
            "--check cannot be combined with --upgrade, --upgrade-package, "
            "--refresh-base or --refresh-apt"
        )
    if (args.refresh_base or args.refresh_apt) and args.no_base_digest:
        flag = (
            "--refresh-base reads digests"
            if args.refresh_base
            else "--refresh-apt runs a container of the base"
        )
        raise UsageError(f"{flag}; it cannot be combined with --no-base-digest")
    project = Project.from_spec(args.spec)
    spec = load_spec(project.spec_path)
    envs = spec.select(args.env)
    if args.check:
        return _check(project, spec, envs, args, ui)
    return _lock(project, spec, envs, args, ui)


def _check(
    project: Project, spec: Spec, envs: list[EnvSpec], args: argparse.Namespace, ui: UI
) -> int:
    failed = 0
    outcomes = []
    for env in envs:
        outcome = check_env(project, env, spec.env_hash(env.name), only=args.target or None)
        outcomes.append(outcome)
        for note in outcome.notes:
            ui.info(f"note: {note}")
        for line in outcome.stale:
            ui.print(f"stale: {line}")
        failed += bool(outcome.stale)
        if not outcome.stale and not outcome.notes:
            ui.info(f"{env.name}: lock is current")
    if failed:
        ui.print(f"{failed} env(s) need `envbuilder lock`")
    if args.json:
        ui.json(_check_json(outcomes))
    return 1 if failed else 0


def _check_json(outcomes: list[CheckOutcome]) -> dict[str, Any]:
    """The --json object of `lock --check` (docs/cli.md)."""
    return {
        "command": "lock",
        "check": True,
        "ok": not any(o.stale for o in outcomes),
        "envs": [
            {"env": o.env, "ok": not o.stale, "stale": list(o.stale), "notes": list(o.notes)}
            for o in outcomes
        ],
    }


def _lock(
    project: Project, spec: Spec, envs: list[EnvSpec], args: argparse.Namespace, ui: UI
) -> int:
    from envbuilder.lock.resolve import lock_env  # keeps `--check` free of uv/docker

    options = _lock_options(args)
    failures = 0
    entries: list[dict[str, Any]] = []
    for env in envs:
        with ui.progress() as progress:  # no bar until uv runs: a current lock draws none
            try:
                result = lock_env(
                    project, env, spec.env_hash(env.name), spec.indexes, options, progress=progress
                )
            except EnvbuilderError as exc:
                ui.error(f"{env.name}: {exc}")
                failures += 1
                entries.append(_env_json(project, env.name, None, str(exc)))
                continue
        entries.append(_env_json(project, env.name, result, None))
        _print_result(project, env.name, result, ui)
    if args.json:
        ui.json({"command": "lock", "check": False, "ok": not failures, "envs": entries})
    return 1 if failures else 0


def _lock_options(args: argparse.Namespace) -> LockOptions:
    from envbuilder.lock.resolve import LockOptions

    return LockOptions(
        targets=tuple(args.target) or None,
        upgrade=args.upgrade,
        upgrade_packages=tuple(args.upgrade_package),
        base_digest=not args.no_base_digest,
        refresh_base=args.refresh_base,
        refresh_apt=args.refresh_apt,
    )


def _print_result(project: Project, env: str, result: LockResult, ui: UI) -> None:
    """What one env's lock did: its warnings, then what changed and which files."""
    for warning in result.warnings:
        ui.warn(warning)
    if not result.resolved and not result.written:
        ui.print(f"{env}: lock is current, nothing written")
        return
    for change in result.changes:
        ui.print(f"{env}: {change.line()}")
    for path in (*result.written, *result.removed):
        verb = "wrote" if path in result.written else "removed"
        ui.print(f"{env}: {verb} {path.relative_to(project.root)}")
    if not result.written:
        ui.print(f"{env}: re-resolved {', '.join(result.resolved)}; no change")


def _env_json(
    project: Project, env: str, result: LockResult | None, error: str | None
) -> dict[str, Any]:
    """One env's entry in the --json object of `lock` (docs/cli.md)."""
    if result is None:
        return {
            "env": env,
            "ok": False,
            "status": "failed",
            "resolved": [],
            "written": [],
            "removed": [],
            "warnings": [],
            "changes": [],
            "error": error,
        }
    status = (
        "written"
        if result.written or result.removed
        else "unchanged"
        if result.resolved
        else "current"
    )
    return {
        "env": env,
        "ok": True,
        "status": status,
        "resolved": list(result.resolved),
        "written": [str(p.relative_to(project.root)) for p in result.written],
        "removed": [str(p.relative_to(project.root)) for p in result.removed],
        "warnings": list(result.warnings),
        "changes": [c.as_json() for c in result.changes],
        "error": None,
    }

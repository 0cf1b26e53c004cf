"""`envbuilder lock --check`: an env's lock against its spec, its pylocks and its apt pins, with
no network. One outcome per env: `stale` lines fail the check, `notes` do not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envbuilder.core.errors import LockError
from envbuilder.core.model import EnvSpec
from envbuilder.core.project import Project
from envbuilder.lock import apt as aptlock
from envbuilder.lock.lockfile import EnvLock, TargetLock, read_env_lock
from envbuilder.lock.verified import PylockError, verify_pylock


@dataclass(frozen=True)
class CheckOutcome:
    """What `lock --check` found for one env: `stale` fails the check, `notes` do not."""

    env: str
    stale: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def check_env(
    project: Project, env: EnvSpec, spec_hash: str, only: Sequence[str] | None = None
) -> CheckOutcome:
    """`lock --check` of one env: its lock file against the spec and its pylocks
    (check_lock_file), and the apt packages its targets' plans install against the pins, for
    the targets in `only` (default: all of the env's). Reads only local files, the lock once."""
    lock, unread = _read(project, env.name)
    if lock is None:
        return unread
    outcome = _compare(project, lock, env.name, spec_hash, env.targets, only)
    if lock.env != env.name:
        return outcome  # another env's apt pins say nothing of this one
    apt_stale, apt_notes = aptlock.check_lock(env, lock, only)
    return CheckOutcome(env.name, (*outcome.stale, *apt_stale), (*outcome.notes, *apt_notes))


def check_lock_file(
    project: Project,
    env: str,
    spec_hash: str,
    targets: Sequence[str],
    only: Sequence[str] | None = None,
) -> CheckOutcome:
    """Compare the env's lock with the spec (by hash; `targets` are the spec's targets of the
    env) and with its pylocks (sha256 and content; those in `only`, default all). An env never
    locked is a note, not a failure."""
    lock, unread = _read(project, env)
    return unread if lock is None else _compare(project, lock, env, spec_hash, targets, only)


def _read(project: Project, env: str) -> tuple[EnvLock | None, CheckOutcome]:
    """The env's lock, or None and the outcome that says why there is none to compare."""
    path = project.env_lock(env)
    if not path.is_file():
        return None, CheckOutcome(env, notes=(f"{env}: not locked (no {project.relative(path)})",))
    try:
        return read_env_lock(path, project.relative(path)), CheckOutcome(env)
    except LockError as exc:
        return None, CheckOutcome(env, stale=(str(exc),))


def _compare(
    project: Project,
    lock: EnvLock,
    env: str,
    spec_hash: str,
    targets: Sequence[str],
    only: Sequence[str] | None,
) -> CheckOutcome:
    """What makes `lock` stale for the spec (its env, hash, targets, pylocks), and the notes."""
    stale: list[str] = []
    notes: list[str] = []
    if lock.env != env:
        lock_file = project.relative(project.env_lock(env))
        stale.append(f"{env}: {lock_file} is the lock of env {lock.env!r}")
    if lock.spec_hash != spec_hash:
        stale.append(f"{env}: environments.toml changed since it was locked (spec hash)")
    for target in (t for t in targets if only is None or t in only):
        stale += _check_target(project, lock, env, target)
        base_stale, base_notes = _check_base(env, target, lock.targets.get(target))
        stale += base_stale
        notes += base_notes
    for target in sorted(set(lock.targets) - set(targets)):
        stale.append(f"{env}/{target}: locked, but the spec no longer has this target")
    return CheckOutcome(env, tuple(stale), tuple(notes))


def _check_target(project: Project, lock: EnvLock, env: str, target: str) -> list[str]:
    try:
        verify_pylock(project, lock.env, target, lock.targets.get(target))
    except PylockError as exc:
        return [f"{env}/{target}: {exc.short}"]
    return []


def _check_base(env: str, target: str, t: TargetLock | None) -> tuple[list[str], list[str]]:
    """(stale, notes) about a base image recorded by tag: a note when `lock --no-base-digest`
    recorded it so (base_digest_missing says why), stale when nothing says why: the lock had a
    pin and lost it, or was edited."""
    if t is None or t.base_image is None or "@sha256:" in t.base_image:
        return [], []
    if t.base_digest_missing is not None:
        return [], [
            f"{env}/{target}: base image {t.base_image} is not pinned by digest "
            f"(locked with --{t.base_digest_missing})"
        ]
    return [
        f"{env}/{target}: base image {t.base_image} is recorded without a digest and "
        "without base_digest_missing: its pin was lost; pin it again with `envbuilder lock "
        f"--env {env} --refresh-base` (needs the Docker engine), or record the tag on "
        f"purpose with `envbuilder lock --env {env} --no-base-digest`"
    ], []

"""Where `envbuilder lock` lives: for one env, which targets are stale, resolving them
(envbuilder.lock.uv), pinning base images by digest and the apt versions installed on them
(envbuilder.lock.apt), and committing the env's pylocks and
`<env>.lock.toml` as one step.

Nothing changes on disk when the lock is current, and nothing is written at all when any target
fails to resolve or pin (docs/lock.md).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import tomllib
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from envbuilder import __version__
from envbuilder.core.errors import EngineError, LockError
from envbuilder.core.fsutil import same_bytes, sha256_bytes
from envbuilder.core.journal import commit_files
from envbuilder.core.model import EnvSpec, Index
from envbuilder.core.pipsdk import lock_inputs, sdk_index, sdk_release
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project
from envbuilder.lock import apt as aptlock
from envbuilder.lock import aptsnapshot, diff
from envbuilder.lock.lockfile import (
    LOCK_VERSION,
    LOCKFILES_SCOPE,
    EnvLock,
    TargetLock,
    UntrustedLockError,
    dump_env_lock,
    load_env_lock,
)
from envbuilder.lock.sdk import resolve_sdk
from envbuilder.lock.uv import (
    ResolveRequest,
    artifacts_of,
    make_request,
    postprocess,
    pylock_header,
    run_uv,
)
from envbuilder.lock.verified import verify_pylock
from envbuilder.lock.wheelcache import check_sdist_builds
from envbuilder.targets import registry


def unpinned_reason(base_image: str | None) -> str | None:
    """The `base_digest_missing` that `envbuilder lock` records beside `base_image`: a reason for
    a base recorded by tag (lock only does that for --no-base-digest), None otherwise."""
    if base_image is None or "@sha256:" in base_image:
        return None
    return "no-base-digest"


def platform(target: str) -> str:
    """uv's `--python-platform` for `target`'s lock (its descriptor's first platform)."""
    return registry.get(target).lock_platform


def target_python(env: EnvSpec, target: str) -> str:
    """The Python (major.minor) a target's venv runs."""
    return env.python_for(target)


@dataclass(frozen=True)
class LockOptions:
    """What `envbuilder lock` asks for one env."""

    targets: tuple[str, ...] | None = None  # None: every target of the env
    upgrade: bool = False  # re-resolve everything (and re-read base digests)
    upgrade_packages: tuple[str, ...] = ()  # re-resolve these (and what they need) only
    base_digest: bool = True  # False: record base images by tag when no digest is known
    refresh_base: bool = False  # re-read base digests (and apt versions); pylocks stay as they are
    refresh_apt: bool = False  # resolve the apt versions on the locked bases again


@dataclass(frozen=True)
class LockResult:
    """What locking one env did. `resolved` is empty when the lock was already current."""

    env: str
    resolved: tuple[str, ...] = ()  # targets re-resolved by uv
    written: tuple[Path, ...] = ()  # files whose bytes changed
    removed: tuple[Path, ...] = ()  # pylocks of targets the spec no longer has
    warnings: tuple[str, ...] = ()
    changes: tuple[diff.Change, ...] = ()  # pins that moved (envbuilder.lock.diff)


DigestLookup = Callable[[str], str]
#: (base image with digest, target -> apt stages, sh lines pointing apt at the snapshot) ->
#: target -> stage -> package -> version.
AptResolver = Callable[[str, aptlock.Requests, Sequence[str]], dict[str, dict[str, dict[str, str]]]]


def registry_digest(ref: str) -> str:
    """`sha256:<hex>` of image `ref` as its registry reports it (through the Docker engine,
    `images.get_registry_data`, so the engine's registry mirrors and credentials apply)."""
    from envbuilder.image import engine  # imported late: only pinning a new base image needs it

    try:
        return engine.registry_digest(engine.connect(), ref)
    except EngineError as exc:
        raise LockError(
            f"cannot read the digest of base image {ref} from its registry: {exc}\nThe lock "
            "pins base images by digest, asking the registry through the Docker engine: check "
            f"that the engine runs and that `docker pull {ref}` works here (tag, login, "
            "registry mirror), or run `envbuilder lock --no-base-digest` to record the tag "
            "unpinned for now (known digests are kept)"
        ) from None


def registry_source(pinned: str) -> str | None:
    """The registry that served `pinned`'s digest for its tag to this engine (a mirror of the
    engine, or the image's registry: envbuilder.lock.basesource), recorded as `base_source`; None
    when the engine cannot be asked (the lock then says nothing about it)."""
    from envbuilder.image.engine import connect
    from envbuilder.lock import basesource

    ref, _, digest = pinned.partition("@")
    try:
        return basesource.source_of(connect(), ref, digest)
    except EngineError:
        return None


def _sources(
    pins: Mapping[str, str | None],
    old: Mapping[str, TargetLock],
    lookup: Callable[[str], str | None],
    refresh: set[str],
) -> dict[str, str | None]:
    """Each target's `base_source`: kept with a pin that is kept, asked for a new pin and for
    the targets in `refresh` (--refresh-base, --upgrade: the pin was read again), once per
    image; none for a base without digest."""
    asked: dict[str, str | None] = {}
    out: dict[str, str | None] = {}
    for target, pinned in pins.items():
        if pinned is None or "@sha256:" not in pinned:
            out[target] = None
        elif target in old and old[target].base_image == pinned and target not in refresh:
            out[target] = old[target].base_source
        else:
            if pinned not in asked:
                asked[pinned] = lookup(pinned)
            out[target] = asked[pinned]
    return out


def system_file(env: EnvSpec, target: str) -> str | None:
    """The system file a target installs besides its wheels, pinned ("<url>#sha256=<hex>"), from
    the compatibility data (its descriptor says which); None when it has none or the data has no
    sha256 for it (then the target stays "not locked" for it: render says so)."""
    return registry.get(target).system_file(env)


def base_ref(env: EnvSpec, target: str) -> str | None:
    """The base image a target builds on, as the spec writes it (None for venv targets)."""
    return registry.get(target).base_image(env)


def pin_base(
    ref: str | None,
    previous: str | None,
    *,
    refresh: bool,
    base_digest: bool,
    lookup: DigestLookup,
) -> str | None:
    """`ref@sha256:<hex>`: kept from the previous lock while `ref` is unchanged (no engine
    needed), read from the registry otherwise (`refresh`: read again). A ref with a digest
    already is kept as written. Without `base_digest` (no engine) a new ref is recorded by tag,
    and a known digest is kept even when `refresh` asks to re-read it: a pin is never dropped."""
    if ref is None:
        return None
    if "@sha256:" in ref:
        return ref
    known = (
        previous
        if previous and previous.split("@", 1)[0] == ref and "@sha256:" in previous
        else None
    )
    if known is not None and (not refresh or not base_digest):
        return known
    if not base_digest:
        return ref
    return f"{ref}@{lookup(ref)}"


def _pylock_ok(project: Project, env: str, target: str, t: TargetLock | None) -> bool:
    """Whether the target's pylock is as its lock recorded it (present, same sha256, well-formed);
    a pylock that is not gets resolved again (and is never handed to uv as preferences)."""
    try:
        verify_pylock(project, env, target, t)
    except LockError:
        return False
    return True


def source_date_epoch(pylocks: Sequence[bytes]) -> int:
    """SOURCE_DATE_EPOCH of a locked env: the newest upload time of any artifact in its pylocks
    (a pure function of the lock, so rebuilding from the same lock gives the same timestamps);
    315532800 (1980-01-01, the zip epoch) when no artifact carries an upload time."""
    newest = 315532800
    for data in pylocks:
        doc = tomllib.loads(data.decode("utf-8"))
        for pkg in doc.get("packages", []):
            for art in artifacts_of(pkg):
                when = art.get("upload-time")
                if isinstance(when, datetime.datetime):
                    if when.tzinfo is None:
                        when = when.replace(tzinfo=datetime.UTC)
                    newest = max(newest, int(when.timestamp()))
    return newest


@dataclass(frozen=True)
class LockBackends:
    """Where `lock_env` reads what the project does not hold: base digests, the apt versions
    installed on a base, and the registry that served a digest (stand-ins in tests)."""

    digest: DigestLookup = registry_digest
    apt: AptResolver = aptlock.engine_resolver
    source: Callable[[str], str | None] = registry_source


@dataclass(frozen=True)
class _LockRun:
    """One env's lock: its previous lock and the targets the options name."""

    project: Project
    env: EnvSpec
    spec_hash: str
    options: LockOptions
    previous: EnvLock | None
    wanted: frozenset[str]

    @property
    def old(self) -> Mapping[str, TargetLock]:
        return self.previous.targets if self.previous else {}

    def pins(self, look: DigestLookup) -> dict[str, str | None]:
        old, options = self.old, self.options
        return {
            t: pin_base(
                base_ref(self.env, t),
                old[t].base_image if t in old else None,
                refresh=(options.upgrade or options.refresh_base) and t in self.wanted,
                base_digest=options.base_digest,
                lookup=look,
            )
            for t in self.env.targets
        }

    def is_current(self, known: Mapping[str, str | None], apt: _AptLocking) -> bool:
        """Whether the lock on disk already says what this run would write (given that uv has
        nothing to resolve and no registry had to be asked)."""
        old, env = self.old, self.env
        return (
            set(old) == set(env.targets)
            and all(_same_base(old[t], known[t]) for t in env.targets)
            and all(old[t].system_file == system_file(env, t) for t in env.targets)
            and not apt.stale(known)
            and self.previous is not None
            and same_bytes(self.project.env_lock(env.name), dump_env_lock(self.previous))
        )

    def pin_bases(
        self, known: dict[str, str | None] | None, backends: LockBackends
    ) -> tuple[dict[str, str | None], dict[str, str | None]]:
        """The base pins (`known`, or read from the registries when None) and their sources."""
        final = self.pins(functools.cache(backends.digest)) if known is None else known
        again = {t for t in self.wanted if self.options.upgrade or self.options.refresh_base}
        if not self.options.base_digest:
            again = set()  # no engine: a known source is kept like a known digest
        return final, _sources(final, self.old, backends.source, again)


@dataclass(frozen=True)
class _Found:
    """What one lock run found, by target: the pylocks uv resolved again (only those), the
    base pins, where each digest was read, and the apt versions."""

    pylocks: Mapping[str, bytes]
    pins: Mapping[str, str | None]
    base_sources: Mapping[str, str | None]
    apt: Mapping[str, Mapping[str, Mapping[str, str]]]
    apt_epoch: int | None  # when the apt pins were resolved (None: at source_date_epoch)


def lock_env(
    project: Project,
    env: EnvSpec,
    spec_hash: str,
    indexes: Mapping[str, Index],
    options: LockOptions = LockOptions(),
    *,
    backends: LockBackends = LockBackends(),
    progress: ProgressFn = no_progress,
) -> LockResult:
    """Lock one env: resolve what is stale or asked for, pin base images and the apt versions
    installed on them (envbuilder.lock.apt), write the env's pylocks and `<env>.lock.toml`.
    Nothing changes on disk (not even an mtime) when the lock is current, and nothing is
    written at all when any target fails to resolve or pin."""
    previous, warn0 = _previous_lock(project, env)
    wanted = frozenset(options.targets if options.targets is not None else env.targets)
    run = _LockRun(project, env, spec_hash, options, previous, wanted)
    to_resolve = _stale_targets(project, env, spec_hash, previous, options, wanted)
    known, asked = _pins_without_registry(run)
    apt = _AptLocking(env, run.old, options, wanted, backends.apt)
    if not asked and not to_resolve and run.is_current(known, apt):
        return LockResult(env.name, warnings=tuple(warn0))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # Registry look-ups (once per image: docker and wsl2 often share one) run while uv
        # resolves; any failing writes nothing.
        job = pool.submit(run.pin_bases, None if asked else known, backends)
        new_pylocks, warnings = _resolve_targets(
            project, env, indexes, to_resolve, run.old, options, progress
        )
        final, base_sources = job.result()
    # Pins that still fit keep the snapshot they were resolved in (its moment is the lock's
    # apt_epoch): a Python package's bump leaves the image's apt layers as they were. A target
    # resolved again beside kept ones uses the same moment (one snapshot per env); when none
    # is kept, the pins are resolved in the snapshot of the new timestamp.
    epoch = source_date_epoch(_all_pylocks(project, env, new_pylocks, run.old))
    kept = previous is not None and apt.keeps_any(final)
    apt_epoch = previous.apt_snapshot_epoch if previous is not None and kept else epoch
    pins = apt.lock(final, apt_epoch)
    found = _Found(
        new_pylocks, final, base_sources, pins, None if apt_epoch == epoch else apt_epoch
    )
    return _write_env(run, found, tuple(to_resolve), (*warn0, *warnings, *apt.warnings))


def _pins_without_registry(run: _LockRun) -> tuple[dict[str, str | None], bool]:
    """The base pins as the previous lock and the spec give them (exact when no registry has
    to be asked), and whether one has to."""
    asked: list[str] = []

    def dry(ref: str) -> str:
        asked.append(ref)
        return ""

    return run.pins(dry), bool(asked)


def _previous_lock(project: Project, env: EnvSpec) -> tuple[EnvLock | None, list[str]]:
    """The env's lock as it stands, or None (with the warning why) when it cannot be read."""
    try:
        return load_env_lock(project, env.name, upgrade=True), []
    except UntrustedLockError:
        raise  # names files that are not its own, or another env's: never replaced unseen
    except LockError as exc:
        return None, [f"{exc}; locking {env.name} from scratch"]


class _AptLocking:
    """Which targets' apt versions to keep from the previous lock and which to resolve again:
    again when the base image changed, when --upgrade/--refresh-base asks, or when the pins no
    longer cover what the plan installs (envbuilder.lock.apt)."""

    def __init__(
        self,
        env: EnvSpec,
        old: Mapping[str, TargetLock],
        options: LockOptions,
        wanted: AbstractSet[str],
        resolver: AptResolver,
    ) -> None:
        self.old, self.resolver, self.warnings = old, resolver, list[str]()
        self.base_digest = options.base_digest
        self.stages: dict[str, list[aptlock.AptStage]] = {
            t: aptlock.plan_apt_stages(env, t) for t in env.targets
        }
        again = options.upgrade or options.refresh_base or options.refresh_apt
        self.refresh = {t for t in wanted if again}

    def _usable(self, target: str, base: str | None) -> bool:
        """Whether the previous lock's pins of `target` still fit: same base, full coverage."""
        previous = self.old.get(target)
        return (
            previous is not None
            and previous.base_image == base
            and aptlock.coverage_problem(self.stages[target], previous.apt) is None
        )

    def _keep(self, target: str, base: str | None) -> bool:
        return self._usable(target, base) and target not in self.refresh

    def keeps_any(self, bases: Mapping[str, str | None]) -> bool:
        """True when some target's apt pins are kept (not resolved again)."""
        return any(self.stages[t] and self._keep(t, bases[t]) for t in self.stages)

    def stale(self, bases: Mapping[str, str | None]) -> bool:
        """True when some target's apt pins must be resolved (or dropped) again."""
        return any(self.stages[t] and not self._keep(t, bases[t]) for t in self.stages)

    def lock(
        self, bases: Mapping[str, str | None], epoch: int
    ) -> dict[str, dict[str, dict[str, str]]]:
        """target -> stage -> package -> version, for every target of the env, resolved in the
        snapshot archive of `epoch` where the base has one. Known pins are never dropped for
        want of an engine (as base digests are not)."""
        out: dict[str, dict[str, dict[str, str]]] = {t: {} for t in self.stages}
        groups: dict[str, dict[str, list[aptlock.AptStage]]] = {}
        for target, stages in self.stages.items():
            base = bases[target]
            if not stages:
                continue
            can_resolve = bool(base and "@sha256:" in base and self.base_digest)
            if self._keep(target, base) or (self._usable(target, base) and not can_resolve):
                out[target] = self._previous(target)
            elif base and can_resolve:
                groups.setdefault(base, {})[target] = stages
            else:
                self.warnings.append(
                    f"{target}: the apt versions are not locked (its base image {base} has no "
                    "digest here, or --no-base-digest: no engine); lock again with a Docker "
                    "engine (`envbuilder lock --refresh-base`)"
                )
        for base, requests in groups.items():  # one container per base image
            snapshot = aptsnapshot.sources_for(base, epoch)
            sources = aptsnapshot.shell_lines(snapshot) if snapshot else []
            try:
                out.update(self.resolver(base, requests, sources))
            except aptlock.NoEngineError as exc:  # as a base by digest, locked without engine
                for target in requests:
                    out[target] = self._previous(target) if self._usable(target, base) else {}
                self.warnings.append(
                    f"{', '.join(sorted(requests))}: the apt versions were not resolved ({exc});"
                    " known pins are kept, and `envbuilder lock --check` fails while a stage "
                    "has none, until `envbuilder lock` runs with a Docker engine"
                )
        return out

    def _previous(self, target: str) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self.old[target].apt.items()}


def _same_base(entry: TargetLock, pinned: str | None) -> bool:
    """Whether the lock records `pinned` as the target's base already (with its reason when
    it is a tag: an older lock without one is rewritten)."""
    return entry.base_image == pinned and entry.base_digest_missing == unpinned_reason(pinned)


def _stale_targets(
    project: Project,
    env: EnvSpec,
    spec_hash: str,
    previous: EnvLock | None,
    options: LockOptions,
    wanted: AbstractSet[str],
) -> list[str]:
    """The targets uv must resolve: all of them when the spec changed (a half-updated env would
    hide staleness), those whose pylock is missing or edited, and those asked to upgrade."""
    old = previous.targets if previous else {}
    current = previous is not None and previous.spec_hash == spec_hash
    refresh = options.upgrade or bool(options.upgrade_packages)
    return [
        t
        for t in env.targets
        if not current
        or not _pylock_ok(project, env.name, t, old.get(t))
        or old[t].platform != platform(t)
        or (refresh and t in wanted)
    ]


def _resolve_targets(
    project: Project,
    env: EnvSpec,
    indexes: Mapping[str, Index],
    targets: Sequence[str],
    old: Mapping[str, TargetLock],
    options: LockOptions,
    progress: ProgressFn,
) -> tuple[dict[str, bytes], list[str]]:
    """Resolve `targets`, running uv once per distinct request (docker, wsl2 and native share
    one platform and usually one request)."""
    groups, warnings = _group_requests(project, env, indexes, targets)
    out: dict[str, bytes] = {}
    for n, (request, members) in enumerate(groups.items()):
        progress(
            f"resolving {env.name} for {request.platform} (Python {request.python})", n, len(groups)
        )
        preferred = _preferred_pylock(project, env, members, old)
        try:
            body = _resolve_one(env, request, preferred, options)
        except LockError as exc:  # the mirror warnings often explain the failure
            raise LockError("\n".join([*(f"warning: {w}" for w in warnings), str(exc)])) from None
        for target in members:
            out[target] = pylock_header(env.name, target).encode("utf-8") + body
            # A locked sdist (the pip SDK's `rocm`) is built at install time, offline: its
            # build backend must be among the wheels of the same pylock.
            check_sdist_builds(
                project,
                tomllib.loads(body.decode("utf-8")),
                f"env {env.name!r}, target {target}",
                platform(target),
                target_python(env, target),
                indexes=indexes,
            )
    progress(f"resolved {env.name}", len(groups), len(groups))
    return out, warnings


def _group_requests(
    project: Project, env: EnvSpec, indexes: Mapping[str, Index], targets: Sequence[str]
) -> tuple[dict[ResolveRequest, list[str]], list[str]]:
    """The targets by the uv request that resolves them, and the requests' warnings (each once)."""
    groups: dict[ResolveRequest, list[str]] = {}
    warnings: list[str] = []
    for target in targets:
        # A pip-SDK release adds the env's device extras and the SDK's names
        # (envbuilder.core.pipsdk).
        packages, pins = lock_inputs(env, target)
        request, warns = make_request(
            platform(target),
            target_python(env, target),
            packages,
            pins,
            indexes,
            project.root,
            first_index=sdk_index(env, target),  # a pip-SDK env: AMD's index first (sdklock)
        )
        warnings += [w for w in warns if w not in warnings]
        groups.setdefault(request, []).append(target)
    return groups, warnings


def _preferred_pylock(
    project: Project, env: EnvSpec, members: Sequence[str], old: Mapping[str, TargetLock]
) -> Path | None:
    """The first intact pylock among a request's targets: uv's preferences (--upgrade aside)."""
    return next(
        (
            project.lockfiles / old[t].pylock
            for t in members
            if _pylock_ok(project, env.name, t, old.get(t))
        ),
        None,
    )


def _resolve_one(
    env: EnvSpec, request: ResolveRequest, preferred: Path | None, options: LockOptions
) -> bytes:
    """The post-processed pylock body (no header) of one request; a pip-SDK env's through
    envbuilder.lock.sdk (AMD's index first, the provenance check)."""
    previous = preferred.read_bytes() if preferred else None
    release = sdk_release(env)
    if request.first_index is not None and release is not None:
        where = f"env {env.name!r} ({request.platform}, Python {request.python})"
        return resolve_sdk(
            request,
            previous,
            release,
            where,
            upgrade=options.upgrade,
            upgrade_packages=options.upgrade_packages,
        )
    raw = run_uv(
        request, previous, upgrade=options.upgrade, upgrade_packages=options.upgrade_packages
    )
    return postprocess(raw, request, "")


def _write_env(
    run: _LockRun, found: _Found, resolved: tuple[str, ...], warnings: tuple[str, ...]
) -> LockResult:
    project, env, old = run.project, run.env, run.old
    contents, targets = _target_entries(run, found)
    artifacts = {
        t: v
        for t, v in (run.previous.artifacts if run.previous else {}).items()
        if t in targets and t in old and _same_image_inputs(old[t], targets[t])
    }
    lock = EnvLock(
        LOCK_VERSION,
        env.name,
        run.spec_hash,
        __version__,
        source_date_epoch(list(contents.values())),
        targets,
        artifacts,
        found.apt_epoch,
    )
    # One generation: the pylocks, the env lock and the removal of pylocks of dropped targets
    # are committed together, so an interrupt or a full disk leaves the old set or the new one.
    files = {project.lockfiles / targets[t].pylock: data for t, data in contents.items()}
    files[project.env_lock(env.name)] = dump_env_lock(lock)
    changes = _file_changes(project, files, old, targets)
    moved = diff.env_changes(
        {t: _old_pylock(project, tl) for t, tl in old.items()},
        {t: contents[t] for t in targets},
        {t: tl.base_image for t, tl in old.items()},
        {t: tl.base_image for t, tl in targets.items()},
    )
    commit_files(project.lockfiles, changes, LOCKFILES_SCOPE)
    written = tuple(p for p, data in changes.items() if data is not None)
    removed = tuple(p for p, data in changes.items() if data is None)
    return LockResult(env.name, resolved, written, removed, warnings, moved)


def _target_entries(run: _LockRun, found: _Found) -> tuple[dict[str, bytes], dict[str, TargetLock]]:
    """Each target's pylock bytes (new or kept) and its entry in the new lock."""
    project, env, old = run.project, run.env, run.old
    contents: dict[str, bytes] = {}
    targets: dict[str, TargetLock] = {}
    for t in env.targets:
        name = project.pylock(env.name, t).name
        data = found.pylocks.get(t)
        if data is None:
            data = (project.lockfiles / old[t].pylock).read_bytes()
        contents[t] = data
        targets[t] = TargetLock(
            platform=platform(t),
            python=target_python(env, t),
            pylock=name,
            pylock_sha256=sha256_bytes(data),
            base_image=found.pins[t],
            base_digest_missing=unpinned_reason(found.pins[t]),
            system_file=system_file(env, t),
            apt={k: dict(v) for k, v in found.apt.get(t, {}).items()},
            base_source=found.base_sources.get(t),
        )
    return contents, targets


def _file_changes(
    project: Project,
    files: Mapping[Path, bytes],
    old: Mapping[str, TargetLock],
    targets: Mapping[str, TargetLock],
) -> dict[Path, bytes | None]:
    """The files whose bytes change, and the pylocks of dropped targets (None: removed)."""
    changes: dict[Path, bytes | None] = {
        p: data for p, data in files.items() if not same_bytes(p, data)
    }
    for gone, tl in old.items():
        stray = project.lockfiles / tl.pylock
        if gone not in targets and Path(tl.pylock).name == tl.pylock and stray.is_file():
            changes[stray] = None
    return changes


def _all_pylocks(
    project: Project, env: EnvSpec, new: Mapping[str, bytes], old: Mapping[str, TargetLock]
) -> list[bytes]:
    """The bytes of every target's pylock as the new lock will have them (new or kept)."""
    return [
        new[t] if t in new else (project.lockfiles / old[t].pylock).read_bytes()
        for t in env.targets
    ]


def _same_image_inputs(old: TargetLock, new: TargetLock) -> bool:
    """Whether a re-locked target still predicts the recorded image: every value of its entry
    is the same but where the base digest was read from (it does not change the image)."""
    return dataclasses.replace(old, base_source=None) == dataclasses.replace(new, base_source=None)


def _old_pylock(project: Project, entry: TargetLock) -> bytes | None:
    """The bytes of the pylock the previous lock names (None when it is gone or unreadable)."""
    path = project.lockfiles / entry.pylock
    try:
        return path.read_bytes() if Path(entry.pylock).name == entry.pylock else None
    except OSError:
        return None

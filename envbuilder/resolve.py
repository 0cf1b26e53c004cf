"""Resolve one env for one target with uv and turn uv's PEP 751 output into a committed pylock.

uv does the resolving (`uv pip compile --format pylock.toml`); this module only
  * writes the inputs uv needs: a throw-away pyproject.toml whose `[[tool.uv.index]]` entries are
    `explicit` (used only by the packages pinned to them through `[tool.uv.sources]`), so torch and
    friends come from their index and everything else from the default index;
  * points uv at a mirror of an index when one is configured (a folder, used as a flat
    find-links listing, or a URL), and
  * post-processes the result: artifacts of mirrored packages get their canonical URL back
    (`<index url>/<file name>`), fields that depend on where a file was fetched from (upload time,
    size) are dropped for packages of named indexes, nothing machine-specific (a path, a file://
    URL) may remain, packages are sorted, and a "generated" header is added.

Mirrors: `[indexes.NAME] mirror = "..."` in the spec, overridden per machine by the environment
variable `ENVBUILDER_MIRROR_<NAME>` (NAME upper-cased, every character that is not a letter or digit
turned into `_`; an empty value switches the mirror off). A mirror folder that does not exist falls
back to the canonical URL with a warning. Files from a mirror are only ever accepted by hash (uv
hashes what it resolves; envbuilder.wheelcache verifies every file against the lock).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit

import tomlkit
from packaging.utils import canonicalize_name

from envbuilder import __version__, aptlock
from envbuilder.errors import EngineError, LockError
from envbuilder.fsutil import sha256_bytes
from envbuilder.lockfile import (
    LOCK_VERSION,
    EnvLock,
    TargetLock,
    UntrustedLockError,
    load_env_lock,
    unpinned_reason,
    url_filename,
    verify_pylock,
    write_env_lock,
    write_output,
)
from envbuilder.progress import ProgressFn, no_progress
from envbuilder.project import Project
from envbuilder.pyfinder import uv_bin
from envbuilder.spec import EnvSpec, Index, TargetName

#: uv's `--python-platform` for each target.
PLATFORMS: dict[str, str] = {
    "docker": "x86_64-manylinux_2_28",
    "wsl2": "x86_64-manylinux_2_28",
    "native": "x86_64-manylinux_2_28",
    "windows": "x86_64-pc-windows-msvc",
}

#: PEP 751 `environments` written into each pylock, so installers refuse the wrong platform.
ENVIRONMENTS: dict[str, str] = {
    "x86_64-manylinux_2_28": "sys_platform == 'linux' and platform_machine == 'x86_64'",
    "x86_64-pc-windows-msvc": "sys_platform == 'win32' and platform_machine == 'AMD64'",
}

MIRROR_ENV_PREFIX = "ENVBUILDER_MIRROR_"


def mirror_env_var(index_name: str) -> str:
    """`ENVBUILDER_MIRROR_<NAME>`: the per-machine override of an index's mirror."""
    return MIRROR_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", index_name.upper())


def _is_url(value: str) -> bool:
    return urlsplit(value).scheme in ("http", "https")


def _canonical_is_flat(index: Index) -> bool:
    """Whether an index is a flat listing (find-links page) rather than a PEP 503 simple index.

    AMD's repo.radeon.com wheel folders are plain listings; PyTorch's indexes are simple indexes."""
    url = index.url.lower()
    return url.endswith((".html", ".htm")) or "repo.radeon.com/rocm/manylinux" in url


@dataclass(frozen=True)
class IndexSource:
    """Where uv reads one named index from on this machine, and what the lock records."""

    name: str
    canonical: str  # the public URL; what the lock records
    location: str  # what uv resolves against: the canonical URL, a mirror URL, or a folder
    flat: bool  # a flat listing (find-links) rather than a simple index
    mirrored: bool

    def artifact_url(self, filename: str) -> str:
        """The canonical URL of a file of this index: `<index url>/<file name>` (how PyTorch's
        and AMD's indexes lay out their files)."""
        return self.canonical.rstrip("/") + "/" + quote(filename)

    def mirror_folder(self) -> Path | None:
        """The mirror folder, when the mirror is a folder."""
        if self.mirrored and not _is_url(self.location):
            return Path(self.location)
        return None

    def mirror_url(self) -> str | None:
        """The mirror URL, when the mirror is a URL."""
        return self.location if self.mirrored and _is_url(self.location) else None


def index_source(
    index: Index, root: Path, environ: Mapping[str, str] | None = None
) -> tuple[IndexSource, str | None]:
    """Where to resolve `index` from on this machine, and a warning when a configured mirror
    cannot be used. A relative mirror folder is relative to the project root (the spec's folder)."""
    env = os.environ if environ is None else environ
    var = mirror_env_var(index.name)
    value = env.get(var, index.mirror or "")
    canonical = IndexSource(index.name, index.url, index.url, _canonical_is_flat(index), False)
    if not value:
        return canonical, None
    if value.startswith("file://"):
        value = unquote(urlsplit(value).path)
    if _is_url(value):
        flat = value.lower().endswith((".html", ".htm"))
        return IndexSource(index.name, index.url, value, flat, True), None
    folder = Path(value).expanduser()
    if not folder.is_absolute():
        folder = root / folder
    if not folder.is_dir():
        origin = f"${var}" if var in env else f"indexes.{index.name}.mirror"
        return canonical, (
            f"mirror folder {folder} of index {index.name!r} (from {origin}) does not exist; "
            f"resolving from {index.url} instead"
        )
    return IndexSource(index.name, index.url, str(folder), True, True), None


@dataclass(frozen=True)
class ResolveRequest:
    """Everything uv needs for one resolution (one env, one platform, one Python)."""

    platform: str
    python: str
    packages: tuple[str, ...]
    index_pins: tuple[tuple[str, str], ...]  # sorted (canonical package name, index name)
    indexes: tuple[IndexSource, ...]  # the indexes named in index_pins, sorted by name

    def index(self, name: str) -> IndexSource:
        for src in self.indexes:
            if src.name == name:
                return src
        raise LockError(f"index {name!r} is not defined in the spec's [indexes] table")


def make_request(
    platform: str,
    python: str,
    packages: Sequence[str],
    index_pins: Mapping[str, str],
    indexes: Mapping[str, Index],
    root: Path,
    environ: Mapping[str, str] | None = None,
) -> tuple[ResolveRequest, list[str]]:
    """A ResolveRequest with each pinned index's source on this machine, plus mirror warnings."""
    pins = tuple(sorted((str(canonicalize_name(p)), i) for p, i in index_pins.items()))
    sources: list[IndexSource] = []
    warnings: list[str] = []
    for name in sorted({i for _, i in pins}):
        if name not in indexes:
            raise LockError(
                f"a package is pinned to index {name!r}, which the spec does not define; "
                f"add [indexes.{name}] with its url, or pin to one of: {', '.join(sorted(indexes))}"
            )
        src, warning = index_source(indexes[name], root, environ)
        sources.append(src)
        if warning:
            warnings.append(warning)
    return ResolveRequest(platform, python, tuple(packages), pins, tuple(sources)), warnings


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def pyproject_for(request: ResolveRequest) -> str:
    """The throw-away pyproject.toml that carries the packages and per-package index pins."""
    lines = [
        "[project]",
        'name = "envbuilder-lock"',
        'version = "0"',
        f"requires-python = {_toml_str('>=' + request.python)}",
        "dependencies = [",
        *(f"    {_toml_str(p)}," for p in request.packages),
        "]",
        "",
    ]
    for src in request.indexes:
        lines += [
            "[[tool.uv.index]]",
            f"name = {_toml_str(src.name)}",
            f"url = {_toml_str(src.location)}",
            "explicit = true",
        ]
        if src.flat:
            lines.append('format = "flat"')
        lines.append("")
    if request.index_pins:
        lines.append("[tool.uv.sources]")
        lines += [f"{_toml_str(p)} = {{ index = {_toml_str(i)} }}" for p, i in request.index_pins]
    return "\n".join(lines) + "\n"


def run_uv(
    request: ResolveRequest,
    previous: bytes | None = None,
    *,
    upgrade: bool = False,
    upgrade_packages: Sequence[str] = (),
) -> bytes:
    """Run `uv pip compile` for `request`; return uv's pylock output (not yet post-processed).

    `previous` (an earlier pylock of this env and platform) is handed to uv as its output file,
    which uv reads as preferences: every pin it holds is kept unless `upgrade` or the package is
    in `upgrade_packages` (uv re-resolves those and whatever they need)."""
    with tempfile.TemporaryDirectory(prefix="envbuilder-lock-") as tmp:
        work = Path(tmp)
        (work / "pyproject.toml").write_text(pyproject_for(request), encoding="utf-8")
        out = work / "pylock.toml"  # uv insists on this name pattern for pylock output
        if previous is not None and not upgrade:
            out.write_bytes(previous)
        cmd = [
            uv_bin(), "pip", "compile", "pyproject.toml",
            "--format", "pylock.toml", "--output-file", out.name,
            "--python-version", request.python, "--python-platform", request.platform,
            "--generate-hashes", "--no-header", "--no-config", "--quiet",
            # uv resolves for --python-version/--python-platform; the interpreter only builds
            # sdists that lack static metadata. Naming ours skips uv's interpreter discovery
            # (seconds per run where pyenv shims answer for versions that are not installed).
            "--python", sys.executable,
        ]
        if upgrade:
            cmd.append("--upgrade")
        for name in upgrade_packages:
            cmd += ["--upgrade-package", name]
        env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LockError(_uv_failure(request, proc.stderr))
        return out.read_bytes()


def _uv_failure(request: ResolveRequest, stderr: str) -> str:
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    hint = ""
    unmirrored = [s for s in request.indexes if not s.mirrored]
    if unmirrored:
        hint = "\nIf an index is unreachable from this machine, point it at a mirror: " + ", ".join(
            f"{mirror_env_var(s.name)}=/folder/of/wheels or URL" for s in unmirrored
        )
    return (
        f"uv could not resolve for {request.platform} / Python {request.python}:\n{tail}{hint}"
    )


def _artifacts(package: Any) -> list[Any]:
    """The artifact tables of one pylock package (sdist, archive, wheels)."""
    found = [package[k] for k in ("sdist", "archive") if k in package]
    found += list(package.get("wheels", []))
    return found


def postprocess(raw: bytes, request: ResolveRequest, header: str) -> bytes:
    """uv's pylock -> the committed pylock (see the module docstring). Raises LockError when an
    artifact would be recorded by a machine-specific location."""
    doc = tomlkit.parse(raw.decode("utf-8"))
    pins = dict(request.index_pins)
    packages = doc.get("packages", tomlkit.aot())
    for pkg in packages:
        name = str(canonicalize_name(str(pkg["name"])))
        src = request.index(pins[name]) if name in pins else None
        if "sdist" in pkg:
            pkg["sdist"] = _fix_artifact(pkg["sdist"], name, src)
        if "archive" in pkg:
            pkg["archive"] = _fix_artifact(pkg["archive"], name, src)
        if "wheels" in pkg:
            wheels = [_fix_artifact(w, name, src) for w in pkg["wheels"]]
            if src is not None:
                array = tomlkit.array()
                array.extend(wheels)
                pkg["wheels"] = array.multiline(len(wheels) > 1)
        if "directory" in pkg or "vcs" in pkg:
            raise LockError(f"package {name} resolved to a directory or VCS checkout; "
                            "locks record index artifacts only")
    ordered = sorted(packages, key=lambda p: (str(canonicalize_name(str(p["name"]))),
                                              str(p["version"])))
    if [id(p) for p in ordered] != [id(p) for p in packages]:
        fresh = tomlkit.aot()
        for pkg in ordered:
            fresh.append(pkg)
        doc["packages"] = fresh
    body = tomlkit.dumps(doc).lstrip("\n")
    return (header + _top_level(body, request)).encode("utf-8")


def _top_level(body: str, request: ResolveRequest) -> str:
    """Set `requires-python` to the one Python resolved for and add PEP 751 `environments`
    (installers then refuse the file on another platform). Only the lines before the first
    `[[packages]]` are touched."""
    head, sep, rest = body.partition("[[packages]]")
    ours = ("requires-python", "environments")
    lines = [ln for ln in head.splitlines() if not ln.startswith(ours)]
    extra = [f"requires-python = {_toml_str('==' + request.python + '.*')}"]
    if env_marker := ENVIRONMENTS.get(request.platform):
        extra.append(f"environments = [{_toml_str(env_marker)}]")
    at = next((i for i, ln in enumerate(lines) if ln.startswith("created-by")), len(lines) - 1) + 1
    lines[at:at] = extra
    return "\n".join(lines) + "\n" + sep + rest


def _fix_artifact(art: Any, package: str, src: IndexSource | None) -> Any:
    """The artifact table as the lock records it (a new inline table when anything changed)."""
    location = str(art.get("url") or art.get("path") or "")
    if src is None:
        if "path" in art or location.startswith("file:"):
            raise LockError(
                f"package {package} resolved to a local file ({location}); a lock must name "
                "public URLs. Pin the package to a named index in the spec and give that index "
                "a mirror."
            )
        return art
    # Where a file was fetched from is machine-specific (a mirror's path, its upload time and
    # size, or none of them); the lock records the canonical URL and the hash only.
    parts: list[str] = []
    if "url" not in art:  # a `path` entry
        filename = str(art.get("name") or url_filename(location))
        parts.append(f"url = {_toml_str(src.artifact_url(filename))}")
    for key, value in art.items():
        if key in ("upload-time", "size", "path"):
            continue
        if key == "url" and src.mirrored:
            text = _toml_str(src.artifact_url(url_filename(location)))
        else:
            text = tomlkit.item(value).as_string().strip()
        parts.append(f"{tomlkit.key(key).as_string()} = {text}")
    # Parsed back from text so it keeps uv's `{ key = value }` spacing.
    return tomlkit.parse(f"x = {{ {', '.join(parts)} }}")["x"]


def pylock_header(env: str, target: str) -> str:
    """The comment block at the top of every committed pylock."""
    return (
        f"# Generated by `envbuilder lock` for env {env!r}, target {target!r}. Do not edit:\n"
        f"# `envbuilder lock --env {env} --target {target}` rewrites it and\n"
        "# `envbuilder lock --check` detects changes made by hand.\n"
    )


# --- locking one env: resolve its targets, pin base images, write the pylocks and the lock ---


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


DigestLookup = Callable[[str], str]
#: (base image with digest, target -> apt stages) -> target -> stage -> package -> version.
AptResolver = Callable[[str, aptlock.Requests], dict[str, dict[str, dict[str, str]]]]


def registry_digest(ref: str) -> str:
    """`sha256:<hex>` of image `ref` as its registry reports it (through the Docker engine,
    `images.get_registry_data`, so the engine's registry mirrors and credentials apply)."""
    import docker  # imported late: only pinning a new base image needs it
    import requests

    from envbuilder.docker_engine import connect  # the docker helper's thin layer

    try:
        return str(connect().images.get_registry_data(ref).id)
    except (EngineError, docker.errors.DockerException, requests.RequestException,
            OSError) as exc:
        raise LockError(
            f"cannot read the digest of base image {ref} from its registry: {exc}\nThe lock "
            "pins base images by digest, asking the registry through the Docker engine: check "
            f"that the engine runs and that `docker pull {ref}` works here (tag, login, "
            "registry mirror), or run `envbuilder lock --no-base-digest` to record the tag "
            "unpinned for now (known digests are kept)"
        ) from None


def base_ref(env: EnvSpec, target: str) -> str | None:
    """The base image a target builds on, as the spec writes it (None for venv targets)."""
    if target == "docker" and env.docker is not None:
        return env.docker.base
    if target == "wsl2" and env.wsl2 is not None:
        return env.wsl2.base
    return None


def target_python(env: EnvSpec, target: str) -> str:
    """The Python (major.minor) a target's venv runs."""
    return env.python_for(cast(TargetName, target))


def pin_base(
    ref: str | None, previous: str | None, *, refresh: bool, base_digest: bool,
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
    known = previous if previous and previous.split("@", 1)[0] == ref \
        and "@sha256:" in previous else None
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
            for art in _artifacts(pkg):
                when = art.get("upload-time")
                if isinstance(when, datetime.datetime):
                    if when.tzinfo is None:
                        when = when.replace(tzinfo=datetime.UTC)
                    newest = max(newest, int(when.timestamp()))
    return newest


def lock_env(
    project: Project,
    env: EnvSpec,
    spec_hash: str,
    indexes: Mapping[str, Index],
    options: LockOptions = LockOptions(),
    *,
    lookup: DigestLookup = registry_digest,
    apt_resolver: AptResolver = aptlock.engine_resolver,
    progress: ProgressFn = no_progress,
) -> LockResult:
    """Lock one env: resolve what is stale or asked for, pin base images and the apt versions
    installed on them (envbuilder.aptlock), write the env's pylocks and `<env>.lock.toml`.
    Nothing changes on disk (not even an mtime) when the lock is current, and nothing is
    written at all when any target fails to resolve or pin."""
    try:
        previous = load_env_lock(project, env.name)
    except UntrustedLockError:
        raise  # names files that are not its own, or another env's: never replaced unseen
    except LockError as exc:
        previous, warn0 = None, [f"{exc}; locking {env.name} from scratch"]
    else:
        warn0 = []
    old = previous.targets if previous else {}
    wanted: set[str] = set(options.targets if options.targets is not None else env.targets)
    to_resolve = _stale_targets(project, env, spec_hash, previous, options, wanted)

    def pins(look: DigestLookup) -> dict[str, str | None]:
        return {
            t: pin_base(base_ref(env, t), old[t].base_image if t in old else None,
                        refresh=(options.upgrade or options.refresh_base) and t in wanted,
                        base_digest=options.base_digest, lookup=look)
            for t in env.targets
        }

    asked: list[str] = []

    def dry(ref: str) -> str:
        asked.append(ref)
        return ""

    known = pins(dry)  # exact when no registry had to be asked
    apt = _AptLocking(env, old, options, wanted, apt_resolver)
    if not asked and not to_resolve and set(old) == set(env.targets) \
            and all(_same_base(old[t], known[t]) for t in env.targets) \
            and not apt.stale(known):
        return LockResult(env.name, warnings=tuple(warn0))

    def background() -> tuple[dict[str, str | None], dict[str, dict[str, dict[str, str]]]]:
        final = pins(functools.cache(lookup)) if asked else known
        return final, apt.lock(final)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # Registry look-ups (once per image: docker and wsl2 often share one), then the apt
        # resolution on the pinned bases, run while uv resolves; any failing writes nothing.
        job = pool.submit(background)
        new_pylocks, warnings = _resolve_targets(project, env, indexes, to_resolve, old,
                                                 options, progress)
        final, apt_pins = job.result()
    return _write_env(project, env, spec_hash, previous, new_pylocks, final, apt_pins,
                      tuple(to_resolve), (*warn0, *warnings, *apt.warnings))


class _AptLocking:
    """Which targets' apt versions to keep from the previous lock and which to resolve again:
    again when the base image changed, when --upgrade/--refresh-base asks, or when the pins no
    longer cover what the plan installs (envbuilder.aptlock)."""

    def __init__(self, env: EnvSpec, old: Mapping[str, TargetLock], options: LockOptions,
                 wanted: set[str], resolver: AptResolver) -> None:
        self.old, self.resolver, self.warnings = old, resolver, list[str]()
        self.base_digest = options.base_digest
        self.stages: dict[str, list[aptlock.AptStage]] = {
            t: aptlock.plan_apt_stages(env, t) for t in env.targets}
        again = options.upgrade or options.refresh_base or options.refresh_apt
        self.refresh = {t for t in wanted if again}

    def _usable(self, target: str, base: str | None) -> bool:
        """Whether the previous lock's pins of `target` still fit: same base, full coverage."""
        previous = self.old.get(target)
        return (previous is not None and previous.base_image == base
                and aptlock.coverage_problem(self.stages[target], previous.apt) is None)

    def _keep(self, target: str, base: str | None) -> bool:
        return self._usable(target, base) and target not in self.refresh

    def stale(self, bases: Mapping[str, str | None]) -> bool:
        """True when some target's apt pins must be resolved (or dropped) again."""
        return any(self.stages[t] and not self._keep(t, bases[t]) for t in self.stages)

    def lock(self, bases: Mapping[str, str | None]) -> dict[str, dict[str, dict[str, str]]]:
        """target -> stage -> package -> version, for every target of the env. Known pins are
        never dropped for want of an engine (as base digests are not)."""
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
                    "engine (`envbuilder lock --refresh-base`)")
        for base, requests in groups.items():  # one container per base image
            try:
                out.update(self.resolver(base, requests))
            except aptlock.NoEngineError as exc:  # as a base by digest, locked without engine
                for target in requests:
                    out[target] = self._previous(target) if self._usable(target, base) else {}
                self.warnings.append(
                    f"{', '.join(sorted(requests))}: the apt versions were not resolved ({exc});"
                    " known pins are kept, and `envbuilder lock --check` fails while a stage "
                    "has none, until `envbuilder lock` runs with a Docker engine")
        return out

    def _previous(self, target: str) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self.old[target].apt.items()}


def _same_base(entry: TargetLock, pinned: str | None) -> bool:
    """Whether the lock records `pinned` as the target's base already (with its reason when
    it is a tag: an older lock without one is rewritten)."""
    return entry.base_image == pinned and entry.base_digest_missing == unpinned_reason(pinned)


def _stale_targets(
    project: Project, env: EnvSpec, spec_hash: str, previous: EnvLock | None,
    options: LockOptions, wanted: set[str],
) -> list[str]:
    """The targets uv must resolve: all of them when the spec changed (a half-updated env would
    hide staleness), those whose pylock is missing or edited, and those asked to upgrade."""
    old = previous.targets if previous else {}
    current = previous is not None and previous.spec_hash == spec_hash
    refresh = options.upgrade or bool(options.upgrade_packages)
    return [
        t for t in env.targets
        if not current or not _pylock_ok(project, env.name, t, old.get(t))
        or old[t].platform != PLATFORMS[t] or (refresh and t in wanted)
    ]


def _resolve_targets(
    project: Project, env: EnvSpec, indexes: Mapping[str, Index], targets: Sequence[str],
    old: Mapping[str, TargetLock], options: LockOptions, progress: ProgressFn,
) -> tuple[dict[str, bytes], list[str]]:
    """Resolve `targets`, running uv once per distinct request (docker, wsl2 and native share
    one platform and usually one request)."""
    groups: dict[ResolveRequest, list[str]] = {}
    warnings: list[str] = []
    for target in targets:
        request, warns = make_request(
            PLATFORMS[target], target_python(env, target),
            env.packages_for(cast(TargetName, target)),
            env.index_pins_for(cast(TargetName, target)), indexes, project.root,
        )
        warnings += [w for w in warns if w not in warnings]
        groups.setdefault(request, []).append(target)
    out: dict[str, bytes] = {}
    for n, (request, members) in enumerate(groups.items()):
        progress(f"resolving {env.name} for {request.platform} (Python {request.python})",
                 n, len(groups))
        preferred = next((project.lockfiles / old[t].pylock for t in members
                          if _pylock_ok(project, env.name, t, old.get(t))), None)
        try:
            raw = run_uv(request, preferred.read_bytes() if preferred else None,
                         upgrade=options.upgrade, upgrade_packages=options.upgrade_packages)
        except LockError as exc:  # the mirror warnings often explain the failure
            raise LockError("\n".join([*(f"warning: {w}" for w in warnings), str(exc)])) from None
        body = postprocess(raw, request, "")
        for target in members:
            out[target] = pylock_header(env.name, target).encode("utf-8") + body
    progress(f"resolved {env.name}", len(groups), len(groups))
    return out, warnings


def _write_env(
    project: Project, env: EnvSpec, spec_hash: str, previous: EnvLock | None,
    new_pylocks: Mapping[str, bytes], pins: Mapping[str, str | None],
    apt: Mapping[str, Mapping[str, Mapping[str, str]]],
    resolved: tuple[str, ...], warnings: tuple[str, ...],
) -> LockResult:
    old = previous.targets if previous else {}
    contents: dict[str, bytes] = {}
    targets: dict[str, TargetLock] = {}
    for t in env.targets:
        name = project.pylock(env.name, t).name
        data = new_pylocks.get(t)
        if data is None:
            data = (project.lockfiles / old[t].pylock).read_bytes()
        contents[t] = data
        targets[t] = TargetLock(PLATFORMS[t], target_python(env, t), name, sha256_bytes(data),
                                pins[t], unpinned_reason(pins[t]),
                                {k: dict(v) for k, v in apt.get(t, {}).items()})
    artifacts = {t: v for t, v in (previous.artifacts if previous else {}).items()
                 if t in targets and old.get(t) == targets[t]}
    lock = EnvLock(LOCK_VERSION, env.name, spec_hash, __version__,
                   source_date_epoch(list(contents.values())), targets, artifacts)
    written = [p for t, data in contents.items()
               if write_output(p := project.lockfiles / targets[t].pylock, data)]
    if write_env_lock(project, lock):
        written.append(project.env_lock(env.name))
    removed = []
    for gone, tl in old.items():
        stray = project.lockfiles / tl.pylock
        if gone not in targets and stray.is_file():
            stray.unlink()
            removed.append(stray)
    return LockResult(env.name, resolved, tuple(written), tuple(removed), warnings)

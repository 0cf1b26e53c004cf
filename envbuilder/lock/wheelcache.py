"""The host-side wheel cache: every locked artifact downloaded once, by sha256, verified, reused.

Layout (Project.wheels): `<cache>/wheels/<sha256[:2]>/<sha256>/<filename>`. A file enters the cache
only after its sha256 matched the lock, so a path in the cache is its own proof; every later build
of any env or target that locks the same file reuses it (the second env with the same torch
downloads nothing).

Sources, in order: the cache; the mirror of the file's index (`[indexes.NAME] mirror` or
`ENVBUILDER_MIRROR_<NAME>`: a folder, or a URL under which `<file name>` or a simple-index page
lists it); the canonical URL recorded in the pylock; the simple-index page of the package on the
index the pylock names (PEP 751 `packages.index`: the file found by name, version and hash when
its recorded URL is gone). A file's index is the entry's `index` (envbuilder writes it for every
package of a named index), else the named index whose URL the file's URL starts with (pylocks
written before `index` was). A file from any source is accepted only when its sha256 matches the
lock. The caller passes the env's named indexes (`EnvSpec.indexes`): the wheel cache never reads
the spec file itself.

A package with no wheel for the target installs its sdist (the pip SDK's `rocm`), built offline
at install time; `check_sdist_builds` (run by `envbuilder lock`) refuses a pylock whose sdist's
build backend is not among its own wheels.

CONTRACT:
    fetch_locked(project, env, target, progress, *, indexes) -> list[CachedArtifact]
    check_sdist_builds(project, pylock_doc, where, platform, python, *, indexes) -> None
    write_wheelhouse(project, env, target, dest_dir, in_image_prefix="/tmp/envbuilder/wheels",
                     progress=no_progress, *, indexes) -> Path     the requirements.txt it wrote
    CachedArtifact(name, version, filename, sha256, path, source, downloaded_bytes)
"""

from __future__ import annotations

import base64
import hashlib
import html.parser
import os
import shutil
import ssl
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from packaging.pylock import (
    Package,
    PackageArchive,
    PackageSdist,
    PackageWheel,
    Pylock,
    PylockSelectError,
    PylockValidationError,
)
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name

from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import atomic_write_text
from envbuilder.core.model import EnvSpec, Index
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project
from envbuilder.core.redact import redact
from envbuilder.lock.indexes import IndexSource, mirrored_sources
from envbuilder.lock.verified import load_verified_lock, parse_pylock, url_filename

Source = Literal["cache", "mirror", "download"]
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CachedArtifact:
    """One locked artifact in the cache. `downloaded_bytes` is what this call transferred into the
    cache for it (0 when it was already there); `source` says from where."""

    name: str
    version: str
    filename: str
    sha256: str
    path: Path
    source: Source = "cache"
    downloaded_bytes: int = 0


@dataclass(frozen=True)
class LockedFile:
    """An artifact a pylock names for one target: the wheel an installer would pick."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None
    index: str | None = None  # PEP 751 `packages.index`: the canonical URL of its index


def cache_path(project: Project, sha256: str, filename: str) -> Path:
    """Where a file with this sha256 lives in the cache."""
    return project.wheels / sha256[:2] / sha256 / filename


# --- which wheel of each package a target installs -------------------------------------------


def _platform_tags(platform: str) -> list[str]:
    if platform == "x86_64-pc-windows-msvc":
        return ["win_amd64"]
    if platform.startswith("x86_64-manylinux_2_"):
        top = int(platform.rsplit("_", 1)[-1])
        tags = [f"manylinux_2_{minor}_x86_64" for minor in range(top, 4, -1)]
        return [
            *tags,
            "manylinux2014_x86_64",
            "manylinux2010_x86_64",
            "manylinux1_x86_64",
            "linux_x86_64",
        ]
    raise LockError(f"no wheel tag rule for platform {platform!r}")


def target_tags(platform: str, python: str) -> list[Tag]:
    """The wheel tags an interpreter of `python` on `platform` accepts, most preferred first."""
    major, minor = (int(p) for p in python.split(".")[:2])
    platforms = _platform_tags(platform)
    return [
        *cpython_tags((major, minor), platforms=platforms),
        *compatible_tags((major, minor), f"cp{major}{minor}", platforms),
    ]


def marker_environment(platform: str, python: str) -> dict[str, str]:
    """PEP 508 marker values of the target, to evaluate `marker` entries of a pylock."""
    windows = platform.endswith("windows-msvc")
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "nt" if windows else "posix",
        "platform_machine": "AMD64" if windows else "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Windows" if windows else "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "win32" if windows else "linux",
        "extra": "",
    }


def is_sdist(filename: str) -> bool:
    return filename.endswith((".tar.gz", ".zip"))


def locked_files(pylock: Path, platform: str, python: str) -> list[LockedFile]:
    """The files a target installs from `pylock` (one per package that applies), sorted by name:
    its best wheel, else its sdist (built at install time). Raises LockError for a malformed
    pylock (parse_pylock) and for a package with neither for the target."""
    return _select_files(
        parse_pylock(pylock.read_bytes(), str(pylock)), pylock.name, platform, python
    )


def _select_files(
    doc: Mapping[str, Any], where: str, platform: str, python: str
) -> list[LockedFile]:
    """locked_files on a pylock `doc` that parse_pylock checked (`where` names it): what PEP
    751's installer algorithm selects for the target (`packaging.pylock.Pylock.select`: the
    lock's `environments` and `requires-python`, each package's marker, its best wheel by tag
    priority, else its sdist, which the build makes offline)."""
    try:
        chosen = list(
            Pylock.from_dict(doc).select(
                environment=marker_environment(platform, python),  # type: ignore[arg-type]
                tags=target_tags(platform, python),
            )
        )
    except (PylockValidationError, PylockSelectError) as exc:
        raise LockError(
            f"{where}: nothing to install for {platform} / Python {python}: {exc}; a build "
            "installs wheels, and builds a locked sdist offline (docs/rocm.md); run "
            "`envbuilder lock` to re-resolve"
        ) from None
    return sorted((_locked_file(where, pkg, dist) for pkg, dist in chosen), key=_file_order)


def _file_order(f: LockedFile) -> tuple[str, str]:
    return (f.name, f.filename)


def _locked_file(where: str, pkg: Package, dist: object) -> LockedFile:
    """The LockedFile of the artifact `select` chose for `pkg`: a wheel, an sdist, or a
    direct-URL archive that is a wheel (`torch @ https://...whl`)."""
    url = getattr(dist, "url", None)
    filename = getattr(dist, "name", None) or url_filename(str(url or ""))
    sha = dict(getattr(dist, "hashes", None) or {}).get("sha256")
    is_archive = isinstance(dist, PackageArchive)
    usable = isinstance(dist, PackageWheel | PackageSdist) or (
        is_archive and filename.endswith(".whl")
    )
    if not usable or not sha or not url:
        raise LockError(
            f"{where}: {pkg.name} {pkg.version or ''}: the locked {filename or 'artifact'} "
            "is not a wheel or sdist with a url and a sha256 hash; run `envbuilder lock` "
            "to re-resolve"
        )
    return LockedFile(
        str(canonicalize_name(pkg.name)),
        str(pkg.version or ""),
        filename,
        url,
        sha,
        getattr(dist, "size", None),
        pkg.index,
    )


# --- locked sdists: their build backend must be in the same pylock ----------------------------

#: What a build frontend assumes for an sdist without [build-system] (PEP 518).
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)
_PYPROJECT_LIMIT = 1 << 20


def sdist_build_requires(path: Path) -> list[str]:
    """`[build-system] requires` of an sdist (.tar.gz or .zip), read from its top-level
    pyproject.toml without unpacking anything else; PEP 518's default when it has none.
    LockError when the file cannot be read as an sdist."""
    try:
        data = _zip_pyproject(path) if path.name.endswith(".zip") else _tar_pyproject(path)
        doc = tomllib.loads(data.decode("utf-8")) if data is not None else {}
    except (
        OSError,
        tarfile.TarError,
        zipfile.BadZipFile,
        UnicodeDecodeError,
        tomllib.TOMLDecodeError,
    ) as exc:
        raise LockError(f"{path.name}: cannot read its pyproject.toml: {exc}") from None
    system = doc.get("build-system")
    if not isinstance(system, dict) or "requires" not in system:
        return list(DEFAULT_BUILD_REQUIRES)
    requires = system["requires"]
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise LockError(f"{path.name}: [build-system] requires is not a list of strings")
    return list(requires)


def _zip_pyproject(path: Path) -> bytes | None:
    """The top-level pyproject.toml of a .zip sdist (its first MiB), None when it has none."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")]
        return zf.read(names[0])[:_PYPROJECT_LIMIT] if names else None


def _tar_pyproject(path: Path) -> bytes | None:
    """The top-level pyproject.toml of a .tar.gz sdist (its first MiB), None when it has none."""
    with tarfile.open(path, "r:gz") as tar:
        member = next(
            (
                m
                for m in tar
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")
            ),
            None,
        )
        fh = tar.extractfile(member) if member is not None else None
        return fh.read(_PYPROJECT_LIMIT) if fh is not None else None


def unmet_build_requires(
    doc: Mapping[str, Any], platform: str, python: str, requires: Sequence[str]
) -> list[str]:
    """The build requirements no wheel of the pylock `doc` satisfies for the target (name,
    version, marker; extras are not followed). Only the backend's direct requirements are
    checked: setuptools, the real `rocm` sdist's backend, has no dependencies."""
    environment = marker_environment(platform, python)
    wheels = [
        f for f in _select_files(doc, "the pylock", platform, python) if not is_sdist(f.filename)
    ]
    unmet: list[str] = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise LockError(f"build requirement {text!r} is not a requirement: {exc}") from None
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        name = canonicalize_name(req.name)
        if not any(
            f.name == name and req.specifier.contains(f.version, prereleases=True) for f in wheels
        ):
            unmet.append(text)
    return unmet


def check_sdist_builds(
    project: Project,
    doc: Mapping[str, Any],
    where: str,
    platform: str,
    python: str,
    *,
    indexes: Mapping[str, Index],
) -> None:
    """Refuse a pylock whose locked sdist could not be built offline: an install builds it in an
    isolated environment from the wheelhouse alone (`pip install --no-index --find-links`,
    `uv pip sync --offline --find-links`), so its build backend's requirements must be wheels of
    the same pylock. Each sdist is fetched into the cache (hash-checked, as a build would) to
    read its [build-system]. LockError naming the package and what is missing."""
    sdists = [f for f in _select_files(doc, where, platform, python) if is_sdist(f.filename)]
    if not sdists:
        return
    mirrors = mirrored_sources(indexes, project.root)
    problems: list[str] = []
    for f in sdists:
        path = _fetch_one(project, f, mirrors, no_progress).path
        unmet = unmet_build_requires(doc, platform, python, sdist_build_requires(path))
        if unmet:
            problems.append(
                f"{f.name} {f.version} is locked as an sdist ({f.filename}), which the install "
                f"builds offline from the locked wheels; its build backend needs "
                f"{', '.join(unmet)}, which no wheel in this pylock satisfies: add "
                f"{' and '.join(repr(u) for u in unmet)} to the env's packages and lock again"
            )
    if problems:
        raise LockError(f"{where}: " + "\n".join(problems))


# --- fetching ----------------------------------------------------------------------------------


def _ssl_context() -> ssl.SSLContext:
    cafile = os.environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=cafile if cafile and Path(cafile).is_file() else None)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _mirror_candidates(src: IndexSource, f: LockedFile) -> Iterable[str]:
    """URLs (or a path) where a mirror may hold `f`: a folder's file, `<url>/<file name>`, and
    the link a simple-index page `<url>/<project>/` gives for that file."""
    folder = src.mirror_folder()
    if folder is not None:
        yield str(folder / f.filename)
        return
    base = (src.mirror_url() or "").rstrip("/") + "/"
    yield urljoin(base, quote(f.filename))
    yield from _simple_page_links(base, f)


def page_links(page: str) -> list[str] | None:
    """The absolute http(s) links (fragments kept) of the HTML page `page` (a simple index's
    project page, a flat listing); None when the page cannot be read (a 403 or 404 for a
    project the index does not hold, an unreachable host)."""
    try:
        with open_url(page, timeout=60) as resp:
            parser = _Links()
            parser.feed(resp.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    links = (urljoin(page, href) for href in parser.hrefs)
    # a page must not point envbuilder at local files
    return [link for link in links if link.startswith(("https://", "http://"))]


def _simple_page_links(index_url: str, f: LockedFile) -> Iterable[str]:
    """The links the simple-index page `<index_url>/<project>/` gives for `f`: by its file name
    (name, version, tags) or by a `#sha256=` fragment equal to its hash. None when the page
    cannot be read."""
    page = urljoin(index_url.rstrip("/") + "/", f"{f.name}/")
    for href in page_links(page) or []:
        link, _, fragment = href.partition("#")
        if unquote(link.rsplit("/", 1)[-1]) == f.filename or fragment == f"sha256={f.sha256}":
            yield link


def _of_index(src: IndexSource, f: LockedFile) -> bool:
    """Whether `f` comes from the index `src`: the pylock entry names it (`index`), or, in a
    pylock without `index`, the file's URL lies under the index's URL."""
    if f.index is not None:
        return f.index.rstrip("/") == src.canonical.rstrip("/")
    return f.url.startswith(src.canonical.rstrip("/") + "/")


def _copy_verified(
    reader: Any, dest: Path, f: LockedFile, total: int | None, progress: ProgressFn
) -> int:
    """Stream `reader` into `dest` (atomically) if its sha256 matches the lock. Returns bytes.
    A source that sends more than the size the pylock records is cut off there (a mirror
    streaming an endless body would otherwise fill the disk before the hash could refuse it)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    done = 0
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := reader.read(_CHUNK):
                done += len(chunk)
                if f.size is not None and done > f.size:
                    raise LockError(
                        f"{f.filename}: the source sent more than the {f.size} bytes the lock "
                        "records; the file was refused"
                    )
                out.write(chunk)
                digest.update(chunk)
                progress(f.filename, done, total)
        if digest.hexdigest() != f.sha256:
            raise LockError(
                f"{f.filename}: sha256 {digest.hexdigest()} does not match the lock "
                f"({f.sha256}); the file was refused"
            )
        Path(tmp).chmod(0o644)  # readable in a build context whatever user builds it
        Path(tmp).replace(dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return done


def _fetch_one(
    project: Project, f: LockedFile, mirrors: Sequence[IndexSource], progress: ProgressFn
) -> CachedArtifact:
    dest = cache_path(project, f.sha256, f.filename)
    if dest.is_file():
        return CachedArtifact(f.name, f.version, f.filename, f.sha256, dest)
    refused: list[str] = []
    for src in mirrors:
        if not _of_index(src, f):
            continue
        for where in _mirror_candidates(src, f):
            got = _try_fetch(where, dest, f, progress, refused)
            if got is not None:
                return CachedArtifact(f.name, f.version, f.filename, f.sha256, dest, "mirror", got)
    got = _try_fetch(f.url, dest, f, progress, refused)
    if got is not None:
        return CachedArtifact(f.name, f.version, f.filename, f.sha256, dest, "download", got)
    # PEP 751: the recorded URL is gone; its index may still list the file (name, version, hash)
    for where in _simple_page_links(f.index, f) if f.index else ():
        got = _try_fetch(where, dest, f, progress, refused)
        if got is not None:
            return CachedArtifact(f.name, f.version, f.filename, f.sha256, dest, "download", got)
    raise LockError(
        f"cannot fetch {f.filename} (sha256 {f.sha256}):\n  "
        + "\n  ".join(refused)
        + "\nGive its index a mirror (ENVBUILDER_MIRROR_<INDEX_NAME>=folder or URL)."
    )


def _try_fetch(
    where: str, dest: Path, f: LockedFile, progress: ProgressFn, refused: list[str]
) -> int | None:
    try:
        if "://" not in where:
            path = Path(where)
            if not path.is_file():
                refused.append(f"{where}: not there")
                return None
            with path.open("rb") as fh:
                return _copy_verified(fh, dest, f, path.stat().st_size, progress)
        with open_url(where, timeout=120) as resp:
            length = resp.headers.get("Content-Length")
            return _copy_verified(resp, dest, f, int(length) if length else f.size, progress)
    except (LockError, urllib.error.URLError, OSError, ValueError) as exc:
        refused.append(redact(f"{where}: {exc}"))  # a mirror URL may carry a token
    return None


def open_url(url: str, timeout: float) -> Any:
    """urlopen of `url`. Credentials in it (`https://user:TOKEN@host/...`, as uv takes a mirror's)
    are sent as HTTP Basic auth, not to a redirect's target, and never as part of the host."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        request = urllib.request.Request(url)
    else:
        request = urllib.request.Request(
            urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        )
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        basic = base64.b64encode(pair.encode("utf-8")).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {basic}")
    return urllib.request.urlopen(request, timeout=timeout, context=_ssl_context())


def fetch_locked(
    project: Project,
    env: str | EnvSpec,
    target: str,
    progress: ProgressFn = no_progress,
    *,
    indexes: Mapping[str, Index],
) -> list[CachedArtifact]:
    """Make sure every wheel the target's pylock installs is in the cache; return them, sorted by
    package name. Downloads each file at most once (mirror first), accepts it only by sha256.
    `indexes`: the spec's named indexes (their mirrors on this machine are tried first).
    Raises LockError when the env/target is not locked, its pylock is not the one the lock
    recorded (load_verified_lock) or a file cannot be fetched. Whether the lock is
    current for the spec is the caller's check (the targets make it before building)."""
    name = env if isinstance(env, str) else env.name
    pylock = load_verified_lock(project, name, target, spec_hash=None).pylock
    files = _select_files(pylock.doc, pylock.path.name, pylock.entry.platform, pylock.entry.python)
    mirrors = mirrored_sources(indexes, project.root)
    return [_fetch_one(project, f, mirrors, progress) for f in files]


def downloaded_bytes(artifacts: Iterable[CachedArtifact]) -> int:
    """Bytes this fetch brought into the cache (0 when everything was cached already)."""
    return sum(a.downloaded_bytes for a in artifacts)


def write_wheelhouse(
    project: Project,
    env: str | EnvSpec,
    target: str,
    dest_dir: Path,
    in_image_prefix: str = "/tmp/envbuilder/wheels",
    progress: ProgressFn = no_progress,
    *,
    indexes: Mapping[str, Index],
) -> Path:
    """Fetch the target's wheels, hard-link (or copy) them into `dest_dir/wheels/`, and write
    `dest_dir/requirements.txt`: one `<in_image_prefix>/<filename> --hash=sha256:<hex>` line per
    wheel, sorted. Returns the requirements.txt path."""
    artifacts = fetch_locked(project, env, target, progress, indexes=indexes)
    wheels = dest_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for art in artifacts:
        link = wheels / art.filename
        link.unlink(missing_ok=True)
        try:
            os.link(art.path, link)
        except OSError:  # another filesystem
            shutil.copyfile(art.path, link)
    prefix = in_image_prefix.rstrip("/")
    lines = [f"{prefix}/{a.filename} --hash=sha256:{a.sha256}" for a in artifacts]
    requirements = dest_dir / "requirements.txt"
    atomic_write_text(requirements, "\n".join(lines) + "\n")
    return requirements

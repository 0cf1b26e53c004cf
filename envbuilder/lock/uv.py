"""The uv run: resolve one request (one env, one platform, one Python) with uv and turn uv's PEP 751
output into the bytes of a committed pylock.

uv does the resolving (`uv pip compile --format pylock.toml`); this module only
  * writes the inputs uv needs: a throw-away pyproject.toml whose `[[tool.uv.index]]` entries are
    `explicit` (used only by the packages pinned to them through `[tool.uv.sources]`), so torch and
    friends come from their index and everything else from the default index;
  * points uv at a mirror of an index when one is configured (envbuilder.lock.indexes: a folder,
    used as a flat find-links listing, or a URL), and
  * post-processes the result: artifacts of mirrored packages get their canonical URL back
    (`<index url>/<file name>`), packages of named indexes get PEP 751's `index` (the canonical
    index URL, so a file can be found on any mirror of that index by name, version and hash),
    fields that depend on where a file was fetched from (upload time, size) are dropped for
    packages of named indexes, nothing machine-specific (a path, a file:// URL) may remain,
    packages are sorted, and a "generated" header is added.

An earlier pylock handed back to uv as preferences gets, for its pinned packages, the `index` uv
resolves that index from on this machine (preferences_for_uv): uv keeps an earlier pin of a
package of a named index only when the entry names that index, and `uv pip compile` itself
writes no `index`.

A request may name a `first_index` (a pip-SDK env's AMD index, envbuilder.lock.sdk): uv then
searches it for every name before the default index (uv's first-index strategy: a name it serves
comes from it only), with its 403-for-a-missing-project answer treated as "not here"
(`ignore-error-codes`, which only a uv configuration file can set: uv.toml, --config-file).

uv runs with a clean environment (uv_environment): every `UV_*` variable that can change what uv
resolves (UV_INDEX*, UV_DEFAULT_INDEX, UV_EXTRA_INDEX_URL, UV_FIND_LINKS, UV_INDEX_STRATEGY,
UV_PRERELEASE, ...) is dropped, only cache, offline and network settings pass; the default
index is PyPI unless this machine names another in ENVBUILDER_DEFAULT_INDEX (docs/lock.md).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from packaging.utils import canonicalize_name

from envbuilder.core import interrupts, stale
from envbuilder.core.errors import LockError, output_tail
from envbuilder.core.fsutil import write_error
from envbuilder.core.model import Index
from envbuilder.host.pyfinder import uv_bin
from envbuilder.lock.indexes import IndexSource, index_source, mirror_env_var
from envbuilder.lock.verified import url_filename

#: The `UV_*` variables that reach uv: where its cache is, whether it may go online, how it talks
#: to the network. None of them changes what a resolution picks; every other `UV_*` is dropped.
UV_PASSTHROUGH = frozenset(
    {
        "UV_CACHE_DIR",
        "UV_NO_CACHE",
        "UV_OFFLINE",
        "UV_HTTP_TIMEOUT",
        "UV_REQUEST_TIMEOUT",
        "UV_HTTP_RETRIES",
        "UV_NATIVE_TLS",
        "UV_CONCURRENT_DOWNLOADS",
        "UV_CONCURRENT_BUILDS",
        "UV_NO_PROGRESS",
    }
)
#: The dropped `UV_*` variables `lock` warns about: those that change what uv resolves (where it
#: looks, which versions it may pick, what it must build). Other dropped ones (Python discovery,
#: tool and venv settings) are irrelevant to a `uv pip compile` run with --python and go silently.
RESOLUTION_VARIABLE_PREFIXES = (
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_PRERELEASE",
    "UV_RESOLUTION",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_BUILD_CONSTRAINT",
    "UV_EXCLUDE_NEWER",
    "UV_TORCH_BACKEND",
    "UV_NO_BUILD",
    "UV_NO_BINARY",
    "UV_KEYRING_PROVIDER",
    "UV_INSECURE_HOST",
)
#: This machine's default index for locks (a PyPI mirror), in place of uv's own UV_DEFAULT_INDEX.
DEFAULT_INDEX_ENV = "ENVBUILDER_DEFAULT_INDEX"
#: The HTTP answer an index gives for a project it does not hold and uv must treat as "not here"
#: when the index is searched first (AMD's indexes answer 403; uv special-cases PyTorch's only).
FIRST_INDEX_IGNORED_CODES = (403,)

#: PEP 751 `environments` written into each pylock, so installers refuse the wrong platform.
ENVIRONMENTS: dict[str, str] = {
    "x86_64-manylinux_2_28": "sys_platform == 'linux' and platform_machine == 'x86_64'",
    "x86_64-pc-windows-msvc": "sys_platform == 'win32' and platform_machine == 'AMD64'",
}


@dataclass(frozen=True)
class ResolveRequest:
    """Everything uv needs for one resolution (one env, one platform, one Python)."""

    platform: str
    python: str
    packages: tuple[str, ...]
    index_pins: tuple[tuple[str, str], ...]  # sorted (canonical package name, index name)
    indexes: tuple[IndexSource, ...]  # the indexes named in index_pins, sorted by name
    first_index: str | None = None  # searched first for every name (a pip-SDK env's index)

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
    first_index: str | None = None,
) -> tuple[ResolveRequest, list[str]]:
    """A ResolveRequest with each pinned index's source on this machine, plus warnings (mirrors,
    `UV_*` variables uv will not see). `first_index` must be one of the pinned indexes."""
    pins = tuple(sorted((str(canonicalize_name(p)), i) for p, i in index_pins.items()))
    sources: list[IndexSource] = []
    warnings = ignored_uv_warnings(os.environ if environ is None else environ)
    if first_index is not None and first_index not in {i for _, i in pins}:
        raise LockError(f"index {first_index!r} is searched first but no package is pinned to it")
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
    request = ResolveRequest(platform, python, tuple(packages), pins, tuple(sources), first_index)
    return request, warnings


def uv_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment uv runs in: `environ` without the `UV_*` variables that could change
    what it resolves (see UV_PASSTHROUGH)."""
    env = {k: v for k, v in environ.items() if not k.startswith("UV_") or k in UV_PASSTHROUGH}
    return {**env, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}


def ignored_uv_warnings(environ: Mapping[str, str]) -> list[str]:
    """One warning naming the resolution-changing `UV_*` variables of `environ` that uv will not
    see, if any."""
    dropped = sorted(
        k for k in environ if k.startswith(RESOLUTION_VARIABLE_PREFIXES) and k not in UV_PASSTHROUGH
    )
    if not dropped:
        return []
    return [
        f"ignoring {', '.join(dropped)}: a lock resolves the same on every machine, so uv "
        f"runs without UV_* settings that change resolution (a PyPI mirror: {DEFAULT_INDEX_ENV}"
        "=URL; another index: the spec's [indexes] and index_pins)"
    ]


def uv_config_for(request: ResolveRequest) -> str | None:
    """The uv.toml of a request with a first index: that index, searched before the default
    one, a 403 answer meaning "not here". None without a first index."""
    if request.first_index is None:
        return None
    src = request.index(request.first_index)
    lines = [
        "[[index]]",
        f"name = {_toml_str(src.name)}",
        f"url = {_toml_str(src.location)}",
        f"ignore-error-codes = {list(FIRST_INDEX_IGNORED_CODES)}",
    ]
    if src.flat:
        lines.append('format = "flat"')
    return "\n".join(lines) + "\n"


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
    in `upgrade_packages` (uv re-resolves those and whatever they need).

    uv runs in its own process group in a temp folder; an interrupt ends the group and removes
    the folder (envbuilder.core.interrupts)."""
    # swept by the next lock once no process holds its owner file (a uv left running by a
    # SIGKILLed lock holds it: pass_fds below)
    with stale.owned_dir("envbuilder-lock-") as owned:
        work = owned.path
        out = work / "pylock.toml"  # uv insists on this name pattern for pylock output
        config = uv_config_for(request)
        _write_uv_inputs(work, out, request, config, None if upgrade else previous)
        cmd = _uv_compile_command(request, out.name, config is not None)
        if upgrade:
            cmd.append("--upgrade")
        for name in upgrade_packages:
            cmd += ["--upgrade-package", name]
        env = uv_environment(os.environ)
        try:
            proc = interrupts.run(cmd, cwd=work, env=env, pass_fds=(owned.fd,))
        except OSError as exc:
            raise LockError(f"cannot run uv ({cmd[0]}): {exc.strerror or exc}") from None
        if proc.returncode != 0:
            raise LockError(_uv_failure(request, proc.stderr))
        return out.read_bytes()


def _write_uv_inputs(
    work: Path, out: Path, request: ResolveRequest, config: str | None, previous: bytes | None
) -> None:
    """pyproject.toml and uv.toml (with a config) in `work`; `previous` as uv's preferences in
    its output file `out`."""
    try:
        (work / "pyproject.toml").write_text(pyproject_for(request), encoding="utf-8")
        if config is not None:
            (work / "uv.toml").write_text(config, encoding="utf-8")
        if previous is not None:
            out.write_bytes(preferences_for_uv(previous, request))
    except OSError as exc:
        raise write_error(work / "pyproject.toml", exc) from None


def _uv_compile_command(request: ResolveRequest, output: str, with_config: bool) -> list[str]:
    """`uv pip compile` of the pyproject.toml in the working folder into `output`."""
    cmd = [
        uv_bin(),
        "pip",
        "compile",
        "pyproject.toml",
        "--format",
        "pylock.toml",
        "--output-file",
        output,
        "--python-version",
        request.python,
        "--python-platform",
        request.platform,
        "--generate-hashes",
        "--no-header",
        "--no-config",
        "--quiet",
        # uv resolves for --python-version/--python-platform; the interpreter only builds
        # sdists that lack static metadata. Naming ours skips uv's interpreter discovery
        # (seconds per run where pyenv shims answer for versions that are not installed).
        "--python",
        sys.executable,
    ]
    if with_config:  # read although --no-config: it is named
        cmd += ["--config-file", "uv.toml"]
    if default_index := os.environ.get(DEFAULT_INDEX_ENV):
        cmd += ["--default-index", default_index]
    return cmd


def preferences_for_uv(previous: bytes, request: ResolveRequest) -> bytes:
    """An earlier pylock as uv must read it to keep its pins: each package pinned to a named
    index names, as `index`, the URL uv resolves that index from here (the mirror when there is
    one, spelled as uv spells it); other packages name none (as uv writes them). Without this uv
    drops the earlier version of every pinned package: a relock, or `--upgrade-package` of any
    other name, would move torch to the newest version the spec allows."""
    try:
        doc = tomlkit.parse(previous.decode("utf-8"))
    except (UnicodeDecodeError, tomlkit.exceptions.ParseError) as exc:
        raise LockError(
            f"the earlier pylock handed to uv is not valid TOML ({exc}); delete it and lock again"
        ) from None
    pins = dict(request.index_pins)
    for pkg in doc.get("packages", []):
        name = str(canonicalize_name(str(pkg.get("name", ""))))
        if name in pins:
            _set_index(pkg, request.index(pins[name]).uv_index_url())
        elif "index" in pkg:
            del pkg["index"]
    return tomlkit.dumps(doc).encode("utf-8")


#: Keys of a pylock package that hold its artifacts; PEP 751 lists `index` before them.
_ARTIFACT_KEYS = ("vcs", "directory", "archive", "sdist", "wheels")


def _set_index(package: Any, url: str) -> None:
    """Set a package's `index`, placed where PEP 751 lists it: before the artifact keys."""
    items = [(k, package[k]) for k in list(package.keys()) if k != "index"]
    for key, _ in items:
        del package[key]
    placed = False
    for key, value in items:
        if not placed and key in _ARTIFACT_KEYS:
            package["index"], placed = url, True
        package[key] = value
    if not placed:
        package["index"] = url


def _uv_failure(request: ResolveRequest, stderr: str) -> str:
    tail = output_tail(stderr, 15)
    hint = ""
    unmirrored = [s for s in request.indexes if not s.mirrored]
    if unmirrored:
        hint = "\nIf an index is unreachable from this machine, point it at a mirror: " + ", ".join(
            f"{mirror_env_var(s.name)}=/folder/of/wheels or URL" for s in unmirrored
        )
    return f"uv could not resolve for {request.platform} / Python {request.python}:\n{tail}{hint}"


def artifacts_of(package: Any) -> list[Any]:
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
            raise LockError(
                f"package {name} resolved to a directory or VCS checkout; "
                "locks record index artifacts only"
            )
        if src is not None:  # PEP 751: where a mirror of the index can be asked for the file
            _set_index(pkg, src.canonical)
    ordered = sorted(
        packages, key=lambda p: (str(canonicalize_name(str(p["name"]))), str(p["version"]))
    )
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

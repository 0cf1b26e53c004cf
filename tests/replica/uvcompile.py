"""Run the real uv against the replica the way envbuilder does.

envbuilder.lock.uv.run_uv writes a throw-away pyproject.toml whose dependencies are the env's
packages, with one `explicit = true` [[tool.uv.index]] per pinned index and a [tool.uv.sources]
entry per pinned package (for a pip-SDK env also a uv.toml that searches AMD's index first, given
with --config-file: what `searched` does here), and runs

    uv pip compile pyproject.toml --format pylock.toml --output-file pylock.toml
       --python-version X.Y --python-platform P --generate-hashes --no-header --no-config
       --quiet --python <interpreter> [--upgrade | --upgrade-package NAME ...]

with an earlier pylock as the output file (uv reads it as preferences). `compile_pylock` builds
the same pyproject and command line, and adds what the pip SDK needs on top, each optional:
`--override` lines, indexes that uv *searches* (written to a uv.toml given by --config-file,
because only a configuration file can set `ignore-error-codes`), and extra arguments such as
`--index-strategy`. The default index (PyPI in real life) is the replica's `pypi` index, set
through UV_DEFAULT_INDEX, and uv's cache is a folder of the caller's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import tomlkit
from packaging.utils import canonicalize_name

#: uv's --python-platform for envbuilder's Linux targets and its Windows target.
LINUX = "x86_64-manylinux_2_28"
WINDOWS = "x86_64-pc-windows-msvc"


def uv_bin() -> str:
    """The uv next to this interpreter (the project's venv), else uv on PATH."""
    here = Path(sys.executable).parent / ("uv.exe" if os.name == "nt" else "uv")
    return str(here) if here.is_file() else "uv"


@dataclass(frozen=True)
class SearchedIndex:
    """An index uv searches for every name (not only pinned ones), with the HTTP codes it
    treats as "not here"."""

    name: str
    url: str
    ignore_error_codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class CompileRequest:
    packages: tuple[str, ...]
    platform: str
    pins: Mapping[str, str] = field(default_factory=dict)  # package -> index name
    explicit: Mapping[str, str] = field(default_factory=dict)  # index name -> url
    python: str = "3.12"
    overrides: tuple[str, ...] = ()
    searched: tuple[SearchedIndex, ...] = ()
    extra_args: tuple[str, ...] = ()
    upgrade_packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    urls: tuple[str, ...]
    kinds: tuple[str, ...]  # "wheel" / "sdist" per url

    def indexes(self) -> set[str]:
        """The replica indexes the files come from (the first path part of each URL)."""
        return {urlsplit(u).path.strip("/").split("/")[0] for u in self.urls}

    def filenames(self) -> list[str]:
        return [unquote(urlsplit(u).path.rsplit("/", 1)[-1]) for u in self.urls]


@dataclass(frozen=True)
class CompileResult:
    command: tuple[str, ...]
    returncode: int
    stderr: str
    pylock_text: str | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.pylock_text is not None

    def packages(self) -> dict[str, LockedPackage]:
        """name (normalized) -> the locked package; empty when uv failed."""
        if self.pylock_text is None:
            return {}
        doc: dict[str, Any] = tomllib.loads(self.pylock_text)
        out: dict[str, LockedPackage] = {}
        for pkg in doc.get("packages", []):
            arts = [("sdist", pkg["sdist"])] if "sdist" in pkg else []
            arts += [("wheel", w) for w in pkg.get("wheels", [])]
            name = str(canonicalize_name(pkg["name"]))
            out[name] = LockedPackage(
                name,
                str(pkg["version"]),
                tuple(str(a["url"]) for _, a in arts),
                tuple(k for k, _ in arts),
            )
        return out

    def versions(self) -> dict[str, str]:
        return {n: p.version for n, p in self.packages().items()}


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def pyproject_text(request: CompileRequest) -> str:
    """The throw-away pyproject.toml, laid out as envbuilder.lock.uv.pyproject_for lays it out."""
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
    for name, url in sorted(request.explicit.items()):
        lines += [
            "[[tool.uv.index]]",
            f"name = {_toml_str(name)}",
            f"url = {_toml_str(url)}",
            "explicit = true",
            "",
        ]
    if request.pins:
        lines.append("[tool.uv.sources]")
        lines += [
            f"{_toml_str(str(canonicalize_name(p)))} = {{ index = {_toml_str(i)} }}"
            for p, i in sorted(request.pins.items())
        ]
    return "\n".join(lines) + "\n"


def config_text(searched: Sequence[SearchedIndex]) -> str:
    """A uv.toml holding the searched indexes, first searched first."""
    lines: list[str] = []
    for index in searched:
        lines += ["[[index]]", f"name = {_toml_str(index.name)}", f"url = {_toml_str(index.url)}"]
        if index.ignore_error_codes:
            lines.append(f"ignore-error-codes = {list(index.ignore_error_codes)}")
        lines.append("")
    return "\n".join(lines)


def command_line(request: CompileRequest) -> list[str]:
    """The uv command, flags in envbuilder's order, then the additions."""
    cmd = [
        uv_bin(),
        "pip",
        "compile",
        "pyproject.toml",
        "--format",
        "pylock.toml",
        "--output-file",
        "pylock.toml",
        "--python-version",
        request.python,
        "--python-platform",
        request.platform,
        "--generate-hashes",
        "--no-header",
        "--no-config",
        "--quiet",
        "--python",
        sys.executable,
    ]
    for name in request.upgrade_packages:
        cmd += ["--upgrade-package", name]
    if request.overrides:
        cmd += ["--override", "overrides.txt"]
    if request.searched:
        cmd += ["--config-file", "uv.toml"]
    return cmd + list(request.extra_args)


def compile_pylock(
    request: CompileRequest,
    work: Path,
    *,
    default_index: str,
    cache: Path,
    previous: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> CompileResult:
    """Write the inputs into `work` (a new folder) and run uv there."""
    work.mkdir(parents=True, exist_ok=False)
    (work / "pyproject.toml").write_text(pyproject_text(request), encoding="utf-8")
    if request.overrides:
        (work / "overrides.txt").write_text("\n".join(request.overrides) + "\n", "utf-8")
    if request.searched:
        (work / "uv.toml").write_text(config_text(request.searched), encoding="utf-8")
    if previous is not None:
        (work / "pylock.toml").write_text(previous, encoding="utf-8")
    base = os.environ if environ is None else environ
    env = {
        **{k: v for k, v in base.items() if not k.startswith("UV_")},
        "UV_DEFAULT_INDEX": default_index,
        "UV_CACHE_DIR": str(cache),
        "NO_COLOR": "1",
        "UV_NO_PROGRESS": "1",
        # the replica listens on 127.0.0.1: never route it through a proxy
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    cmd = command_line(request)
    proc = subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, check=False, timeout=120
    )
    out = work / "pylock.toml"
    text = out.read_text(encoding="utf-8") if proc.returncode == 0 and out.is_file() else None
    return CompileResult(tuple(cmd), proc.returncode, proc.stderr, text)


def with_index(pylock_text: str, index_of: Mapping[str, str]) -> str:
    """`pylock_text` with `index = <url>` added to the packages named in `index_of` (normalized
    name -> the index URL uv resolves them from). uv reads a pylock's `index` when it takes the
    file as preferences, and keeps a preference for a package pinned to a named index only when
    the URLs agree."""
    doc = tomlkit.parse(pylock_text)
    wanted = {str(canonicalize_name(n)): url for n, url in index_of.items()}
    for pkg in doc.get("packages", []):
        url = wanted.get(str(canonicalize_name(str(pkg["name"]))))
        if url is not None:
            pkg["index"] = url
    return tomlkit.dumps(doc)

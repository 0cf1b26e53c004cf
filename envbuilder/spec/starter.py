"""`envbuilder init`: a starter environments.toml for the GPU and OS in front of the user.

    Request(gpu, os)                     a GPU (marketing name or gfx; None: CPU) and an OS
    candidates(request) -> [Candidate]   every (ROCm release, torch, Python, Ubuntu) the
                                         compatibility data pairs with them, newest first
    choose(request, check) -> Starter    the first candidate whose spec `check` passes with no
                                         finding at all (no error, no warning)
    spec_text(candidate) -> str          the TOML, with comments that cite the data's sources

"Works" is decided by `envbuilder check` itself (the caller passes the check), not by a second
copy of its rules here: a candidate the data marks unverified, a Python the base image does not
have, a GPU the target's runtime does not cover, each gives a finding, and the next candidate is
tried. What is written is therefore exactly what check accepts with 0 warnings.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from packaging.version import Version

from envbuilder.core.compat import Compat, Gpu, RocmRelease, TorchIndexEntry
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.core.quoting import comment_text
from envbuilder.spec.citations import public_citation

HostOS = Literal["linux", "wsl2", "windows"]
OSES: tuple[HostOS, ...] = ("linux", "wsl2", "windows")
#: The targets that make sense per OS, in preference order (the first is `run`'s default):
#: linux: an image and a venv on the host; wsl2 (a Linux distro inside WSL): the env's own WSL
#: distro and Docker inside WSL (/dev/dxg); windows: the WSL distro and a native Windows venv.
TARGETS: dict[HostOS, tuple[str, ...]] = {
    "linux": ("docker", "native"),
    "wsl2": ("wsl2", "docker"),
    "windows": ("wsl2", "windows"),
}
#: Python minor versions tried, newest first.
PYTHONS = ("3.14", "3.13", "3.12", "3.11", "3.10")


@dataclass(frozen=True)
class Request:
    """What init starts from: a GPU (None: no AMD GPU, a CPU env) and the OS it runs on."""

    gpu: str | None
    os: HostOS
    found: str = ""  # how the host was detected ("" when given by flags), for the header


@dataclass(frozen=True)
class Candidate:
    """One starter env: what it installs and the data rows that say why."""

    env: str
    gpu: Gpu | None
    gpu_name: str | None
    release: RocmRelease | None
    row: TorchIndexEntry
    torch: str
    python: str
    ubuntu: str | None
    targets: tuple[str, ...]
    os: HostOS
    found: str = ""
    docker_base: str | None = None  # a CPU env's docker base (a ROCm env's has a default)


@dataclass(frozen=True)
class Starter:
    candidate: Candidate
    text: str
    tried: int  # how many candidates were checked before it


def gpu_row(name: str, compat: Compat) -> Gpu:
    """The data's row of `name`; UsageError listing the known names when there is none."""
    gpu = compat.gpu(name)
    if gpu is None:
        raise UsageError(
            f"--gpu {name!r}: not in the compatibility data (envbuilder/data/gpus.toml); "
            f"known: {', '.join(compat.gpu_names())}, or a gfx target such as gfx1100"
        )
    return gpu


def _releases(compat: Compat) -> list[RocmRelease]:
    """The releases newest first; those the data marks unverified are left out (check warns
    of them, so they could never be written)."""
    verified = [r for r in compat.releases if not r.unverified]
    return sorted(verified, key=lambda r: Version(r.version), reverse=True)


def _rows_for(release: RocmRelease, gfx: str, compat: Compat) -> list[TorchIndexEntry]:
    """The torch index rows whose wheels bundle `release` (its major.minor line; the exact
    release for AMD's own indexes) and are built for `gfx`."""
    rel = Version(release.version)
    rows = []
    for row in compat.torch_matrix:
        if row.unverified or not row.rocm or (row.gfx and gfx not in row.gfx):
            continue
        idx = Version(row.rocm)
        exact = len(idx.release) == 3
        if (idx == rel) if exact else (idx.release[:2] == rel.release[:2]):
            rows.append(row)
    return rows


def _ubuntus(release: RocmRelease | None, os: HostOS, compat: Compat) -> list[str | None]:
    """Ubuntu releases for a wsl2 target (newest first, only those whose python3 the data
    knows, so check can hold it to the env's Python); [None] when there is no wsl2 target."""
    if "wsl2" not in TARGETS[os]:
        return [None]
    known = release.ubuntu if release is not None else ("24.04", "22.04")
    ordered = sorted(known, key=Version, reverse=True)
    return [u for u in ordered if compat.base_image(f"ubuntu:{u}") is not None] or [None]


def _pythons(row: TorchIndexEntry) -> list[str]:
    return [p for p in PYTHONS if row.python.contains(p + ".0")]


def candidates(request: Request, compat: Compat | None = None) -> Iterator[Candidate]:
    """Every starter env for `request` the data allows, newest release, torch, Python and
    Ubuntu first; the full target list before each single target."""
    compat = compat or load_compat()
    gpu = gpu_row(request.gpu, compat) if request.gpu is not None else None
    target_sets = [TARGETS[request.os], *((t,) for t in TARGETS[request.os])]
    for targets in target_sets:
        if gpu is None:
            yield from _cpu_candidates(request, targets, compat)
        elif "wsl2" not in targets or gpu.wsl:  # the data's own "no WSL" would fail check
            for release in _releases(compat):
                for row in _rows_for(release, gpu.gfx, compat):
                    yield from _combinations(request, gpu, release, row, targets, compat)


def _cpu_candidates(
    request: Request, targets: tuple[str, ...], compat: Compat
) -> Iterator[Candidate]:
    """A CPU env: PyTorch's CPU index; a docker target gets a plain base image whose python3
    the data knows (a ROCm env's defaults to its release's image), the newest Python first."""
    plain = [b for b in compat.base_images if b.match.endswith("*") and "/" not in b.match]
    plain.sort(key=lambda b: Version(b.python), reverse=True)
    bases = [b.match.rstrip("*") for b in plain] if "docker" in targets else [None]
    for row in compat.torch_matrix:
        if row.index == "cpu" and not row.unverified:
            for base in bases:
                for cand in _combinations(request, None, None, row, targets, compat):
                    known = compat.base_image(base) if base else None
                    if known is None or known.python == cand.python:
                        yield replace(cand, docker_base=base)


def _combinations(
    request: Request,
    gpu: Gpu | None,
    release: RocmRelease | None,
    row: TorchIndexEntry,
    targets: tuple[str, ...],
    compat: Compat,
) -> Iterator[Candidate]:
    env = gpu.gfx if gpu is not None else "cpu"
    # a gfx target as asked stays one; a marketing name is written as given
    name = request.gpu if request.gpu and not re.fullmatch(r"gfx[0-9a-f]+", request.gpu) else None
    for torch in sorted(row.versions, key=Version, reverse=True):
        for python in _pythons(row):
            for ubuntu in _ubuntus(release, request.os, compat):
                yield Candidate(
                    env, gpu, name or (gpu.gfx if gpu else None), release, row, torch, python,
                    ubuntu if "wsl2" in targets else None, targets, request.os, request.found,
                )  # fmt: skip


def choose(request: Request, check: Callable[[str], Sequence[str]]) -> Starter:
    """The first candidate whose spec text `check` finds nothing in (check returns the
    findings, errors and warnings, as lines). EnvbuilderError (exit 1) naming the GPU, the OS
    and what check said of the best candidate when none passes."""
    _refuse_unsupported(request)
    tried = 0
    first: tuple[Candidate, Sequence[str]] | None = None
    for candidate in candidates(request):
        tried += 1
        text = spec_text(candidate)
        findings = check(text)
        if not findings:
            return Starter(candidate, text, tried)
        first = first or (candidate, findings)
    what = f"the GPU {request.gpu}" if request.gpu else "a CPU env"
    if first is None:
        raise EnvbuilderError(
            f"the compatibility data pairs no ROCm release and torch wheel index with {what}; "
            "see envbuilder/data/torch.toml and rocm.toml"
        )
    cand, findings = first
    raise EnvbuilderError(
        f"no combination the compatibility data has for {what} on {request.os} passes "
        f"`envbuilder check` without a warning ({tried} tried); the newest, ROCm "
        f"{cand.release.version if cand.release else '-'} with torch {cand.torch}, gets:\n  "
        + "\n  ".join(findings)
    )


def _refuse_unsupported(request: Request) -> None:
    """EnvbuilderError (exit 1), before any candidate is tried, when the data rules it out:
    a GPU row marked unverified (check warns on every spec naming it), or WSL for a GPU AMD's
    WSL stack does not cover."""
    gpu = gpu_row(request.gpu, load_compat()) if request.gpu else None
    if gpu is None:
        return
    if gpu.unverified:
        raise EnvbuilderError(
            f"the compatibility data's facts for {request.gpu} ({gpu.gfx}) are unverified "
            f"({gpu.source}), so no spec for it passes `envbuilder check` without a warning; "
            "start from a verified GPU's spec (e.g. `envbuilder init --gpu gfx1100 --os "
            f"{request.os}`) and set gpu yourself"
        )
    if request.os == "wsl2" and not gpu.wsl:
        raise EnvbuilderError(
            f"{request.gpu} ({gpu.gfx}) is not supported by AMD's WSL stack "
            f"(envbuilder/data/gpus.toml: {gpu.source}); on this GPU use --os linux"
        )


# --- the text ----------------------------------------------------------------------------------


def _comment(text: str, width: int = 98) -> list[str]:
    return [
        f"# {line}" for line in textwrap.wrap(comment_text(text), width - 2, break_on_hyphens=False)
    ]


def _s(value: str) -> str:
    """A TOML basic string meaning `value` (a JSON string is one)."""
    return json.dumps(value, ensure_ascii=False)


def _index_name(row: TorchIndexEntry) -> str:
    return row.index if row.index.startswith("amd") else f"pytorch-{row.index}"


def _requirement(cand: Candidate) -> str:
    local = cand.row.local or cand.row.index
    return f"torch=={cand.torch}+{local}"


def spec_text(cand: Candidate) -> str:
    """The starter spec of `cand` (comments first say where each value comes from)."""
    lines = [
        "# environments.toml: a starter written by `envbuilder init` "
        + (f"from this host ({cand.found})." if cand.found else "from the flags given."),
        "# `envbuilder check` holds it against the compatibility data (envbuilder/data/*.toml);",
        "# then `envbuilder lock`, `envbuilder render`, `envbuilder build`. Keys: docs/spec.md.",
        "",
        f"[indexes.{_index_name(cand.row)}]",
        *_comment(f"torch {cand.torch} wheels: {public_citation(cand.row.source)}"),
        f"url = {_s(cand.row.url)}",
        "",
        "[defaults.env]",
        'PYTHONUNBUFFERED = "1"',
        "",
        f"[env.{cand.env}]",
        f"description = {_s(_description(cand))}",
        *_env_lines(cand),
        f"packages = [{_s(_requirement(cand))}]",
        f"index_pins = {{ torch = {_s(_index_name(cand.row))} }}",
        *_comment(_targets_why(cand)),
        "targets = [" + ", ".join(_s(t) for t in cand.targets) + "]",
    ]
    lines += _table_lines(cand)
    return "\n".join(lines) + "\n"


def _table_lines(cand: Candidate) -> list[str]:
    """[env.NAME.docker] (a CPU env's base) and [env.NAME.wsl2] (its Ubuntu), when needed."""
    lines: list[str] = []
    if cand.docker_base is not None:
        lines += [
            "",
            f"[env.{cand.env}.docker]",
            *_comment(
                f"{cand.docker_base}: a plain base whose python3 is {cand.python} (images.toml);"
                " the venv is made with it."
            ),
            f"base = {_s(cand.docker_base)}",
        ]
    if cand.ubuntu is not None:
        lines += [
            "",
            f"[env.{cand.env}.wsl2]",
            *_comment(
                f"Ubuntu {cand.ubuntu}: the newest release "
                + (f"ROCm {cand.release.version}'s WSL stack supports" if cand.release else "")
                + f" whose python3 ({cand.python}) the data knows (images.toml)."
            ),
            f"ubuntu = {_s(cand.ubuntu)}",
        ]
    return lines


def _description(cand: Candidate) -> str:
    if cand.release is None or cand.gpu is None:
        return f"CPU-only PyTorch {cand.torch}, Python {cand.python}"
    return (
        f"ROCm {cand.release.version}, PyTorch {cand.torch}, Python {cand.python}, "
        f"{cand.gpu.names[0] if cand.gpu.names else 'an AMD GPU'} ({cand.gpu.gfx})"
    )


def _env_lines(cand: Candidate) -> list[str]:
    if cand.release is None or cand.gpu is None:
        return [
            'accelerator = "cpu"',
            *_comment(
                f"Python {cand.python}: the newest with torch wheels there that the "
                "targets' base images have (images.toml)."
            ),
            f"python = {_s(cand.python)}",
        ]
    return [
        'accelerator = "rocm"',
        *_comment(
            f"ROCm {cand.release.version}: the newest release the data pairs with "
            f"{cand.gpu.gfx} for these targets: {public_citation(cand.release.source)}"
        ),
        f"rocm = {_s(cand.release.version)}",
        *_comment(f"{cand.gpu.gfx}: {public_citation(cand.gpu.source)}"),
        f"gpu = {_s(cand.gpu_name or cand.gpu.gfx)}",
        *_comment(
            f"Python {cand.python}: the newest with wheels on that index "
            f"({cand.row.python}) that the targets' base images have (images.toml)."
        ),
        f"python = {_s(cand.python)}",
    ]


def _targets_why(cand: Candidate) -> str:
    why = {
        "linux": "a Linux host: an image (docker) and a venv on the host (native)",
        "wsl2": "inside WSL2: the env's own WSL distro (wsl2) and Docker in WSL with /dev/dxg",
        "windows": "Windows: a WSL2 distro (wsl2) and a native Windows venv (windows)",
    }[cand.os]
    full = TARGETS[cand.os]
    if cand.targets != full:
        dropped = ", ".join(t for t in full if t not in cand.targets)
        why += f"; {dropped} left out: the data has no combination for it that check accepts"
    return f"Targets for {why}."

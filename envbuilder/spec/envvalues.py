"""The checks of an env's values as the loader reads them (accelerator, Python and SDK versions,
targets, index pins, requirements, variables, GPUs): each refused value is a finding on its key,
and only good values are kept."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.core import grammar
from envbuilder.core.compatload import load_compat
from envbuilder.core.grammar import CUDA_RE, PYTHON_RE, ROCM_RE
from envbuilder.core.model import FindingSink, Index, Severity, did_you_mean
from envbuilder.spec.findings import FindingCollector
from envbuilder.spec.schema import ACCELERATORS
from envbuilder.targets import registry

_EnvErr = Callable[[Sequence[str], str], None]


def check_accelerator(e: _EnvErr, accelerator: Any) -> None:
    if accelerator is None:
        e(("accelerator",), 'missing; set accelerator = "rocm", "cuda" or "cpu"')
    elif accelerator not in ACCELERATORS:
        e(
            ("accelerator",),
            f"unknown accelerator {accelerator!r}"
            f"{did_you_mean(accelerator, ACCELERATORS)}; use one of: {', '.join(ACCELERATORS)}",
        )


def check_python(e: _EnvErr, python: Any) -> None:
    if python is None:
        e(("python",), 'missing; set python = "3.12" (major.minor)')
    elif not PYTHON_RE.fullmatch(python):
        e(
            ("python",),
            f"{python!r} is not a Python major.minor version; write e.g. "
            f'"{_major_minor(python) or "3.12"}"',
        )


@dataclass(frozen=True)
class _SdkKey:
    """An accelerator's SDK version key (rocm, cuda): needed by that accelerator only."""

    key: str
    pattern: re.Pattern[str]
    missing: str  # the finding when the accelerator needs it and it is not set
    malformed: str  # ... when it does not match `pattern`; {value} is its repr


ROCM_KEY = _SdkKey(
    "rocm",
    ROCM_RE,
    'missing for accelerator "rocm"; set rocm = "6.4.1" (a ROCm release)',
    '{value} is not a ROCm release number; write e.g. "6.4.1"',
)
CUDA_KEY = _SdkKey(
    "cuda",
    CUDA_RE,
    'missing for accelerator "cuda"; set cuda = "12.8"',
    '{value} is not a CUDA major.minor version; write e.g. "12.8"',
)


def check_sdk_version(e: _EnvErr, sdk: _SdkKey, value: Any, accelerator: Any) -> None:
    if accelerator == sdk.key and value is None:
        e((sdk.key,), sdk.missing)
    if value is not None and not sdk.pattern.fullmatch(value):
        e((sdk.key,), sdk.malformed.format(value=repr(value)))
    if value is not None and accelerator in ACCELERATORS and accelerator != sdk.key:
        e(
            (sdk.key,),
            f'set for accelerator "{accelerator}"; remove it, or set accelerator = "{sdk.key}"',
        )


def env_err_fn(ctx: FindingCollector, name: str) -> _EnvErr:
    def e(path: Sequence[str], message: str) -> None:
        ctx.env_finding(name, path, message)

    return e


def _major_minor(text: str) -> str | None:
    try:
        v = Version(text)
    except InvalidVersion:
        return None
    return f"{v.major}.{v.minor}" if v.major == 3 else None


def check_targets(name: str, m: dict[str, Any], ctx: FindingCollector) -> tuple[str, ...]:
    """The env's targets, each a registered one, in the order written."""
    known = registry.names()
    raw = m.get("targets")
    if raw is None:
        ctx.env_finding(
            name, ("targets",), f'missing; set targets = ["docker"] (any of: {", ".join(known)})'
        )
        return ()
    if not raw:
        ctx.env_finding(name, ("targets",), f"is empty; list at least one of: {', '.join(known)}")
    out: list[str] = []
    for t in raw:
        if t not in known:
            ctx.env_finding(
                name,
                ("targets",),
                f"unknown target {t!r}{did_you_mean(t, known)}; use any of: {', '.join(known)}",
            )
        elif t in out:
            ctx.env_finding(name, ("targets",), f"{t!r} is listed twice; list it once")
        else:
            out.append(t)
    for t in known:
        if t in m and t not in out:
            ctx.env_finding(
                name,
                (t,),
                f"[env.{name}.{t}] is set but {t!r} is not in targets; "
                f"add it to targets or remove the table",
                "warning",
            )
    return tuple(out)


def check_pins(
    name: str,
    path: tuple[str, ...],
    raw: Mapping[str, str],
    indexes: Mapping[str, Index],
    ctx: FindingCollector,
) -> dict[str, str]:
    out: dict[str, str] = {}
    for pkg, index in raw.items():
        if problem := grammar.package_name_problem(pkg):
            ctx.env_finding(name, (*path, pkg), problem)
            continue
        if index not in indexes:
            known = ", ".join(indexes) or "(none defined)"
            ctx.env_finding(
                name,
                (*path, pkg),
                f"pins {pkg} to unknown index {index!r}"
                f"{did_you_mean(index, indexes)}; define [indexes.{index}] with a url "
                f"or use one of: {known}",
            )
            continue
        out[str(canonicalize_name(pkg))] = index
    return out


def target_overrides(
    name: str,
    m: dict[str, Any],
    indexes: Mapping[str, Index],
    ctx: FindingCollector,
) -> tuple[dict[str, tuple[str, ...]], dict[str, dict[str, str]]]:
    packages: dict[str, tuple[str, ...]] = {}
    pins: dict[str, dict[str, str]] = {}
    for target in registry.names():
        table = m.get(target, {})
        if "packages" in table:
            packages[target] = check_requirements(
                name, (target, "packages"), table["packages"], ctx
            )
        if "index_pins" in table:
            pins[target] = check_pins(
                name, (target, "index_pins"), table["index_pins"], indexes, ctx
            )
    return packages, pins


def report(
    sink: FindingSink,
    env: str,
    path: Sequence[str],
    problem: str | None,
    severity: Severity = "error",
) -> None:
    """A finding on env key `path` when `problem` (a `grammar.*_problem` answer) is not None."""
    if problem is not None:
        sink.env_finding(env, path, problem, severity)


def report_image(sink: FindingSink, env: str, path: Sequence[str], image: str) -> None:
    """An error for a string that is no image reference, a warning for one without a tag."""
    report(sink, env, path, grammar.image_problem(image))
    report(sink, env, path, grammar.image_untagged(image), "warning")


def check_requirements(
    env: str, path: Sequence[str], packages: Sequence[str], ctx: FindingSink
) -> tuple[str, ...]:
    """The good PEP 508 requirements of `packages`; a finding for each refused one."""
    good, problems = grammar.requirements(packages)
    for problem in problems:
        ctx.env_finding(env, path, problem)
    return good


def check_variables(
    env: str, path: Sequence[str], values: Mapping[str, str], ctx: FindingSink
) -> dict[str, str]:
    """The good (name, value) pairs of an env table; a finding on each refused name."""
    good: dict[str, str] = {}
    for name, value in values.items():
        if problem := grammar.env_var_problem(name, value):
            ctx.env_finding(env, (*path, name), problem)
        else:
            good[name] = value
    return good


def resolve_gfx(env: str, gpu: str, ctx: FindingSink) -> str | None:
    """The gfx target of `gpu` (a marketing name or a gfx id); a finding when unknown."""
    compat = load_compat()
    found = compat.gpu(gpu)
    if found is not None:
        return found.gfx
    if re.fullmatch(r"gfx[0-9a-f]{3,4}", gpu):
        ctx.env_finding(
            env,
            ("gpu",),
            f"{gpu} is not in envbuilder's GPU table; the GPU checks are skipped for it",
            "warning",
        )
        return gpu
    names = compat.gpu_names()
    close = difflib.get_close_matches(gpu, names, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    ctx.env_finding(
        env,
        ("gpu",),
        f"unknown GPU {gpu!r}{hint}; write a marketing name such as "
        '"RX 7900 XTX" or a gfx target such as "gfx1100"',
    )
    return None

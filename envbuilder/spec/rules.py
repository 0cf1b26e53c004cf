"""The compatibility rules behind `envbuilder check`: values that are well-typed and safe (the
grammar, `envbuilder.core.grammar`, saw to that) but wrong together, reported as findings through a
`model.FindingSink` (never raised).

The spec against the shipped compatibility data (`envbuilder.core.compat`): torch vs index vs
Python, GPU vs target, ROCm release vs WSL stack and Ubuntu release, HSA override, RCCL knobs; and
what a target's quoting cannot carry (asked of `envbuilder.core.quoting`'s own predicates), so
whatever `render` or `build` would refuse later is refused here first, naming the key. The facts
live in `envbuilder/data/*.toml`, never here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envbuilder.core import activate
from envbuilder.core.compat import INSTALL_MODEL_LABELS, Compat, Gpu, RocmRelease, TorchIndexEntry
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.model import EnvSpec, FindingSink, Index
from envbuilder.targets import registry
from envbuilder.targets.base import CheckContext, packages_key, python_key, requirement_for

HSA_VAR = "HSA_OVERRIDE_GFX_VERSION"


# --- compatibility checks on a typed env ---------------------------------------------------


def check_spec_wide(envs: Sequence[EnvSpec], ctx: FindingSink) -> None:
    """Checks across envs, each target's own (`TargetDescriptor.checks_across`) over the envs
    that list it."""
    for descriptor in registry.all():
        listing = [env for env in envs if descriptor.name in env.targets]
        if listing:
            descriptor.checks_across(listing, ctx)


def check_env(env: EnvSpec, indexes: Mapping[str, Index], ctx: FindingSink) -> None:
    """Every compatibility check for one env (findings go to `ctx`)."""
    compat = load_compat()
    _check_rocm(env, compat, ctx)
    _check_gpu(env, compat, ctx)
    for label, target in _target_groups(env):
        _check_torch(env, target, label, indexes, compat, ctx)
        _check_wheel_urls(env, target, label, ctx)
    _check_pins_used(env, ctx)
    _check_hsa(env, compat, _linux_torch_rows(env, indexes, compat), ctx)
    _check_rccl(env, compat, ctx)
    check_variables(env, ctx)
    targets = CheckContext(compat, indexes, ctx)
    for target in env.targets:  # each target's own rules (its descriptor's `checks`)
        registry.get(target).checks(env, targets)


def check_variables(env: EnvSpec, ctx: FindingSink) -> None:
    """Every variable an env's activation sets on a target (its descriptor's `variables`, what
    the renderer and `build` write) must pass that target's quoting (its `variable_quoting`): a
    `"` is fine in a Dockerfile ENV but no cmd.exe `set` carries it, so not with the windows
    target."""
    reported: set[tuple[str, ...]] = set()
    for target in env.targets:
        descriptor = registry.get(target)
        try:
            with activate.writable_only():  # a bad one is reported by the checks above
                variables = descriptor.variables(env)
        except EnvbuilderError:
            continue
        for name, value in variables.items():
            path = _variable_path(env, target, name)
            if path is None or path in reported:
                continue
            for where, refusal in descriptor.variable_quoting:
                why = refusal(value)
                if why is not None:
                    reported.add(path)
                    ctx.env_finding(
                        env.name,
                        path,
                        f"value {why}: the {target} target writes it "
                        f"into {where}; change the value or drop the {target} target",
                    )
                    break


def _variable_path(env: EnvSpec, target: str, name: str) -> tuple[str, ...] | None:
    """The spec key a variable of the target's `variables(env)` comes from (None: envbuilder's
    own, e.g. ROCM_PATH). RCCL settings win over `env` on Linux (targets.base.linux_variables)."""
    descriptor = registry.get(target)
    if not descriptor.on_windows and name in env.rccl:
        return ("rccl", name)
    if name in env.env:
        return ("env", name)
    return descriptor.variable_key(env, name)


def _target_groups(env: EnvSpec) -> list[tuple[str, str]]:
    """One (label, representative target) per distinct set of packages/pins/Python, so a
    problem shared by all targets is reported once; label names the targets when they differ."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for t in env.targets:
        key = (env.packages_for(t), tuple(sorted(env.index_pins_for(t).items())), env.python_for(t))
        groups.setdefault(key, []).append(t)
    if len(groups) == 1:
        return [("", env.targets[0])] if env.targets else []
    return [(f" ({', '.join(ts)})", ts[0]) for ts in groups.values()]


def _linux_torch_rows(
    env: EnvSpec, indexes: Mapping[str, Index], compat: Compat
) -> list[TorchIndexEntry]:
    """The matrix rows that can serve the env's Linux torch requirement (several when it is a
    range), from the index it is pinned to; empty when envbuilder does not know that index."""
    for target in env.targets:
        if registry.get(target).on_windows:
            continue
        pin = env.index_pins_for(target).get("torch")
        index = indexes.get(pin) if pin else None
        req = requirement_for(env, target, "torch")
        rows = compat.index_rows(index.url) if index else []
        if rows and req is not None and req.url is None:
            return [r for r in rows if r.serves(req.specifier)]
    return []


def _check_rocm(env: EnvSpec, compat: Compat, ctx: FindingSink) -> None:
    if env.rocm is None:
        return
    release = env.release
    if release is None:
        known = ", ".join(r.version for r in compat.releases)
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {env.rocm} is not in envbuilder's release table; use one of: {known}",
        )
        return
    if release.version != env.rocm:
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"{env.rocm!r} means ROCm {release.version} with this "
            "envbuilder's data, which a newer envbuilder may change; write "
            f'rocm = "{release.version}"',
            "warning",
        )
    if release.unverified:
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"the WSL/package facts for ROCm {release.version} are "
            f"unverified ({release.source}); check them before relying on them",
            "warning",
        )
    _check_install_model(env, release, compat, ctx)


def _check_install_model(
    env: EnvSpec, release: RocmRelease, compat: Compat, ctx: FindingSink
) -> None:
    """pip-SDK releases (7.14+, 10.x) are locked by envbuilder (envbuilder.core.pipsdk): the env
    must name its GPUs and take torch from the release's index. The native amdrocm model is not
    implemented: say so."""
    model = release.install_model
    if model == "amdgpu-install":
        return
    if model == "pip-sdk":
        _check_pip_sdk(env, release, compat, ctx)
        return
    ctx.env_finding(
        env.name,
        ("rocm",),
        f"ROCm {release.version} installs through "
        f"{INSTALL_MODEL_LABELS[model]}, not amdgpu-install; envbuilder does not "
        "install that model yet (docs/rocm.md)",
        "warning",
    )


def _check_pip_sdk(env: EnvSpec, release: RocmRelease, compat: Compat, ctx: FindingSink) -> None:
    """What `envbuilder lock` needs for a pip-SDK release: the GPUs (their device extras), and
    torch pinned to the release's index (every ROCm-family name is pinned to the same one)."""
    if not env.gfx_targets:
        if env.gpu is None:  # an unknown GPU is reported on gpu already
            ctx.env_finding(
                env.name,
                ("gpu",),
                f"ROCm {release.version} installs through the "
                "pip SDK, whose lock holds the device code of the env's GPUs only; "
                'set gpu = "RX 7900 XTX" (or a gfx target, or a list of them)',
            )
        return
    _check_pip_sdk_extras(env, release, compat, ctx)
    _check_pip_sdk_torch_index(env, release, ctx)


def _check_pip_sdk_extras(
    env: EnvSpec, release: RocmRelease, compat: Compat, ctx: FindingSink
) -> None:
    targets = _pip_index_targets(compat, release.pip_index)
    missing = [g for g in env.gfx_targets if targets and g not in targets]
    if not missing:
        return
    others = [
        r.version
        for r in compat.releases
        if r.install_model == "pip-sdk"
        and r.pip_index != release.pip_index
        and set(missing) <= _pip_index_targets(compat, r.pip_index)
    ]
    them = "it" if len(missing) == 1 else "them"
    hint = f"; the index of ROCm {', '.join(others)} has {them}" if others else ""
    ctx.env_finding(
        env.name,
        ("gpu",),
        f"{', '.join(missing)}: no device-<gfx> extra on "
        f"ROCm {release.version}'s index ({release.pip_index}); it has "
        f"{', '.join(sorted(targets))}{hint}",
    )


def _pip_index_targets(compat: Compat, url: str | None) -> set[str]:
    """The gfx targets with device extras on a pip-SDK index (the union of its torch rows)."""
    return {g for r in compat.index_rows(url or "") for g in r.gfx}


def _check_pip_sdk_torch_index(env: EnvSpec, release: RocmRelease, ctx: FindingSink) -> None:
    """The first target whose torch pin is another index than the release's (one finding)."""
    for target in env.targets:
        pin = env.index_pins_for(target).get("torch")
        if pin is None:
            continue  # reported by the torch checks
        path = (target, "index_pins") if target in env.target_index_pins else ("index_pins",)
        index = env.indexes.get(pin)
        url = index.url.rstrip("/") if index else ""
        if url and url != (release.pip_index or "").rstrip("/"):
            ctx.env_finding(
                env.name,
                path,
                f"torch comes from {index.url if index else pin}, "
                f"but envbuilder locks ROCm {release.version}'s pip SDK from its "
                f"index {release.pip_index} (torch with device-<gfx> extras, every "
                "rocm/torch/triton name pinned to it); pin torch to an index with "
                "that url (a mirror goes in `mirror`)",
            )
            break


def _check_gpu(env: EnvSpec, compat: Compat, ctx: FindingSink) -> None:
    if env.gpu is None:
        if env.accelerator == "rocm":
            ctx.env_finding(
                env.name,
                ("gpu",),
                "not set; the GPU checks (WSL/Windows support, HSA "
                'override) are skipped; set gpu = "RX 7900 XTX" or a gfx target',
                "warning",
            )
        return
    if env.accelerator != "rocm":
        ctx.env_finding(
            env.name,
            ("gpu",),
            f"is ignored for accelerator {env.accelerator!r}; remove it",
            "warning",
        )
        return
    gpu = compat.gpu(env.gpu)
    if gpu is None:
        return
    label = f"{env.gpu} ({gpu.gfx})"
    release = env.release
    if gpu.unverified:
        ctx.env_finding(
            env.name,
            ("gpu",),
            f"the GPU table's facts for {label} are unverified "
            f"({gpu.source}); check them before relying on them",
            "warning",
        )
    _check_gpu_official(env, gpu, label, release, ctx)


def _check_gpu_official(
    env: EnvSpec, gpu: Gpu, label: str, release: RocmRelease | None, ctx: FindingSink
) -> None:
    since = gpu.linux_official_since
    if (
        release is None
        or not gpu.linux_official_known
        or not any(registry.get(t).gpu_stack == "linux" for t in env.targets)
    ):
        return
    if since is None or Version(release.version) < Version(since):
        when = f"from ROCm {since}" if since else "in no ROCm release"
        ctx.env_finding(
            env.name,
            ("gpu",),
            f"{label} is officially supported on Linux {when}, "
            f"not in ROCm {release.version}; it may still work",
            "warning",
        )


def _check_torch(
    env: EnvSpec,
    target: str,
    label: str,
    indexes: Mapping[str, Index],
    compat: Compat,
    ctx: FindingSink,
) -> None:
    req = requirement_for(env, target, "torch")
    if req is None or req.url is not None:
        return
    pin = env.index_pins_for(target).get("torch")
    if pin is None:
        _check_torch_unpinned(env, target, label, ctx)
        return
    index = indexes.get(pin)
    rows = compat.index_rows(index.url) if index else []
    if not rows:
        return  # not a PyTorch index envbuilder knows: nothing to check against
    torch = _TorchOnIndex(env, target, label, req, rows)
    serving = [r for r in rows if r.serves(req.specifier)]
    if not serving:
        ctx.env_finding(
            env.name,
            packages_key(env, target),
            f"{req}{label}: no torch wheel matching "
            f"'{req.specifier}' on the {torch.index} index (it serves "
            f"{_served(rows)}); {_suggest(req, compat)}",
        )
        return
    _check_torch_python(torch, serving, ctx)
    _check_torch_index_kind(env, serving[0], ctx)
    _check_torch_verified(torch, serving, ctx)


@dataclass(frozen=True)
class _TorchOnIndex:
    """One target's torch requirement and the rows of the known index its pin names."""

    env: EnvSpec
    target: str
    label: str  # " (<targets>)" when the targets differ in packages, pins or Python, else ""
    req: Requirement
    rows: Sequence[TorchIndexEntry]

    @property
    def index(self) -> str:
        return self.rows[0].index


def _check_torch_unpinned(env: EnvSpec, target: str, label: str, ctx: FindingSink) -> None:
    if env.accelerator == "rocm" and not registry.get(target).on_windows:
        ctx.env_finding(
            env.name,
            ("index_pins",),
            f"torch{label} has no index pin, so it "
            "would come from the default index (a CUDA build on Linux); pin it: "
            'index_pins = { torch = "<an index with url '
            'https://download.pytorch.org/whl/rocmX.Y>" }',
        )


def _check_torch_python(
    torch: _TorchOnIndex, serving: Sequence[TorchIndexEntry], ctx: FindingSink
) -> None:
    python = torch.env.python_for(torch.target)
    if not any(r.python.contains(python + ".0", prereleases=True) for r in serving):
        ctx.env_finding(
            torch.env.name,
            python_key(torch.env, torch.target),
            f"Python {python}{torch.label}: "
            f"{torch.req} on the {torch.index} index has wheels for Python "
            f"{_pyrange(serving[0])} only; use a Python in that range or another torch version",
        )


def _check_torch_verified(
    torch: _TorchOnIndex, serving: Sequence[TorchIndexEntry], ctx: FindingSink
) -> None:
    if all(r.unverified for r in serving):
        ctx.env_finding(
            torch.env.name,
            packages_key(torch.env, torch.target),
            f"{torch.req}{torch.label}: the {torch.index} index's torch "
            f"{_served(serving)} is unverified ({serving[0].source}); check it before "
            "relying on it",
            "warning",
        )


def _check_torch_index_kind(env: EnvSpec, row: TorchIndexEntry, ctx: FindingSink) -> None:
    """The index's ROCm (or none, for the cpu index) against the env's accelerator/release."""
    if env.accelerator == "rocm" and env.rocm and row.rocm:
        _check_index_matches_release(env, row, ctx)
    if env.accelerator == "rocm" and row.index == "cpu":
        ctx.env_finding(
            env.name,
            ("index_pins",),
            "torch comes from the cpu index, which has no "
            "ROCm build, but the accelerator is rocm; pin torch to a rocmX.Y index",
        )
    if env.accelerator == "cpu" and row.rocm:
        ctx.env_finding(
            env.name,
            ("index_pins",),
            f"torch comes from the {row.index} index, but "
            'the accelerator is cpu; pin the cpu index or set accelerator = "rocm"',
            "warning",
        )


def _check_index_matches_release(env: EnvSpec, row: TorchIndexEntry, ctx: FindingSink) -> None:
    idx = Version(row.rocm or "0")
    rel = Version(env.rocm or "0")
    if idx.release[:2] != rel.release[:2]:
        ctx.env_finding(
            env.name,
            ("index_pins",),
            f"torch comes from the {row.index} index but "
            f"the env's ROCm is {env.rocm}; the wheel bundles its own ROCm {idx}, the "
            "system's libraries (and the WSL libhsa fix) are for the other; prefer the "
            f"rocm{rel.major}.{rel.minor} index",
            "warning",
        )


def _served(rows: Sequence[TorchIndexEntry]) -> str:
    return ", ".join(dict.fromkeys(str(v) for r in rows for v in r.candidates()))


def _pyrange(row: TorchIndexEntry) -> str:
    lo = hi = None
    for s in row.python:
        if s.operator == ">=":
            lo = s.version
        if s.operator == "<":
            v = Version(s.version)
            hi = f"{v.major}.{v.minor - 1}"
    return f"{lo}-{hi}" if lo and hi else str(row.python)


def _suggest(req: Requirement, compat: Compat) -> str:
    versions = [v for v in _pinned_versions(req.specifier)]
    rows = [r for v in versions for r in compat.torch_indexes(v)]
    if rows:
        names = ", ".join(dict.fromkeys(r.index for r in rows))
        return f"torch {versions[0]} is on: {names}"
    return "pick a version the index serves"


def _pinned_versions(spec: SpecifierSet) -> list[str]:
    return [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]


def _check_wheel_urls(env: EnvSpec, target: str, label: str, ctx: FindingSink) -> None:
    """Direct wheel URLs: the wheel's tags must fit the target's Python and platform."""
    python = env.python_for(target).replace(".", "")
    for spec in env.packages_for(target):
        req = Requirement(spec)
        if req.url is None or not req.url.endswith(".whl"):
            continue
        filename = unquote(req.url.rsplit("/", 1)[-1])
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            ctx.env_finding(
                env.name,
                packages_key(env, target),
                f"{req.name}: {filename!r} is not a valid wheel file name",
            )
            continue
        interpreters = {t.interpreter for t in tags}
        platforms = {t.platform for t in tags}
        if not ({f"cp{python}", "py3", f"py{python}"} & interpreters):
            ctx.env_finding(
                env.name,
                packages_key(env, target),
                f"{req.name}: the wheel {filename} is "
                f"for {', '.join(sorted(interpreters))}, but the {target} target uses "
                f"Python {env.python_for(target)}; use a matching wheel or Python",
            )
        want = "win" if registry.get(target).on_windows else "linux"
        if "any" not in platforms and not any(want in p for p in platforms):
            ctx.env_finding(
                env.name,
                packages_key(env, target),
                f"{req.name}: the wheel {filename} is "
                f"for {', '.join(sorted(platforms))}, not for the {target} target; "
                f"give the {target} target its own packages ([env.{env.name}.{target}] "
                "packages = [...])",
            )


def _check_pins_used(env: EnvSpec, ctx: FindingSink) -> None:
    names = {str(canonicalize_name(Requirement(s).name)) for s in env.packages}
    for pkg in env.index_pins:
        if pkg not in names:
            ctx.env_finding(
                env.name,
                ("index_pins", pkg),
                f"pins {pkg}, which is not in packages; add it to packages or remove the pin",
                "warning",
            )


def _check_hsa(
    env: EnvSpec, compat: Compat, torch_rows: Sequence[TorchIndexEntry], ctx: FindingSink
) -> None:
    """HSA_OVERRIDE_GFX_VERSION against the gfx targets of the Linux torch wheel the env pins
    (they differ per index and torch version: torch.toml [gfx_set])."""
    gpu = compat.gpu(env.gpu) if env.gpu else None
    if HSA_VAR not in env.env:
        # a pip-SDK env's GPU outside its index's targets is _check_pip_sdk_extras' finding, and
        # an override on a pip-SDK release is warned against (_check_hsa_ignored)
        pip_sdk = env.release is not None and env.release.install_model == "pip-sdk"
        linux = any(not registry.get(t).on_windows for t in env.targets)
        if gpu is not None and linux and not pip_sdk:
            _check_hsa_needed(env, compat, gpu, torch_rows, ctx)
        return
    value = env.env[HSA_VAR]
    path = ("env", HSA_VAR)
    if problem := _hsa_value_problem(value):
        ctx.env_finding(env.name, path, problem)
        return
    if gpu is not None:
        _check_hsa_value(env, gpu, value, torch_rows, ctx)
    _check_hsa_ignored(env, path, ctx)


def _hsa_value_problem(value: str) -> str | None:
    if value.strip() == "":
        return (
            "is empty; an empty HSA_OVERRIDE_GFX_VERSION breaks GPU "
            "detection: remove it (or set the version your GPU needs, e.g. 10.3.0)"
        )
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", value):
        return f"{value!r} is not a gfx version like 10.3.0 or 11.0.0; remove it or fix the value"
    return None


def _check_hsa_ignored(env: EnvSpec, path: tuple[str, ...], ctx: FindingSink) -> None:
    """Where the override is set but does nothing good: TheRock wheels, Windows."""
    release = env.release
    if release is not None and release.install_model == "pip-sdk":
        ctx.env_finding(
            env.name,
            path,
            f"ROCm {release.version} comes as TheRock multi-arch "
            "wheels, which ship the gfx targets natively, and an override is reported "
            "to break TheRock >= 7.13 runtimes (a public report, unverified); remove "
            "HSA_OVERRIDE_GFX_VERSION",
            "warning",
        )
    if windows := [t for t in env.targets if registry.get(t).on_windows]:
        ctx.env_finding(
            env.name,
            path,
            f"has no effect on Windows (the {', '.join(windows)} target ignores it)",
            "warning",
        )


def _wheel_has(rows: Sequence[TorchIndexEntry], gfx: str) -> bool | None:
    """True when every wheel the torch requirement can resolve to is compiled for `gfx`, False
    when some is not, None when envbuilder does not know the wheels' targets."""
    sets = [r.gfx for r in rows if r.gfx]
    return all(gfx in targets for targets in sets) if sets else None


def _gfx_note(rows: Sequence[TorchIndexEntry]) -> str:
    unverified = any(r.gfx_set is not None and r.gfx_set.unverified for r in rows)
    return " (that wheel's gfx list is unverified)" if unverified else ""


def _check_hsa_needed(
    env: EnvSpec, compat: Compat, gpu: Gpu, rows: Sequence[TorchIndexEntry], ctx: FindingSink
) -> None:
    if _wheel_has(rows, gpu.gfx) is not False:
        return
    what = f"{env.gpu} ({gpu.gfx}) is not among the torch wheel's gfx targets{_gfx_note(rows)}"
    if gpu.hsa_override is not None:
        ctx.env_finding(
            env.name,
            ("env",),
            f"{what}; it usually needs HSA_OVERRIDE_GFX_VERSION = "
            f'"{gpu.hsa_override}" (not an official workaround)',
            "warning",
        )
        return
    known = (
        "no override is known to work"
        if gpu.hsa_override_known
        else "envbuilder knows no override for it"
    )
    others = compat.indexes_with_gfx(gpu.gfx)
    hint = (
        f"pin torch to an index whose wheels have it ({', '.join(others)})"
        if others
        else "use a torch wheel built for it"
    )
    ctx.env_finding(env.name, ("env",), f"{what} and {known}; {hint}", "warning")


def _check_hsa_value(
    env: EnvSpec, gpu: Gpu, value: str, rows: Sequence[TorchIndexEntry], ctx: FindingSink
) -> None:
    label = f"{env.gpu} ({gpu.gfx})"
    path = ("env", HSA_VAR)
    if _wheel_has(rows, gpu.gfx):
        if gpu.hsa_override is None and gpu.hsa_override_known:
            ctx.env_finding(
                env.name,
                path,
                f"set to {value} for {label}, which needs no override "
                "(the torch wheels are compiled for it); remove "
                "HSA_OVERRIDE_GFX_VERSION",
            )
        else:
            ctx.env_finding(
                env.name,
                path,
                f"set to {value} for {label}, but the torch wheel is "
                f"compiled for {gpu.gfx}; remove HSA_OVERRIDE_GFX_VERSION",
            )
    elif gpu.hsa_override is not None and value != gpu.hsa_override:
        ctx.env_finding(
            env.name,
            path,
            f"set to {value} for {label}; it runs as "
            f"{gpu.hsa_override} (HSA_OVERRIDE_GFX_VERSION = "
            f'"{gpu.hsa_override}")',
            "warning",
        )


def _check_rccl(env: EnvSpec, compat: Compat, ctx: FindingSink) -> None:
    knobs = compat.rccl
    for table, values in (("env", env.env), ("rccl", env.rccl)):
        for name in values:
            path = (table, name)
            if name in knobs.misspelled:
                real = knobs.misspelled[name]
                ctx.env_finding(
                    env.name,
                    path,
                    f"{name} is not read by RCCL (it reads the NCCL_* "
                    f'names); use {real} = "{values[name]}"',
                )
            elif name in knobs.pytorch:
                _check_pytorch_knob(env, table, name, knobs.pytorch[name], values[name], ctx)
            elif table == "rccl" and not name.startswith(("NCCL_", "RCCL_")):
                ctx.env_finding(
                    env.name,
                    path,
                    f"is not an NCCL_*/RCCL_* setting; move it to [env.{env.name}.env]",
                )
            elif name.startswith(("NCCL_", "RCCL_")) and name not in knobs.known:
                close = difflib.get_close_matches(name, knobs.known, n=1, cutoff=0.7)
                hint = f"; did you mean {close[0]}?" if close else ""
                ctx.env_finding(
                    env.name,
                    path,
                    f"{name} is not a setting envbuilder knows RCCL reads{hint}",
                    "warning",
                )


def _check_pytorch_knob(
    env: EnvSpec, table: str, name: str, real: str, value: str, ctx: FindingSink
) -> None:
    """An NCCL_* name that PyTorch (not RCCL) reads, as a deprecated alias of `real`."""
    if table == "rccl":
        ctx.env_finding(
            env.name,
            (table, name),
            f"{name} is PyTorch's setting, not RCCL's (PyTorch "
            f'reads it as a deprecated alias of {real}); set {real} = "{value}" in '
            f"[env.{env.name}.env]",
        )
    else:
        ctx.env_finding(
            env.name,
            (table, name),
            f"{name} is PyTorch's deprecated name for {real} "
            f'(RCCL does not read it); use {real} = "{value}"',
            "warning",
        )

"""The compatibility rules behind `envbuilder check`: values that are well-typed and safe (the
grammar, `envbuilder.grammar`, saw to that) but wrong together, reported as findings through a
`model.FindingSink` (never raised).

The spec against the shipped compatibility data (`envbuilder.compat`): torch vs index vs Python,
GPU vs target, ROCm release vs WSL stack and Ubuntu release, HSA override, RCCL knobs; and what a
target's quoting cannot carry (asked of `envbuilder.quoting`'s own predicates), so whatever
`render` or `build` would refuse later is refused here first, naming the key. The facts live in
`envbuilder/data/*.toml`, never here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from urllib.parse import unquote

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from envbuilder.compat import (
    INSTALL_MODEL_LABELS,
    Compat,
    Gpu,
    RocmRelease,
    TorchIndexEntry,
    WindowsWheels,
    load_compat,
)
from envbuilder.errors import EnvbuilderError
from envbuilder.model import EnvSpec, FindingSink, Index
from envbuilder.targets import registry
from envbuilder.targets.base import UBUNTU_CODENAMES, plain_ubuntu_release
from envbuilder.targets.docker import DockerTable
from envbuilder.targets.windows import WindowsTable
from envbuilder.targets.wsl2 import Wsl2Table

HSA_VAR = "HSA_OVERRIDE_GFX_VERSION"


# --- compatibility checks on a typed env ---------------------------------------------------


def check_spec_wide(envs: Sequence[EnvSpec], ctx: FindingSink) -> None:
    """Checks across envs: names that must be unique on one machine."""
    seen: dict[str, str] = {}
    for env in envs:
        wsl2 = env.table(Wsl2Table)
        if wsl2 is None:
            continue
        distro = wsl2.distro.lower()  # WSL compares distro names case-insensitively
        if distro in seen:
            ctx.env_finding(
                env.name,
                ("wsl2", "distro"),
                f"{wsl2.distro!r} is also env "
                f"{seen[distro]!r}'s WSL distro name; give each env its own",
            )
        seen.setdefault(distro, env.name)


def check_env(env: EnvSpec, indexes: Mapping[str, Index], ctx: FindingSink) -> None:
    """Every compatibility check for one env (findings go to `ctx`)."""
    compat = load_compat()
    _check_rocm(env, compat, ctx)
    _check_gpu(env, compat, ctx)
    for label, target in _target_groups(env):
        _check_torch(env, target, label, indexes, compat, ctx)
        _check_wheel_urls(env, target, label, ctx)
    _check_pins_used(env, ctx)
    _check_images(env, compat, ctx)
    _check_hsa(env, compat, _linux_torch_rows(env, indexes, compat), ctx)
    _check_rccl(env, compat, ctx)
    _check_windows(env, compat, indexes, ctx)
    check_variables(env, ctx)


def check_variables(env: EnvSpec, ctx: FindingSink) -> None:
    """Every variable an env's activation sets on a target (its descriptor's `variables`, what
    the renderer and `build` write) must pass that target's quoting (its `variable_quoting`): a
    `"` is fine in a Dockerfile ENV but no cmd.exe `set` carries it, so not with the windows
    target."""
    reported: set[tuple[str, ...]] = set()
    for target in env.targets:
        descriptor = registry.get(target)
        try:
            variables = descriptor.variables(env)
        except EnvbuilderError:
            continue  # a name or value that the checks above reported already
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
    if registry.get(target).os != "windows" and name in env.rccl:
        return ("rccl", name)
    if name in env.env:
        return ("env", name)
    windows = env.table(WindowsTable)
    if target == "windows" and name == "HIP_PATH" and windows and windows.hip_path:
        return ("windows", "hip_path")
    return None


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
        if registry.get(target).os == "windows":
            continue
        pin = env.index_pins_for(target).get("torch")
        index = indexes.get(pin) if pin else None
        req = _torch_req(env, target)
        rows = compat.index_rows(index.url) if index else []
        if rows and req is not None and req.url is None:
            return [r for r in rows if r.serves(req.specifier)]
    return []


def _check_images(env: EnvSpec, compat: Compat, ctx: FindingSink) -> None:
    """The base image's python3 must be the env's Python; a ROCm dev image its ROCm release."""
    bases: list[tuple[tuple[str, ...], str, str | None]] = []
    if (docker := env.table(DockerTable)) is not None:
        bases.append((("docker", "base"), docker.base, docker.python))
    if (wsl2 := env.table(Wsl2Table)) is not None:
        bases.append((("wsl2", "base"), wsl2.base, "python3"))
    for path, ref, interpreter in bases:
        known = compat.base_image(ref)
        if known is not None and interpreter == "python3" and known.python != env.python:
            ctx.env_finding(
                env.name,
                path,
                f"{ref}'s python3 is {known.python}, but the env's "
                f"Python is {env.python} (the venv is made with the base image's "
                f"python3); use a base with Python {env.python} or set python = "
                f'"{known.python}"',
            )
        m = re.fullmatch(r"rocm/dev-ubuntu-[0-9.]+:([0-9]+(?:\.[0-9]+)*)(?:-.*)?", ref)
        if m and env.rocm and not _same_release(m.group(1), env.rocm):
            ctx.env_finding(
                env.name,
                path,
                f"{ref} is ROCm {m.group(1)}, but the env's rocm is "
                f"{env.rocm}; use the image of that release",
                "warning",
            )
    release = compat.rocm(env.rocm) if env.accelerator == "rocm" and env.rocm else None
    ubuntu = plain_ubuntu_release(docker.base) if docker is not None else None
    if release is not None and release.install_model == "amdgpu-install" and ubuntu is not None:
        # The docker plan installs the release with its amdgpu-install .deb (targets/docker.py).
        codename = UBUNTU_CODENAMES.get(ubuntu)
        if codename is None or release.amdgpu_install_url(codename) is None:
            ctx.env_finding(
                env.name,
                ("docker", "base"),
                f"ROCm {release.version} on a plain "
                f"Ubuntu {ubuntu} image: the compatibility data has no "
                f"amdgpu-install package for it; use ubuntu:22.04 or ubuntu:24.04",
            )


def _same_release(a: str, b: str) -> bool:
    va, vb = Version(a), Version(b)
    n = min(len(va.release), len(vb.release))
    return va.release[:n] == vb.release[:n]


def _check_rocm(env: EnvSpec, compat: Compat, ctx: FindingSink) -> None:
    if env.rocm is None:
        return
    release = compat.rocm(env.rocm)
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
    if "wsl2" not in env.targets:
        return
    if release.install_model == "pip-sdk":
        _check_pip_sdk_wsl(env, release, compat, ctx)
        return
    if release.install_model != "amdgpu-install":
        near = ", ".join(compat.nearest_wsl_releases(release.version)[:3])
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version} installs through "
            f"{INSTALL_MODEL_LABELS[release.install_model]}, but envbuilder's wsl2 "
            "distro installs ROCm with amdgpu-install; for the wsl2 target use a "
            f"release it can install: {near}",
        )
        return
    if release.wsl_stack is None:
        near = ", ".join(compat.nearest_wsl_releases(release.version)[:3])
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version} ships no WSL runtime "
            "(no hsa-runtime-rocr4wsl-amdgpu package); for the wsl2 target use the "
            f"nearest releases that have one: {near}",
        )
    wsl2 = env.table(Wsl2Table)
    if wsl2 is None:
        return  # its table has errors, reported already
    _check_wsl_ubuntu(env, release, ctx)
    ubuntu = wsl2.ubuntu
    if ubuntu and not wsl2.base.startswith((f"ubuntu:{ubuntu}", f"rocm/dev-ubuntu-{ubuntu}:")):
        ctx.env_finding(
            env.name,
            ("wsl2", "base"),
            f"{wsl2.base} does not look like Ubuntu "
            f"{ubuntu}, which the WSL ROCm stack is installed for; leave base unset "
            f"(ubuntu:{ubuntu}) unless it is an Ubuntu {ubuntu} image",
            "warning",
        )


def _check_install_model(
    env: EnvSpec, release: RocmRelease, compat: Compat, ctx: FindingSink
) -> None:
    """pip-SDK releases (7.14+, 10.x) are locked by envbuilder (envbuilder.pipsdk): the env must
    name its GPUs and take torch from the release's index. The native amdrocm model is not
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
    rows = compat.index_rows(release.pip_index or "")
    targets = {g for r in rows for g in r.gfx}
    missing = [g for g in env.gfx_targets if targets and g not in targets]
    if missing:
        ctx.env_finding(
            env.name,
            ("gpu",),
            f"{', '.join(missing)}: no device-<gfx> extra on "
            f"ROCm {release.version}'s index ({release.pip_index}); it has "
            f"{', '.join(sorted(targets))}",
        )
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


def _check_pip_sdk_wsl(
    env: EnvSpec, release: RocmRelease, compat: Compat, ctx: FindingSink
) -> None:
    """WSL on the pip SDK: the wheels plus the prebuilt librocdxg the data pairs with the
    release, on an Ubuntu release librocdxg supports."""
    lib = compat.librocdxg_for(release)
    if release.wsl_stack != "rocdxg" or lib is None:
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version}: envbuilder's data pairs no "
            "prebuilt librocdxg (the WSL bridge to /dev/dxg) with this release; for "
            "the wsl2 target use ROCm 7.14.x",
        )
        return
    wsl2 = env.table(Wsl2Table)
    dxg = compat.dxg
    if wsl2 is not None and wsl2.ubuntu and dxg is not None and wsl2.ubuntu not in dxg.ubuntu:
        ctx.env_finding(
            env.name,
            ("wsl2", "ubuntu"),
            f"librocdxg supports Ubuntu {', '.join(dxg.ubuntu)}, not {wsl2.ubuntu}",
        )
    if not lib.sha256:
        ctx.env_finding(
            env.name,
            ("targets",),
            f"librocdxg {lib.version} ({lib.deb}) has no "
            "confirmed sha256 in envbuilder's data, so the wsl2 target stays not "
            "locked for it and its build stops there (envbuilder/data/wsl.toml)",
            "warning",
        )
    if lib.unverified:
        ctx.env_finding(
            env.name,
            ("targets",),
            f"the librocdxg {lib.version} facts are unverified ({lib.source})",
            "warning",
        )


def _check_wsl_ubuntu(env: EnvSpec, release: RocmRelease, ctx: FindingSink) -> None:
    """The WSL plan installs the release's amdgpu-install package for the Ubuntu release's
    codename: the renderer refuses an Ubuntu release it has no codename or package for."""
    wsl2 = env.table(Wsl2Table)
    ubuntu = wsl2.ubuntu if wsl2 else None
    if ubuntu is None:
        return  # missing: reported with the wsl2 table
    path = ("wsl2", "ubuntu")
    codename = UBUNTU_CODENAMES.get(ubuntu)
    if codename is None:
        ctx.env_finding(
            env.name,
            path,
            f"Ubuntu {ubuntu} is not a release AMD's WSL ROCm stack is "
            f"packaged for; use {' or '.join(sorted(UBUNTU_CODENAMES))}",
        )
    elif release.wsl_stack is None:
        return  # no stack at all: reported on rocm
    elif ubuntu not in release.ubuntu:
        ctx.env_finding(
            env.name,
            path,
            f"Ubuntu {ubuntu} is not supported by ROCm "
            f"{release.version} in WSL; use {' or '.join(release.ubuntu)}",
        )
    elif release.amdgpu_install_url(codename) is None:
        ctx.env_finding(
            env.name,
            path,
            f"envbuilder's data has no amdgpu-install package of ROCm "
            f"{release.version} for Ubuntu {ubuntu}; use another release",
        )


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
    release = compat.rocm(env.rocm) if env.rocm else None
    if "wsl2" in env.targets:
        _check_gpu_wsl(env, gpu, label, release, ctx)
    if "windows" in env.targets:
        _check_gpu_windows(env, gpu, label, compat.windows_set(env.rocm) if env.rocm else None, ctx)
    if gpu.unverified:
        ctx.env_finding(
            env.name,
            ("gpu",),
            f"the GPU table's facts for {label} are unverified "
            f"({gpu.source}); check them before relying on them",
            "warning",
        )
    _check_gpu_official(env, gpu, label, release, ctx)


def _check_gpu_wsl(
    env: EnvSpec, gpu: Gpu, label: str, release: RocmRelease | None, ctx: FindingSink
) -> None:
    if not gpu.wsl:
        ctx.env_finding(
            env.name,
            ("targets",),
            f"{label} is not supported by AMD's WSL stack "
            "(WSL supports RDNA3/RDNA4 GPUs such as RX 7900 XTX, RX 7800 XT, RX 9070 "
            "XT); remove 'wsl2' or use the docker target on a Linux host",
        )
    elif gpu.wsl_since and release and Version(release.version) < Version(gpu.wsl_since):
        ctx.env_finding(
            env.name,
            ("targets",),
            f"{label} is supported by AMD's WSL stack from "
            f"ROCm {gpu.wsl_since}, not in ROCm {release.version}; remove 'wsl2' or "
            "use the docker target on a Linux host",
        )


def _check_gpu_windows(
    env: EnvSpec, gpu: Gpu, label: str, wheels: WindowsWheels | None, ctx: FindingSink
) -> None:
    """The Windows wheel set of the env's release decides (7.14+: its own gfx list); without
    one, the GPU table's `windows` flag (AMD's gfx110X, gfx1151, gfx120X wheels up to 7.2.x)."""
    if wheels.covers(gpu) if wheels else gpu.windows:
        return
    which = (
        f"for ROCm {wheels.rocm} ({', '.join(wheels.gfx)})"
        if wheels and wheels.gfx
        else "(gfx110X, gfx1151, gfx120X)"
    )
    ctx.env_finding(
        env.name,
        ("targets",),
        f"{label} is not covered by AMD's native-Windows "
        f"PyTorch wheels {which}; remove 'windows' or use wsl2/docker",
    )


def _check_gpu_official(
    env: EnvSpec, gpu: Gpu, label: str, release: RocmRelease | None, ctx: FindingSink
) -> None:
    since = gpu.linux_official_since
    if (
        release is None
        or not gpu.linux_official_known
        or not {"docker", "native"} & set(env.targets)
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


def _torch_req(env: EnvSpec, target: str) -> Requirement | None:
    for spec in env.packages_for(target):
        req = Requirement(spec)
        if canonicalize_name(req.name) == "torch":
            return req
    return None


def _pkg_path(env: EnvSpec, target: str) -> tuple[str, ...]:
    return (target, "packages") if target in env.target_packages else ("packages",)


def _check_torch(
    env: EnvSpec,
    target: str,
    label: str,
    indexes: Mapping[str, Index],
    compat: Compat,
    ctx: FindingSink,
) -> None:
    req = _torch_req(env, target)
    if req is None or req.url is not None:
        return
    python = env.python_for(target)
    pin = env.index_pins_for(target).get("torch")
    path = _pkg_path(env, target)
    if pin is None:
        if env.accelerator == "rocm" and registry.get(target).os != "windows":
            ctx.env_finding(
                env.name,
                ("index_pins",),
                f"torch{label} has no index pin, so it "
                "would come from the default index (a CUDA build on Linux); pin it: "
                'index_pins = { torch = "<an index with url '
                'https://download.pytorch.org/whl/rocmX.Y>" }',
            )
        return
    index = indexes.get(pin)
    rows = compat.index_rows(index.url) if index else []
    if not rows:
        return  # not a PyTorch index envbuilder knows: nothing to check against
    name = rows[0].index
    serving = [r for r in rows if r.serves(req.specifier)]
    if not serving:
        ctx.env_finding(
            env.name,
            path,
            f"{req}{label}: no torch wheel matching "
            f"'{req.specifier}' on the {name} index (it serves "
            f"{_served(rows)}); {_suggest(req, compat)}",
        )
        return
    in_range = [r for r in serving if r.python.contains(python + ".0", prereleases=True)]
    if not in_range:
        ctx.env_finding(
            env.name,
            _python_path(env, target),
            f"Python {python}{label}: "
            f"{req} on the {name} index has wheels for Python {_pyrange(serving[0])} "
            f"only; use a Python in that range or another torch version",
        )
    _check_torch_index_kind(env, serving[0], ctx)
    if all(r.unverified for r in serving):
        ctx.env_finding(
            env.name,
            path,
            f"{req}{label}: the {name} index's torch "
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


def _python_path(env: EnvSpec, target: str) -> tuple[str, ...]:
    """Where the target's Python is set: its own table's `python` when that differs from the
    env's, else the env's."""
    return (target, "python") if env.python_for(target) != env.python else ("python",)


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
                _pkg_path(env, target),
                f"{req.name}: {filename!r} is not a valid wheel file name",
            )
            continue
        interpreters = {t.interpreter for t in tags}
        platforms = {t.platform for t in tags}
        if not ({f"cp{python}", "py3", f"py{python}"} & interpreters):
            ctx.env_finding(
                env.name,
                _pkg_path(env, target),
                f"{req.name}: the wheel {filename} is "
                f"for {', '.join(sorted(interpreters))}, but the {target} target uses "
                f"Python {env.python_for(target)}; use a matching wheel or Python",
            )
        want = "win" if registry.get(target).os == "windows" else "linux"
        if "any" not in platforms and not any(want in p for p in platforms):
            ctx.env_finding(
                env.name,
                _pkg_path(env, target),
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
        if gpu is not None and any(registry.get(t).os != "windows" for t in env.targets):
            _check_hsa_needed(env, compat, gpu, torch_rows, ctx)
        return
    value = env.env[HSA_VAR]
    path = ("env", HSA_VAR)
    if value.strip() == "":
        ctx.env_finding(
            env.name,
            path,
            "is empty; an empty HSA_OVERRIDE_GFX_VERSION breaks GPU "
            "detection: remove it (or set the version your GPU needs, e.g. 10.3.0)",
        )
        return
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", value):
        ctx.env_finding(
            env.name,
            path,
            f"{value!r} is not a gfx version like 10.3.0 or 11.0.0; remove it or fix the value",
        )
        return
    if gpu is not None:
        _check_hsa_value(env, gpu, value, torch_rows, ctx)
    release = compat.rocm(env.rocm) if env.rocm else None
    if release is not None and release.install_model == "pip-sdk":
        ctx.env_finding(
            env.name,
            path,
            f"ROCm {release.version} comes as TheRock multi-arch "
            "wheels, which ship the gfx targets natively, and an override is reported "
            "to break TheRock >= 7.13 runtimes (rocm-2026.md); remove "
            "HSA_OVERRIDE_GFX_VERSION",
            "warning",
        )
    if "windows" in env.targets:
        ctx.env_finding(
            env.name, path, "has no effect on Windows (the windows target ignores it)", "warning"
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


def _check_windows(
    env: EnvSpec, compat: Compat, indexes: Mapping[str, Index], ctx: FindingSink
) -> None:
    table = env.table(WindowsTable)
    if "windows" not in env.targets or table is None or env.accelerator != "rocm":
        return
    wheels = _windows_wheels_for(env, compat)
    _check_windows_python(env, table.python, compat, wheels, ctx)
    if env.rocm and compat.windows_set(env.rocm) is None:
        known = ", ".join(w.rocm for w in compat.windows_wheels)
        ctx.env_finding(
            env.name,
            ("rocm",),
            f"AMD publishes native-Windows PyTorch wheels for ROCm "
            f"{known}, not {env.rocm}; the windows target uses those wheels' own ROCm",
            "warning",
        )
    _check_windows_torch(env, compat, indexes, wheels, ctx)


def _windows_wheels_for(env: EnvSpec, compat: Compat) -> WindowsWheels | None:
    """The Windows wheel set the windows target uses: the one its torch URL points into, else
    the one of the env's ROCm release line."""
    req = _torch_req(env, "windows")
    if req is not None and req.url is not None:
        url = req.url
        hit = next(
            (w for w in compat.windows_wheels if not w.index and url.startswith(w.url)), None
        )
        if hit is not None:
            return hit
    return compat.windows_set(env.rocm) if env.rocm else None


def _py_versions(spec: SpecifierSet) -> list[str]:
    """The Python major.minor versions 3.8 - 3.15 a specifier admits ("3.11", "3.12")."""
    return [f"3.{m}" for m in range(8, 16) if spec.contains(f"3.{m}.0", prereleases=True)]


def _check_windows_python(
    env: EnvSpec, python: str, compat: Compat, wheels: WindowsWheels | None, ctx: FindingSink
) -> None:
    sets = [wheels] if wheels else [w for w in compat.windows_wheels if not w.index]
    if any(w.python.contains(python + ".0", prereleases=True) for w in sets):
        return
    ok = list(dict.fromkeys(v for w in sets for v in _py_versions(w.python)))
    which = f" for ROCm {wheels.rocm}" if wheels else ""
    table = f"[env.{env.name}.windows]"
    ctx.env_finding(
        env.name,
        _python_path(env, "windows"),
        f"Python {python}: "
        f"AMD's native-Windows PyTorch wheels{which} need Python {' or '.join(ok)}; "
        f'set {table} python = "{ok[-1] if ok else "3.12"}" or drop the windows '
        "target",
    )


def _check_windows_torch(
    env: EnvSpec,
    compat: Compat,
    indexes: Mapping[str, Index],
    wheels: WindowsWheels | None,
    ctx: FindingSink,
) -> None:
    table = f"[env.{env.name}.windows]"
    req = _torch_req(env, "windows")
    pin = env.index_pins_for("windows").get("torch")
    if req is None:
        example = wheels if wheels and not wheels.index else compat.windows_wheels[0]
        ctx.env_finding(
            env.name,
            _pkg_path(env, "windows"),
            "no torch for the windows target; "
            f"give it AMD's Windows wheel, e.g. {table} packages = "
            f'["torch @ {example.wheel_urls()[0]}"]',
            "warning",
        )
    elif (
        req.url is None and pin is not None and not _is_amd_windows_index(compat, indexes.get(pin))
    ):
        ctx.env_finding(
            env.name,
            ("windows", "index_pins"),
            "torch for windows is pinned to a "
            f"Linux wheel index; set {table} packages to AMD's Windows wheel and "
            "index_pins = {}",
        )
    elif req.url is not None and any(
        req.url.startswith(w.url) and w.unverified for w in compat.windows_wheels
    ):
        ctx.env_finding(
            env.name,
            _pkg_path(env, "windows"),
            "AMD's Windows wheel URLs are unverified here (see envbuilder/data/torch.toml)",
            "warning",
        )


def _is_amd_windows_index(compat: Compat, index: Index | None) -> bool:
    """Whether `index` is the multi-arch index AMD's 7.14+ Windows wheels come from."""
    return index is not None and any(
        w.index and index.url.rstrip("/") == w.url.rstrip("/") for w in compat.windows_wheels
    )

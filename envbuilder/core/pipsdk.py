"""What uv is asked to resolve for an env on a pip-SDK ROCm release (7.14 and later, ROCm Core
SDK 10): the env's torch with one `device-<gfx>` extra per GPU, AMD's `rocm` meta-package with the
same devices, and every known ROCm-family name listed AND pinned to the index torch is pinned to,
which uv also searches first for every other name (envbuilder.lock.sdk); and what a pip-SDK lock
must hold to be accepted (provenance_problems).

Why each part (docs/rocm.md, "Locking the pip SDK", shown against a replica of AMD's index):
  * the device extras come from the env's GPUs (`gpu`, one or several): a lock holds only their
    device code (about 1 GB each) instead of `device-all` (every target, many GB);
  * `rocm[libraries,devel,device-...]==<release>` pins the SDK to the env's release; `devel`
    because `rocm-sdk path --root` (the image's ROCM_PATH) needs it (TheRock therock-7.14);
  * `uv pip compile` applies an index pin to direct dependencies only, so each ROCm-family name
    the resolution needs (envbuilder/data/rocm.toml [pip_sdk]) is listed and pinned; PyPI holds
    placeholder packages (`rocm 0.1.0`, `rocm-sdk-*`) and a CUDA torch/triton under the same
    names, which an unpinned name could resolve to.

Other releases, and non-ROCm envs, are passed through unchanged.

The provenance check (provenance_problems) reads a post-processed pylock: every entry of the
ROCm family (rocm.toml [pip_sdk] family) must name one of the spec's indexes as its PEP 751
`index` (only packages pinned to a named index get one), and none may carry a placeholder
version (PyPI's placeholder projects under these names: [pip_sdk] placeholder_versions, any
.devN release, or for `rocm` / `rocm-sdk-*` a version other than the release's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.core.compat import RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import LockError
from envbuilder.core.model import EnvSpec


def sdk_release(env: EnvSpec) -> RocmRelease | None:
    """The env's ROCm release when envbuilder installs it through the pip SDK, else None."""
    release = env.release
    if release is None or release.install_model != "pip-sdk":
        return None
    return release


def device_extras(devices: tuple[str, ...]) -> list[str]:
    """`device-gfx1100`, ... : the extra of each gfx target (TheRock RELEASES.md)."""
    return [f"device-{gfx}" for gfx in devices]


def rocm_requirement(release: RocmRelease, devices: tuple[str, ...]) -> str:
    """`rocm[libraries,devel,device-gfx1100]==7.14.1`: the SDK of the release, with the devices
    (`devel`: `rocm-sdk path --root` needs it)."""
    return f"rocm[{','.join(['libraries', 'devel', *device_extras(devices)])}]=={release.version}"


def lock_inputs(env: EnvSpec, target: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(packages, index pins) uv resolves for `target`: the env's own, expanded for a pip-SDK
    release (see the module docstring). LockError when the env cannot be locked that way."""
    packages = env.packages_for(target)
    pins: Mapping[str, str] = env.index_pins_for(target)
    release = sdk_release(env)
    if release is None:
        return tuple(packages), dict(pins)
    where = f"env {env.name!r} (ROCm {release.version}, the pip SDK)"
    devices = env.gfx_targets
    if not devices:
        raise LockError(
            f"{where}: the lock holds the device code of the env's GPUs only; set "
            'gpu = "RX 7900 XTX" (or a gfx target, or a list of them)'
        )
    index = pins.get("torch")
    if index is None:
        raise LockError(
            f"{where}: torch has no index pin; pin it to the SDK's index "
            f'({release.pip_index}): index_pins = {{ torch = "<index name>" }}'
        )
    out, have = _with_device_torch(packages, devices, where)
    if "torch" not in have:
        raise LockError(f"{where}: packages has no torch; the pip SDK is locked with it")
    names = load_compat().pip_sdk.for_devices(devices)
    if "rocm" not in have:
        out.append(rocm_requirement(release, devices))
        have.add("rocm")
    out += [n for n in names if n not in have]
    # The env's own pins win (a name pinned elsewhere on purpose stays there).
    return tuple(out), {**dict.fromkeys(names, index), **pins}


def _with_device_torch(
    packages: Sequence[str], devices: tuple[str, ...], where: str
) -> tuple[list[str], set[str]]:
    """The env's packages with torch asking for the devices' extras, and their canonical names."""
    out: list[str] = []
    have: set[str] = set()
    for spec in packages:
        try:
            req = Requirement(spec)
        except InvalidRequirement as exc:  # the spec loader refuses these; never reached
            raise LockError(f"{where}: {spec!r} is not a requirement: {exc}") from None
        name = str(canonicalize_name(req.name))
        have.add(name)
        if name == "torch":
            req.extras |= set(device_extras(devices))
            spec = str(req)
        out.append(spec)
    return out, have


def sdk_index(env: EnvSpec, target: str) -> str | None:
    """The index uv searches first for a pip-SDK env's `target`: the one torch is pinned to
    (lock_inputs insists on the pin). None for other envs."""
    if sdk_release(env) is None:
        return None
    return env.index_pins_for(target).get("torch")


def _artifact_urls(package: Mapping[str, Any]) -> list[str]:
    arts = [package[k] for k in ("sdist", "archive") if k in package]
    arts += list(package.get("wheels", []))
    return [str(a.get("url") or a.get("path") or "") for a in arts]


def _placeholder(name: str, version: str, release: RocmRelease) -> bool:
    """Whether `version` of ROCm-family `name` is one of PyPI's placeholders (see the module
    docstring)."""
    if version in load_compat().pip_sdk.placeholder_versions:
        return True
    try:
        parsed = Version(version)
    except InvalidVersion:
        return True
    if parsed.is_devrelease:
        return True
    if name == "rocm" or name.startswith("rocm-sdk-"):
        return parsed.base_version != Version(release.version).base_version
    return False


def provenance_problems(
    doc: Mapping[str, Any], release: RocmRelease, index_urls: Sequence[str]
) -> list[str]:
    """One line per ROCm-family entry of pylock `doc` that does not come from one of the spec's
    indexes (`index_urls`, canonical) or has a placeholder version; empty when all is well."""
    sdk = load_compat().pip_sdk
    problems: list[str] = []
    for pkg in doc.get("packages", []):
        name = str(canonicalize_name(str(pkg.get("name", ""))))
        if not sdk.in_family(name):
            continue
        version = str(pkg.get("version", ""))
        origin = ", ".join(_artifact_urls(pkg)) or "no artifact"
        index = pkg.get("index")
        if index not in index_urls:
            where = f"index {index}" if index else "the default index"
            expected = " or ".join(index_urls)
            problems.append(f"{name} {version} comes from {where} ({origin}), not {expected}")
        elif _placeholder(name, version, release):
            problems.append(f"{name} {version} ({origin}) is a placeholder version")
    return problems

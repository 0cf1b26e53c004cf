"""What AMD's own packaging makes of the ROCm pip SDK, as core metadata to diff against the
replica's stand-ins (tests/lock/test_replica_amdcode.py).

  * `therock_metadata(release)`: the dependency metadata of the `rocm` sdist and the SDK wheels
    that ROCm/TheRock's build tools write at the commit of each release, recorded with their
    sources in tests/data/replica/therock-metadata.toml (TheRock's code, vendored in
    tests/data/therock/, remakes that record in tests/lock/test_therockmeta.py);
  * `kpack_host_requirements(...)` / `kpack_device_requirements(...)`: the requirements
    rocm_kpack's wheel splitter writes into the split torch wheels (ROCm/rocm-systems
    shared/kpack/python/rocm_kpack/wheel_splitter.py, `_rewrite_host_metadata` and
    `generate_device_metadata`), computed with AMD's rocm-bootstrap (the genuine package, 0.3.0
    from PyPI, a test dependency) whose packaging chains name the family wheels: the splitter's
    rules are restated here and checked against the lines its own tests expect.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

#: TheRock's metadata of each release the replica models, with its sources.
THEROCK = Path(__file__).resolve().parent.parent / "data" / "replica" / "therock-metadata.toml"


def metadata_fields(text: str) -> dict[str, list[str]]:
    """Header name -> every value, of a core-metadata document."""
    message = HeaderParser().parsestr(text)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(str(value))
    return fields


def therock_metadata(release: str) -> dict[str, str]:
    """file name -> core metadata (Name, Version, Provides-Extra, Requires-Dist) of each package
    TheRock's code builds for `release` (the `rocm` sdist: what building it gives with no GPU
    target asked for, as uv builds it to lock it)."""
    with THEROCK.open("rb") as f:
        recorded: dict[str, dict[str, Any]] = tomllib.load(f)[release]
    out: dict[str, str] = {}
    for filename, fields in recorded.items():
        lines = [f"Name: {fields['name']}", f"Version: {fields['version']}"]
        lines += [f"Provides-Extra: {e}" for e in fields["provides_extra"]]
        lines += [f"Requires-Dist: {r}" for r in fields["requires_dist"]]
        out[filename] = "\n".join(["Metadata-Version: 2.1", *lines]) + "\n"
    return out


def rocm_bootstrap() -> Any:
    """AMD's rocm-bootstrap (installed from PyPI with the test extra)."""
    import rocm_bootstrap as module

    return module


def kpack_host_requirements(
    prefix: str, version: str, bundle_keys: Iterable[str]
) -> tuple[list[str], list[str]]:
    """(Provides-Extra values, Requires-Dist lines) the splitter adds to the host wheel for a
    split that found `bundle_keys` (wheel_splitter._rewrite_host_metadata): rocm-bootstrap, per
    target a `device-<t>` extra requiring the wheel of every found bundle of the target's
    packaging chain, and `device-all` with every device wheel, sorted by name."""
    rb: Any = rocm_bootstrap()
    keys = set(bundle_keys)
    extras: list[str] = []
    requires = ["rocm-bootstrap"]
    every: set[str] = set()
    for key in sorted(keys):
        if rb.lookup_bundle(key).level != rb.PackagingLevel.TARGET:
            continue
        extras.append(f"device-{key}")
        for bundle in rb.packaging_chain(key):
            if bundle.key in keys:
                name = rb.device_dist_name(prefix, bundle)
                every.add(name)
                requires.append(f'{name} == {version}; extra == "device-{key}"')
    every |= {rb.device_dist_name(prefix, rb.lookup_bundle(k)) for k in keys}
    extras.append("device-all")
    requires += [f'{n} == {version}; extra == "device-all"' for n in sorted(every)]
    return extras, requires


def kpack_device_requirements(
    host: str,
    version: str,
    prefix: str,
    key: str,
    device_requires_dist: Sequence[str],
    bundle_keys: Iterable[str],
) -> tuple[str, list[str]]:
    """(name, Requires-Dist lines) of the device wheel of bundle `key`
    (wheel_splitter.generate_device_metadata): the host at its version, the workflow's
    --device-requires-dist for a target-level bundle only (@GFXARCH@ replaced), and for a target
    the wheel of every found bundle above it in its chain."""
    rb: Any = rocm_bootstrap()
    bundle = rb.lookup_bundle(key)
    target = bundle.level == rb.PackagingLevel.TARGET
    requires = [f"{host} == {version}"]
    requires += [d.replace("@GFXARCH@", key) for d in device_requires_dist if target]
    if target:
        for parent in rb.packaging_chain(key)[1:]:
            if parent.key in set(bundle_keys):
                requires.append(f"{rb.device_dist_name(prefix, parent)} == {version}")
    return rb.device_dist_name(prefix, bundle), requires

"""The two ways to lock the ROCm 7.14 pip SDK that give a device-narrowed, placeholder-free lock
(docs/rocm.md, "Locking the pip SDK: what the resolver does", explains why each part is there).

A. torch from AMD's index: `torch[device-<t>,...]` needs no device narrowing (AMD's torch
   requires `rocm[libraries]` only). Every ROCm-family name the resolution needs is pinned to
   AMD's index AND listed as a dependency: `uv pip compile` applies [tool.uv.sources] to direct
   dependencies only, so a pin of a name that only a dependency requires is ignored.
B. torch from PyTorch's rocm7.14 index: its `rocm[device-all,libraries]==7.14.*` is
   narrowed by an `--override` line; an override loses any [tool.uv.sources] pin of `rocm`, so
   AMD's index is instead *searched* (first-index strategy, ahead of the default index) with
   `ignore-error-codes = [403]`, which only a uv configuration file can set.
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.requirements import Requirement

from replica.uvcompile import CompileRequest, SearchedIndex

ROCM_SDK = "7.14.0"


def amd_names(
    devices: Sequence[str], families: bool = True, platform: str = "x86_64-manylinux_2_28"
) -> list[str]:
    """The ROCm-family names a recipe-A resolution needs, each pinned to AMD's index: with
    `families`, also the family wheel AMD's 7.14 torch requires under a gfx11 target's extra
    (amd-torch-device-gfx11: the family of a target is its major ISA version, rocm-bootstrap's
    targets.py; packages.toml [bundles]). `triton` on Linux only: TheRock builds it there only."""
    names = ["torch", "rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-bootstrap"]
    if "windows" not in platform:
        names.insert(4, "triton")
    for device in devices:
        names += [f"rocm-sdk-device-{device}", f"amd-torch-device-{device}"]
    if families and any(d.startswith("gfx11") for d in devices):
        names.append("amd-torch-device-gfx11")
    return names


def amd_recipe(
    devices: Sequence[str],
    platform: str,
    amd_url: str,
    torch: str = "torch",
    python: str = "3.12",
    families: bool = True,
) -> CompileRequest:
    """Recipe A. `torch` is the torch requirement without the device extras
    (`torch==2.12.0+rocm7.14.0`); they are added, one per device."""
    with_devices = Requirement(torch)
    with_devices.extras |= {f"device-{d}" for d in devices}
    names = amd_names(devices, families, platform)
    packages = [str(with_devices), f"rocm[libraries]=={ROCM_SDK}", *names[2:]]
    return CompileRequest(
        packages=tuple(packages),
        platform=platform,
        python=python,
        pins=dict.fromkeys(names, "amd"),
        explicit={"amd": amd_url},
    )


def narrowed_rocm(devices: Sequence[str], specifier: str = "==7.14.*") -> str:
    """torch 2.14.1+rocm7.14's `rocm[device-all,libraries]==7.14.*` with `device-all` replaced
    by the env's devices."""
    extras = ",".join(["libraries", *(f"device-{d}" for d in devices)])
    return f"rocm[{extras}]{specifier}"


def pytorch_recipe(
    devices: Sequence[str],
    platform: str,
    pytorch_url: str,
    amd_url: str,
    torch: str = "torch==2.14.1+rocm7.14",
    python: str = "3.12",
) -> CompileRequest:
    """Recipe B."""
    return CompileRequest(
        packages=(torch, "triton-rocm"),
        platform=platform,
        python=python,
        pins={"torch": "pytorch-rocm714", "triton-rocm": "pytorch-rocm714"},
        explicit={"pytorch-rocm714": pytorch_url},
        overrides=(narrowed_rocm(devices),),
        searched=(SearchedIndex("amd", amd_url, (403,)),),
    )

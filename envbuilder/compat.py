"""Compatibility data: GPUs, ROCm releases, the torch/ROCm/Python matrix, Docker device flags.

The facts live in TOML files under `envbuilder/data/` (each entry with its `source`); this module
only loads them into typed, frozen records and answers look-ups. No fact is hard-coded in Python.
See shared docs `rocm-reference.md` for where each fact comes from.

CONTRACT (other modules code against these names; keep them stable):

    load_compat() -> Compat                      cached; raises CompatDataError on malformed data
    Compat.gpu(name_or_gfx) -> Gpu | None        "RX 7900 XTX", "rx7900xtx", "gfx1100" all work
    Compat.rocm(version) -> RocmRelease | None   "6.4.1"; "6.4" means the newest 6.4.x known
    Compat.nearest_wsl_releases(version) -> list[str]   releases with a WSL runtime, nearest first
    Compat.torch_indexes(torch_version) -> list[TorchIndexEntry]   entries whose `torch` matches
    Compat.device_flags(host_kind) -> DeviceFlags      host_kind in HOST_KINDS
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from packaging.specifiers import SpecifierSet

WslStack = Literal["legacy", "rocdxg"]
LibhsaFix = Literal["copy", "delete"]
HostKind = Literal["native-rocm", "wsl2-legacy", "wsl2-rocdxg", "nvidia", "cpu"]
HOST_KINDS: tuple[HostKind, ...] = ("native-rocm", "wsl2-legacy", "wsl2-rocdxg", "nvidia", "cpu")


@dataclass(frozen=True)
class Gpu:
    """One GPU family member. `names` are marketing names; `gfx` the LLVM target."""

    names: tuple[str, ...]
    gfx: str
    wsl: bool  # supported by AMD's WSL stack
    windows: bool  # supported by AMD's native Windows PyTorch wheels
    linux_official_since: str | None  # first ROCm release with official Linux support, if any
    hsa_override: str | None  # HSA_OVERRIDE_GFX_VERSION it needs when the wheel lacks its gfx
    source: str


@dataclass(frozen=True)
class RocmRelease:
    """One ROCm release and how it is installed inside WSL."""

    version: str  # "6.4.1"
    wsl_stack: WslStack | None  # None: this release ships no WSL runtime
    ubuntu: tuple[str, ...]  # Ubuntu releases supported inside WSL, e.g. ("22.04", "24.04")
    amdgpu_install: str | None  # package version "6.4.60401-1", for amdgpu-install_<...>_all.deb
    amdgpu_install_path: str | None  # AMD repo path of that .deb, per Ubuntu codename via {codename}
    libhsa_fix: LibhsaFix | None  # what to do to torch's bundled libhsa-runtime64 in WSL
    docker_images: Mapping[str, str]  # e.g. {"22.04": "rocm/dev-ubuntu-22.04:6.4.1"}
    source: str


@dataclass(frozen=True)
class TorchIndexEntry:
    """A row of the torch <-> ROCm index <-> Python matrix."""

    torch: SpecifierSet  # torch versions served, e.g. ">=2.8,<2.10"
    index: str  # "rocm6.4", "cpu", "cu128"
    url: str  # the PyTorch wheel index URL
    python: SpecifierSet  # Python versions with wheels
    source: str


@dataclass(frozen=True)
class DeviceFlags:
    """How `docker run` exposes the GPU for one kind of host (docker SDK terms)."""

    host_kind: HostKind
    devices: tuple[str, ...] = ()  # "/dev/kfd", "/dev/dri", "/dev/dxg"
    volumes: tuple[tuple[str, str], ...] = ()  # (host path, container path), read-only
    environment: Mapping[str, str] = field(default_factory=dict)
    group_add: tuple[str, ...] = ()  # group names resolved to host gids at run time
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ipc_mode: str | None = None
    shm_size: str | None = None
    gpu_request: bool = False  # NVIDIA: DeviceRequest(capabilities=[["gpu"]])
    source: str = ""

"""environments.toml -> typed, merged, checked `Spec`.

The file is read with tomlkit (later commands that edit it keep its comments and order).
`[defaults]` is merged into each `[env.NAME]` (tables merge key by key, an env's value wins).

CONTRACT (other modules code against these names; keep them stable):

    load_spec(path) -> Spec          raises SpecError (all error findings in its message) when
                                     the spec has errors; warnings are kept on `Spec.findings`
    check_spec(path) -> CheckResult  never raises for a user's mistake; `.spec` is None on errors
    Spec.env(name) -> EnvSpec        raises UsageError naming the known envs
    Spec.select(names) -> list[EnvSpec]   [] or None means all, in file order
    Spec.env_hash(name) -> str       sha256 of the env's merged, canonical content plus the
                                     indexes it uses (what the lock records as the spec hash)
    Finding(severity, file, key, message)   str(f) == "FILE: KEY: MESSAGE" style, one line
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Accelerator = Literal["rocm", "cuda", "cpu"]
TargetName = Literal["docker", "wsl2", "windows", "native"]
TARGETS: tuple[TargetName, ...] = ("docker", "wsl2", "windows", "native")
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem in the spec: where (file, dotted key), what is wrong and what would be right."""

    severity: Severity
    file: str
    key: str  # dotted path, e.g. "env.rocm64.gpu" or "defaults.python"
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class Index:
    """A named package index. `url` is canonical (what locks record); `mirror` is where to
    resolve and fetch from instead (a folder or URL), accepted only by hash."""

    name: str
    url: str
    mirror: str | None = None


@dataclass(frozen=True)
class DockerTarget:
    base: str  # image reference as written (a tag); the lock pins its digest
    user: str = "envbuilder"  # created with uid 1000 in the image
    python: str = "python3"  # interpreter in the base image that creates the venv


@dataclass(frozen=True)
class Wsl2Target:
    distro: str  # the WSL distro name (wsl --install --name)
    base: str  # rootfs base image as written (a tag; the lock pins its digest),
    #            derived from `ubuntu` when not given ("ubuntu:24.04")
    ubuntu: str | None = None  # "22.04" or "24.04"; required for ROCm envs (the WSL stack)
    user: str = "envbuilder"  # default user, uid 1000
    systemd: bool = True


@dataclass(frozen=True)
class WindowsTarget:
    python: str  # "3.12"; found with the py launcher
    hip_path: str | None = None  # defaults to C:\Program Files\AMD\ROCm\<major.minor>\


@dataclass(frozen=True)
class NativeTarget:
    python: str  # found with uv's interpreter discovery


@dataclass(frozen=True)
class EnvSpec:
    """One environment after `[defaults]` were merged in and every value was checked."""

    name: str
    description: str
    accelerator: Accelerator
    python: str  # "3.12" (major.minor)
    packages: tuple[str, ...]  # PEP 508 requirement strings, as written
    index_pins: Mapping[str, str]  # canonical package name -> index name; others: default index
    targets: tuple[TargetName, ...]
    rocm: str | None = None  # "6.4.1"; None unless accelerator == "rocm"
    cuda: str | None = None  # e.g. "12.8"; None unless accelerator == "cuda"
    gpu: str | None = None  # as written (marketing name or gfx target)
    gfx: str | None = None  # resolved gfx target, e.g. "gfx1100"
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment variables
    rccl: Mapping[str, str] = field(default_factory=dict)  # NCCL_*/RCCL_* settings
    apt: tuple[str, ...] = ()  # extra apt packages (docker, wsl2)
    docker: DockerTarget | None = None
    wsl2: Wsl2Target | None = None
    windows: WindowsTarget | None = None
    native: NativeTarget | None = None
    # Per-target overrides: target -> packages / index pins replacing the env-wide ones
    # (e.g. the windows target takes torch from AMD's Windows wheels).
    target_packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    target_index_pins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def packages_for(self, target: TargetName) -> tuple[str, ...]:
        return self.target_packages.get(target, self.packages)

    def index_pins_for(self, target: TargetName) -> Mapping[str, str]:
        return {**self.index_pins, **self.target_index_pins.get(target, {})}

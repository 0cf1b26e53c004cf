"""Compatibility data: GPUs, ROCm releases, the torch/ROCm/Python matrix, Docker device flags.

The facts live in TOML files under `envbuilder/data/` (each entry with its `source`); this module
holds the typed, frozen records and answers look-ups; envbuilder.core.compatload loads the files
into them. No fact is hard-coded in Python. Where each fact comes from is in its row's `source`
(public pages and repositories).

CONTRACT (other modules code against these names; keep them stable):

    compatload.load_compat() -> Compat           cached; raises CompatDataError on malformed data
    Compat.gpu(name_or_gfx) -> Gpu | None        "RX 7900 XTX", "rx7900xtx", "gfx1100" all work
    Compat.rocm(version) -> RocmRelease | None   "6.4.1"; "6.4" means the newest 6.4.x known
    RocmRelease.install_model                    "amdgpu-install" | "amdrocm" | "pip-sdk"
    Compat.nearest_wsl_releases(version) -> list[str]   releases envbuilder can install in WSL
    Compat.torch_indexes(torch_version) -> list[TorchIndexEntry]   entries whose `torch` matches
    Compat.index_rows(url) -> list[TorchIndexEntry]   rows of a wheel index (each with its `gfx`)
    Compat.windows_set(rocm) -> WindowsWheels | None  AMD's native-Windows wheel set for a release
    Compat.device_flags(host_kind) -> DeviceFlags      host_kind in HOST_KINDS
    Compat.wsl_units -> WslUnits                 systemd units a WSL distro masks (wsl.toml)
    Compat.dxg / Compat.librocdxg                librocdxg facts (wsl.toml)
    Compat.librocdxg_for(release) -> Librocdxg | None  the prebuilt librocdxg a release pairs with
    Compat.pip_sdk -> PipSdkNames                 names a pip-SDK lock pins (rocm.toml [pip_sdk])
    RocmRelease.hip                              its HIP major.minor (rocm.toml [[hip]]) or None
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder.core.errors import CompatDataError

WslStack = Literal["legacy", "rocdxg"]
LibhsaFix = Literal["copy", "delete"]
HostKind = Literal["native-rocm", "wsl2-legacy", "wsl2-rocdxg", "nvidia", "cpu"]
HOST_KINDS: tuple[HostKind, ...] = ("native-rocm", "wsl2-legacy", "wsl2-rocdxg", "nvidia", "cpu")
InstallModel = Literal["amdgpu-install", "amdrocm", "pip-sdk"]
INSTALL_MODELS: tuple[InstallModel, ...] = ("amdgpu-install", "amdrocm", "pip-sdk")
#: How each install model is named in messages and docs.
INSTALL_MODEL_LABELS: Mapping[InstallModel, str] = {
    "amdgpu-install": "amdgpu-install (the amdgpu-install .deb, then apt)",
    "amdrocm": "the native amdrocm packages (repo.amd.com/rocm/packages-multi-arch)",
    "pip-sdk": "the pip SDK (ROCm itself as rocm / rocm-sdk-* wheels)",
}
#: A value in the GPU table meaning "not established here" (check then says nothing).
UNKNOWN = "unknown"
GFX = re.compile(r"gfx[0-9a-f]+")


@dataclass(frozen=True)
class Gpu:
    """One GPU family member. `names` are marketing names; `gfx` the LLVM target."""

    names: tuple[str, ...]
    gfx: str
    wsl: bool  # supported by AMD's WSL stack
    windows: bool  # covered by AMD's native Windows PyTorch wheels up to 7.2.x
    linux_official_since: str | None  # first ROCm release with official Linux support, if any
    hsa_override: str | None  # HSA_OVERRIDE_GFX_VERSION it runs as when the wheel lacks its gfx
    source: str
    unverified: bool = False  # the row's facts are a lead, not a checked fact
    wsl_since: str | None = None  # first ROCm release whose WSL stack supports it (None: all)
    linux_official_known: bool = True  # False: linux_official_since is not established
    hsa_override_known: bool = True  # False: hsa_override is not established


@dataclass(frozen=True)
class RocmRelease:
    """One ROCm release: how it installs, and how it is installed inside WSL."""

    version: str  # "6.4.1"
    wsl_stack: WslStack | None  # None: this release ships no WSL runtime
    ubuntu: tuple[str, ...]  # Ubuntu releases supported inside WSL, e.g. ("22.04", "24.04")
    amdgpu_install: str | None  # package version "6.4.60401-1", for amdgpu-install_<...>_all.deb
    amdgpu_install_path: str | None  # URL of that .deb, with {codename} for the Ubuntu codename
    libhsa_fix: LibhsaFix | None  # what to do to torch's bundled libhsa-runtime64 in WSL
    docker_images: Mapping[str, str]  # e.g. {"22.04": "rocm/dev-ubuntu-22.04:6.4.1"}
    source: str
    unverified: bool = False  # derived from a pattern, not a checked fact
    install: tuple[InstallModel, ...] = ("amdgpu-install",)  # the first is envbuilder's
    pip_index: str | None = None  # the pip SDK's wheel index, if the release has one
    #: HIP major.minor it ships ("7.14"; torch.version.hip starts with it), rocm.toml [[hip]];
    #: None where the data holds none (the probe then says the HIP version was not checked)
    hip: str | None = None
    hip_source: str = ""
    # What AMD's install page of the release says beyond the wheels (rocm.toml header):
    host_driver: str | None = None  # the GPU driver the host needs, in words
    installers: Mapping[str, str] = field(default_factory=dict)  # "runfile"/"tarball" -> URL
    pip_python: Mapping[str, str] = field(default_factory=dict)  # distro -> AMD's example Python

    @property
    def install_model(self) -> InstallModel:
        """How envbuilder installs this release: the first of its install models."""
        return self.install[0]

    def amdgpu_install_url(self, codename: str) -> str | None:
        """The amdgpu-install .deb URL for an Ubuntu codename ("jammy", "noble")."""
        if self.amdgpu_install_path is None:
            return None
        return self.amdgpu_install_path.replace("{codename}", codename)


@dataclass(frozen=True)
class GfxSet:
    """The gfx targets compiled into a set of torch wheels (torch.toml [gfx_set.NAME])."""

    name: str
    targets: tuple[str, ...]
    source: str
    unverified: bool = False


@dataclass(frozen=True)
class TorchIndexEntry:
    """A row of the torch <-> wheel index <-> Python matrix."""

    torch: SpecifierSet  # torch versions served, e.g. ">=2.8,<2.10"
    index: str  # "rocm6.4", "cpu", "amd-whl-multi-arch"
    url: str  # the wheel index URL
    python: SpecifierSet  # Python versions with wheels
    source: str
    versions: tuple[str, ...] = ()  # torch releases known to be on the index ("2.9.1")
    local: str | None = None  # local version label of its wheels ("rocm6.4", "cpu")
    gfx: tuple[str, ...] = ()  # gfx targets the wheels are compiled for (empty: not ROCm)
    rocm: str | None = None  # the ROCm release line the wheels bundle ("6.4", "7.14.1")
    unverified: bool = False  # the row is a lead, not a checked fact
    gfx_set: GfxSet | None = None  # where `gfx` comes from (its source, unverified)

    def candidates(self) -> list[Version]:
        """The known releases as the index spells them (with the local label)."""
        suffix = f"+{self.local}" if self.local else ""
        return [Version(v + suffix) for v in self.versions]

    def serves(self, specifier: SpecifierSet) -> bool:
        """True when some known release on this index satisfies `specifier`."""
        return any(specifier.contains(v, prereleases=True) for v in self.candidates())


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


@dataclass(frozen=True)
class WindowsWheels:
    """AMD's native-Windows PyTorch wheels for one ROCm release: direct wheel URLs under `url`
    (after the ROCm SDK wheels `sdk`), or, from 7.14, the multi-arch index at `url`."""

    rocm: str
    url: str  # folder URL the file names are relative to, or the index URL
    python: SpecifierSet
    wheels: tuple[str, ...]
    source: str
    unverified: bool = False
    sdk: tuple[str, ...] = ()  # ROCm SDK wheels/sdist installed before torch
    index: bool = False  # True: `url` is a wheel index (torch[device-gfxNNNN])
    gfx: tuple[str, ...] = ()  # targets covered; empty: the GPU table's `windows` flag decides
    driver: str | None = None  # the Windows driver it needs ("Adrenalin 26.2.2")

    def wheel_urls(self) -> list[str]:
        return [self.url + w for w in self.wheels]

    def sdk_urls(self) -> list[str]:
        return [self.url + w for w in self.sdk]

    def covers(self, gpu: Gpu) -> bool:
        """Whether the set has kernels for `gpu`."""
        return gpu.gfx in self.gfx if self.gfx else gpu.windows


@dataclass(frozen=True)
class BaseImage:
    """The `python3` of base images whose reference matches `match` (shell-style pattern)."""

    match: str
    python: str
    source: str


@dataclass(frozen=True)
class RcclKnobs:
    """The NCCL_*/RCCL_* names RCCL reads, names it does not read -> the real name, and the
    NCCL_* names PyTorch (not RCCL) reads -> PyTorch's current TORCH_NCCL_* name."""

    nccl: tuple[str, ...]
    rccl: tuple[str, ...]
    misspelled: Mapping[str, str]
    source: str
    also_read: tuple[str, ...] = ()  # read outside NCCL_PARAM/RCCL_PARAM, or documented only
    pytorch: Mapping[str, str] = field(default_factory=dict)

    @property
    def known(self) -> tuple[str, ...]:
        return self.nccl + self.rccl + self.also_read


def norm_name(name: str) -> str:
    """Normalize a GPU name for look-up: "AMD Radeon RX 7900 XTX" -> "7900xtx" (so "RX 7900
    XTX", "rx7900xtx", "7900 XTX" and "Radeon PRO W7900" / "W7900" all match)."""
    out = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("amd", "radeon", "instinct", "pro", "rx"):
        out = out.removeprefix(prefix)
    return out


@dataclass(frozen=True)
class WslUnits:
    """systemd units of a WSL distro (wsl.toml). `discouraged` are the ones Microsoft's distro
    validator warns about when enabled; `masked` are those plus `also_masked`, sorted: what the
    rendered WSL Dockerfile masks."""

    discouraged: tuple[str, ...]
    also_masked: tuple[str, ...]
    source: str

    @property
    def masked(self) -> tuple[str, ...]:
        return tuple(sorted({*self.discouraged, *self.also_masked}))


@dataclass(frozen=True)
class DxgFacts:
    """The rocdxg WSL stack (wsl.toml [dxg]): when HSA_ENABLE_DXG_DETECTION=1 is needed, where
    librocdxg's dids.conf lives and where containers mount it, the Ubuntu releases it supports."""

    detection_default_from: str  # from this ROCm release DXG detection is on by default
    dids_conf_host: str
    dids_conf_container: str
    ubuntu: tuple[str, ...]
    source: str

    def needs_detection_env(self, rocm: str) -> bool:
        """Whether ROCm `rocm` needs HSA_ENABLE_DXG_DETECTION=1 on the rocdxg stack."""
        return Version(rocm) < Version(self.detection_default_from)


@dataclass(frozen=True)
class Librocdxg:
    """One prebuilt librocdxg release (wsl.toml [[librocdxg]])."""

    version: str
    deb: str  # "rocdxg-roct_1.2.2_amd64.deb"
    url: str
    sha256: str | None
    dids_conf: bool  # ships share/rocdxg/dids.conf
    rocm: str | None  # the ROCm release line it pairs with, if established
    source: str
    unverified: bool = False


@dataclass(frozen=True)
class PipSdkNames:
    """What a pip-SDK lock lists and pins to the SDK's index (rocm.toml [pip_sdk]): `names`
    once, `device_names` once per GPU (`{gfx}` replaced by its target); which names are of the
    ROCm family (`family`, fnmatch patterns: they must come from the SDK's index) and which
    versions are PyPI's placeholders."""

    names: tuple[str, ...]
    device_names: tuple[str, ...]
    source: str
    family: tuple[str, ...] = ()
    placeholder_versions: tuple[str, ...] = ()

    def in_family(self, name: str) -> bool:
        """Whether `name` (normalized) is of the ROCm family."""
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.family)

    def for_devices(self, devices: tuple[str, ...]) -> tuple[str, ...]:
        """Every name for these gfx targets, in a fixed order."""
        return (*self.names, *(n.replace("{gfx}", d) for d in devices for n in self.device_names))


@dataclass(frozen=True)
class Compat:
    """All compatibility data, loaded once (`load_compat()`)."""

    gpus: tuple[Gpu, ...]
    releases: tuple[RocmRelease, ...]
    torch_matrix: tuple[TorchIndexEntry, ...]
    windows_wheels: tuple[WindowsWheels, ...]
    flags: Mapping[str, DeviceFlags]
    rccl: RcclKnobs
    gfx_sets: Mapping[str, GfxSet] = field(default_factory=dict)
    base_images: tuple[BaseImage, ...] = ()
    wsl_units: WslUnits = WslUnits((), (), "")
    dxg: DxgFacts | None = None
    librocdxg: tuple[Librocdxg, ...] = ()
    pip_sdk: PipSdkNames = PipSdkNames((), (), "")

    def librocdxg_for(self, release: RocmRelease) -> Librocdxg | None:
        """The prebuilt librocdxg the data pairs with `release` (its major.minor line), the
        newest when several do; None when none is paired."""
        line = ".".join(release.version.split(".")[:2])
        paired = [lib for lib in self.librocdxg if lib.rocm == line]
        return max(paired, key=lambda lib: Version(lib.version)) if paired else None

    def gpu(self, name_or_gfx: str) -> Gpu | None:
        """The GPU by marketing name (any spelling/case) or by gfx target (first row of it)."""
        key = norm_name(name_or_gfx)
        if GFX.fullmatch(key):
            return next((g for g in self.gpus if g.gfx == key), None)
        for g in self.gpus:
            if any(norm_name(n) == key for n in g.names):
                return g
        return None

    def gpu_names(self) -> list[str]:
        return [n for g in self.gpus for n in g.names]

    def rocm(self, version: str) -> RocmRelease | None:
        """The release "6.4.1"; "6.4" means the newest 6.4.x known; "7.0" also finds "7.0.0"."""
        try:
            want = Version(version)
        except InvalidVersion:
            return None
        exact = [r for r in self.releases if Version(r.version) == want]
        if exact:
            return exact[0]
        if len(want.release) == 2:
            same = [r for r in self.releases if Version(r.version).release[:2] == want.release]
            if same:
                return max(same, key=lambda r: Version(r.version))
        return None

    def nearest_wsl_releases(self, version: str) -> list[str]:
        """Releases envbuilder's wsl2 target can install (a WSL runtime through amdgpu-install),
        nearest to `version` first (ties: the newer first)."""
        try:
            want = _as_float_key(Version(version))
        except InvalidVersion:
            want = 0.0
        ok = [
            r
            for r in self.releases
            if r.wsl_stack is not None and r.install_model == "amdgpu-install"
        ]
        ok.sort(
            key=lambda r: (
                abs(_as_float_key(Version(r.version)) - want),
                -_as_float_key(Version(r.version)),
            )
        )
        return [r.version for r in ok]

    def torch_indexes(self, torch_version: str) -> list[TorchIndexEntry]:
        """Matrix rows whose torch range contains `torch_version` (local label ignored)."""
        try:
            v = Version(torch_version)
        except InvalidVersion:
            return []
        public = Version(v.public)
        return [e for e in self.torch_matrix if e.torch.contains(public, prereleases=True)]

    def index_rows(self, url: str) -> list[TorchIndexEntry]:
        """Matrix rows for an index URL (trailing slash ignored). A URL that is not PyTorch's
        but ends in a PyTorch index name (a mirror: https://mirror.example/whl/rocm6.4) gets
        that index's rows."""
        want = url.rstrip("/")
        exact = [e for e in self.torch_matrix if e.url.rstrip("/") == want]
        if exact:
            return exact
        last = want.rsplit("/", 1)[-1]
        return [e for e in self.torch_matrix if e.index == last]

    def wheel_gfx(self, index: str, torch_version: str) -> tuple[str, ...]:
        """gfx targets of the torch `torch_version` wheels on `index` (empty: not known)."""
        for row in self.torch_indexes(torch_version):
            if row.index == index:
                return row.gfx
        return ()

    def indexes_with_gfx(self, gfx: str) -> list[str]:
        """Names of the indexes whose wheels (some torch version) are compiled for `gfx`."""
        return list(dict.fromkeys(e.index for e in self.torch_matrix if gfx in e.gfx))

    def windows_set(self, rocm: str) -> WindowsWheels | None:
        """AMD's Windows wheel set for ROCm `rocm`: the same release, else the newest set of the
        same major.minor line (the windows target uses the wheels' own ROCm)."""
        try:
            want = Version(rocm)
        except InvalidVersion:
            return None
        exact = [w for w in self.windows_wheels if Version(w.rocm) == want]
        if exact:
            return exact[0]
        line = [w for w in self.windows_wheels if Version(w.rocm).release[:2] == want.release[:2]]
        return max(line, key=lambda w: Version(w.rocm)) if line else None

    def base_image(self, reference: str) -> BaseImage | None:
        """What envbuilder knows about a base image reference's python3, if anything."""
        return next((b for b in self.base_images if fnmatch.fnmatchcase(reference, b.match)), None)

    def device_flags(self, host_kind: HostKind) -> DeviceFlags:
        if host_kind not in self.flags:
            raise CompatDataError(
                f"no Docker device flags for host kind {host_kind!r}; "
                f"known: {', '.join(self.flags)}"
            )
        return self.flags[host_kind]


def _as_float_key(v: Version) -> float:
    major, minor, micro = (*v.release, 0, 0, 0)[:3]
    return major * 10000 + minor * 100 + micro

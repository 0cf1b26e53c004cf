"""Compatibility data: GPUs, ROCm releases, the torch/ROCm/Python matrix, Docker device flags.

The facts live in TOML files under `envbuilder/data/` (each entry with its `source`); this module
only loads them into typed, frozen records and answers look-ups. No fact is hard-coded in Python.
Where each fact comes from is in its row's `source` (public pages and repositories).

CONTRACT (other modules code against these names; keep them stable):

    load_compat() -> Compat                      cached; raises CompatDataError on malformed data
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

import dataclasses
import fnmatch
import functools
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypeVar, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet
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
_GFX = re.compile(r"gfx[0-9a-f]+")


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


def _norm(name: str) -> str:
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
        key = _norm(name_or_gfx)
        if _GFX.fullmatch(key):
            return next((g for g in self.gpus if g.gfx == key), None)
        for g in self.gpus:
            if any(_norm(n) == key for n in g.names):
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


# --- strict loading --------------------------------------------------------------------------

T = TypeVar("T")


class _Reader:
    """Reads one table of a data file, checking types and refusing unknown keys."""

    def __init__(self, file: str, where: str, table: Any) -> None:
        if not isinstance(table, dict):
            raise CompatDataError(f"{file}: {where}: expected a table")
        self.file, self.where, self.table = file, where, table
        self.seen: set[str] = set()

    def _fail(self, key: str, what: str) -> CompatDataError:
        return CompatDataError(
            f"envbuilder/data/{self.file}: {self.where}.{key}: {what} "
            "(envbuilder's shipped data is malformed; please report it)"
        )

    def get(self, key: str, kind: type[T], default: T | None = None) -> T:
        self.seen.add(key)
        if key not in self.table:
            if default is not None:
                return default
            raise self._fail(key, "missing")
        value = self.table[key]
        if not isinstance(value, kind):
            raise self._fail(key, f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    def strs(self, key: str, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
        value = self.get(key, list, list(default) if default is not None else None)
        if not all(isinstance(x, str) for x in value):
            raise self._fail(key, "expected a list of strings")
        return tuple(value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self.get(key, dict, {})
        if not all(isinstance(v, str) for v in value.values()):
            raise self._fail(key, "expected a table of strings")
        return dict(value)

    def opt(self, key: str, optional: bool = False) -> str | None:
        """A string where "" means none; with `optional`, the key may also be left out."""
        if optional and key not in self.table:
            self.seen.add(key)
            return None
        return self.get(key, str) or None

    def version(self, key: str) -> str:
        value = self.get(key, str)
        try:
            Version(value)
        except InvalidVersion as exc:
            raise self._fail(key, f"not a version: {value!r}") from exc
        return value

    def gfx_list(self, key: str, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
        targets = self.strs(key, default)
        bad = [t for t in targets if not _GFX.fullmatch(t)]
        if bad or len(set(targets)) != len(targets):
            raise self._fail(key, f"expected distinct gfx targets, got {bad or list(targets)}")
        return targets

    def spec(self, key: str) -> SpecifierSet:
        try:
            return SpecifierSet(self.get(key, str))
        except InvalidSpecifier as exc:
            raise self._fail(key, str(exc)) from exc

    def done(self) -> None:
        extra = set(self.table) - self.seen
        if extra:
            raise self._fail(sorted(extra)[0], "unknown key")


def _read(file: str) -> dict[str, Any]:
    try:
        text = resources.files("envbuilder.data").joinpath(file).read_text(encoding="utf-8")
        return tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CompatDataError(f"envbuilder/data/{file}: cannot be read: {exc}") from exc


def _rows(file: str, data: dict[str, Any], key: str, make: Callable[[_Reader], T]) -> list[T]:
    rows = data.get(key)
    if not isinstance(rows, list) or not rows:
        raise CompatDataError(f"envbuilder/data/{file}: expected [[{key}]] rows")
    out = []
    for i, row in enumerate(rows):
        r = _Reader(file, f"{key}[{i}]", row)
        out.append(make(r))
        r.done()
    return out


def _known_or_unknown(r: _Reader, key: str) -> tuple[str | None, bool]:
    """A GPU-table string that may be "unknown": (value or None, whether it is known)."""
    value = r.get(key, str)
    return (None, False) if value == UNKNOWN else (value or None, True)


def _gpu(r: _Reader) -> Gpu:
    gfx = r.get("gfx", str)
    if not _GFX.fullmatch(gfx):
        raise r._fail("gfx", f"not a gfx target: {gfx!r}")
    since, since_known = _known_or_unknown(r, "linux_official_since")
    override, override_known = _known_or_unknown(r, "hsa_override")
    wsl_since = r.opt("wsl_since", optional=True)
    for key, value in (("linux_official_since", since), ("wsl_since", wsl_since)):
        if value is not None:
            r.version(key)
    return Gpu(
        names=r.strs("names"),
        gfx=gfx,
        wsl=r.get("wsl", bool),
        windows=r.get("windows", bool),
        linux_official_since=since,
        hsa_override=override,
        source=r.get("source", str),
        unverified=r.get("unverified", bool, False),
        wsl_since=wsl_since,
        linux_official_known=since_known,
        hsa_override_known=override_known,
    )


def _install_models(r: _Reader) -> tuple[InstallModel, ...]:
    models = r.strs("install")
    if (
        not models
        or len(set(models)) != len(models)
        or any(m not in INSTALL_MODELS for m in models)
    ):
        raise r._fail(
            "install",
            f"expected distinct install models out of "
            f"{', '.join(INSTALL_MODELS)}, got {list(models)}",
        )
    return cast(tuple[InstallModel, ...], models)


def _release(r: _Reader) -> RocmRelease:
    stack = r.get("wsl_stack", str)
    fix = r.opt("libhsa_fix")
    if stack not in ("legacy", "rocdxg", "none"):
        raise r._fail("wsl_stack", f"unknown stack {stack!r}")
    if fix not in (None, "copy", "delete"):
        raise r._fail("libhsa_fix", f"unknown fix {fix!r}")
    release = RocmRelease(
        version=r.version("version"),
        wsl_stack=None if stack == "none" else cast(WslStack, stack),
        ubuntu=r.strs("ubuntu"),
        amdgpu_install=r.opt("amdgpu_install"),
        amdgpu_install_path=r.opt("amdgpu_install_path"),
        libhsa_fix=cast(LibhsaFix | None, fix),
        docker_images=r.str_map("docker_images"),
        source=r.get("source", str),
        unverified=r.get("unverified", bool, False),
        install=_install_models(r),
        pip_index=r.opt("pip_index", optional=True),
        host_driver=r.opt("host_driver", optional=True),
        installers=r.str_map("installers"),
        pip_python=r.str_map("pip_python"),
    )
    _check_release(r, release)
    if set(release.installers) - {"runfile", "tarball"}:
        raise r._fail("installers", "expected only runfile and tarball")
    return release


def _check_release(r: _Reader, release: RocmRelease) -> None:
    """A release installed through amdgpu-install names its package (with {codename}); one
    that is not names none; a pip-SDK release names its index."""
    apt = "amdgpu-install" in release.install
    path = release.amdgpu_install_path
    if apt and (release.amdgpu_install is None or path is None or "{codename}" not in path):
        raise r._fail(
            "amdgpu_install_path",
            "an amdgpu-install release needs amdgpu_install and a path with {codename}",
        )
    if not apt and (release.amdgpu_install or path):
        raise r._fail("amdgpu_install", f"set, but install is {list(release.install)}")
    if ("pip-sdk" in release.install) != (release.pip_index is not None):
        raise r._fail("pip_index", "a pip-sdk release needs pip_index, others have none")
    if (
        path
        and release.amdgpu_install
        and not path.endswith(f"amdgpu-install_{release.amdgpu_install}_all.deb")
    ):
        raise r._fail(
            "amdgpu_install_path",
            f"does not end in amdgpu-install_{release.amdgpu_install}_all.deb",
        )


def _gfx_sets(data: Any) -> dict[str, GfxSet]:
    if not isinstance(data, dict) or not data:
        raise CompatDataError("envbuilder/data/torch.toml: expected [gfx_set.NAME] tables")
    sets: dict[str, GfxSet] = {}
    for name, table in data.items():
        r = _Reader("torch.toml", f"gfx_set.{name}", table)
        sets[name] = GfxSet(
            name, r.gfx_list("targets"), r.get("source", str), r.get("unverified", bool, False)
        )
        r.done()
    return sets


def _index(sets: Mapping[str, GfxSet]) -> Callable[[_Reader], TorchIndexEntry]:
    def make(r: _Reader) -> TorchIndexEntry:
        index = r.get("index", str)
        derived = index.removeprefix("rocm") if index.startswith("rocm") else ""
        gfx_name = r.opt("gfx", optional=True)
        if gfx_name is not None and gfx_name not in sets:
            raise r._fail("gfx", f"no [gfx_set.{gfx_name}] (known: {', '.join(sets)})")
        gfx_set = sets[gfx_name] if gfx_name else None
        entry = TorchIndexEntry(
            torch=r.spec("torch"),
            index=index,
            url=r.get("url", str),
            python=r.spec("python"),
            source=r.get("source", str),
            versions=r.strs("versions"),
            local=r.get("local", str, index),
            gfx=gfx_set.targets if gfx_set else (),
            rocm=r.get("rocm", str, derived) or None,
            unverified=r.get("unverified", bool, False),
            gfx_set=gfx_set,
        )
        for v in entry.versions:
            if not entry.torch.contains(v, prereleases=True):
                raise r._fail("versions", f"{v} is outside torch {entry.torch}")
        return entry

    return make


def _windows(r: _Reader) -> WindowsWheels:
    w = WindowsWheels(
        rocm=r.version("rocm"),
        url=r.get("url", str),
        python=r.spec("python"),
        wheels=r.strs("wheels"),
        source=r.get("source", str),
        unverified=r.get("unverified", bool, False),
        sdk=r.strs("sdk"),
        index=r.get("index", bool, False),
        gfx=r.gfx_list("gfx", ()),
        driver=r.opt("driver", optional=True),
    )
    if not w.url.endswith("/") or w.index == bool(w.wheels):
        raise r._fail(
            "url",
            "expected a folder URL ending in '/' with wheels, or an index (index = true) without",
        )
    return w


def _flags(kind: str, r: _Reader) -> DeviceFlags:
    vols = r.get("volumes", list)
    if not all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v) for v in vols
    ):
        raise r._fail("volumes", "expected [host, container] pairs")
    return DeviceFlags(
        host_kind=cast(HostKind, kind),
        devices=r.strs("devices"),
        volumes=tuple((v[0], v[1]) for v in vols),
        environment=r.str_map("environment"),
        group_add=r.strs("group_add"),
        security_opt=r.strs("security_opt"),
        cap_add=r.strs("cap_add"),
        ipc_mode=r.opt("ipc_mode") if "ipc_mode" in r.table else None,
        shm_size=r.opt("shm_size") if "shm_size" in r.table else None,
        gpu_request=r.get("gpu_request", bool),
        source=r.get("source", str),
    )


def _device_flags(data: dict[str, Any]) -> dict[str, DeviceFlags]:
    hosts = data.get("host")
    if not isinstance(hosts, dict) or set(hosts) != set(HOST_KINDS):
        raise CompatDataError(
            f"envbuilder/data/docker.toml: [host.*] must be exactly {', '.join(HOST_KINDS)}"
        )
    flags: dict[str, DeviceFlags] = {}
    for kind in HOST_KINDS:
        r = _Reader("docker.toml", f"host.{kind}", hosts[kind])
        flags[kind] = _flags(kind, r)
        r.done()
    return flags


def _torch_data() -> tuple[dict[str, GfxSet], list[TorchIndexEntry], list[WindowsWheels]]:
    tdata = _read("torch.toml")
    unknown = set(tdata) - {"gfx_set", "index", "windows"}
    if unknown:
        raise CompatDataError(f"envbuilder/data/torch.toml: unknown table [{sorted(unknown)[0]}]")
    sets = _gfx_sets(tdata.get("gfx_set"))
    matrix = _rows("torch.toml", tdata, "index", _index(sets))
    windows = _rows("torch.toml", tdata, "windows", _windows)
    return sets, matrix, windows


@functools.cache
def load_compat() -> Compat:
    """All shipped compatibility data, typed and checked; cached. Raises CompatDataError."""
    gpus = _rows("gpus.toml", _read("gpus.toml"), "gpu", _gpu)
    rocm_data = _read("rocm.toml")
    unknown = set(rocm_data) - {"release", "pip_sdk", "hip"}
    if unknown:
        raise CompatDataError(f"envbuilder/data/rocm.toml: unknown table [{sorted(unknown)[0]}]")
    releases = _rows("rocm.toml", rocm_data, "release", _release)
    releases = _with_hip(releases, _rows("rocm.toml", rocm_data, "hip", _hip_line))
    sets, matrix, windows = _torch_data()
    wsl = _read("wsl.toml")
    return Compat(
        gpus=tuple(gpus),
        releases=tuple(releases),
        torch_matrix=tuple(matrix),
        windows_wheels=tuple(windows),
        flags=_device_flags(_read("docker.toml")),
        rccl=_rccl(_read("rccl.toml")),
        gfx_sets=sets,
        base_images=tuple(_rows("images.toml", _read("images.toml"), "image", _base_image)),
        wsl_units=_wsl_units(wsl),
        dxg=_dxg(wsl.get("dxg")),
        librocdxg=tuple(_rows("wsl.toml", wsl, "librocdxg", _librocdxg)),
        pip_sdk=_pip_sdk(rocm_data.get("pip_sdk")),
    )


_HIP = re.compile(r"[0-9]+\.[0-9]+")


def _hip_line(r: _Reader) -> tuple[str, tuple[str, ...], str]:
    """A [[hip]] row: (HIP major.minor, the releases shipping it, source)."""
    version = r.get("version", str)
    if not _HIP.fullmatch(version):
        raise r._fail("version", f"expected a HIP major.minor such as 7.14, got {version!r}")
    releases = r.strs("releases")
    if not releases:
        raise r._fail("releases", "expected at least one release")
    return version, releases, r.get("source", str)


def _with_hip(
    releases: list[RocmRelease], lines: list[tuple[str, tuple[str, ...], str]]
) -> list[RocmRelease]:
    """`releases` with the HIP version of each [[hip]] row; a row naming a release that is not a
    [[release]], or a release named twice, is a data error."""
    known = {r.version for r in releases}
    hip: dict[str, tuple[str, str]] = {}
    for i, (version, names, source) in enumerate(lines):
        for name in names:
            where = f"envbuilder/data/rocm.toml: hip[{i}].releases"
            if name not in known:
                raise CompatDataError(f"{where}: {name!r} is not a [[release]] version")
            if name in hip:
                raise CompatDataError(f"{where}: {name!r} is already in another [[hip]] row")
            hip[name] = (version, source)
    return [
        dataclasses.replace(r, hip=hip[r.version][0], hip_source=hip[r.version][1])
        if r.version in hip
        else r
        for r in releases
    ]


def _pip_sdk(table: Any) -> PipSdkNames:
    r = _Reader("rocm.toml", "pip_sdk", table)
    names = PipSdkNames(
        names=r.strs("names"),
        device_names=r.strs("device_names"),
        source=r.get("source", str),
        family=r.strs("family"),
        placeholder_versions=r.strs("placeholder_versions"),
    )
    r.done()
    if "torch" not in names.names or not all("{gfx}" in n for n in names.device_names):
        raise r._fail("device_names", "expected torch in names and {gfx} in every device name")
    return names


_UNIT = re.compile(r"[\w@.:-]+\.(service|timer|mount|socket|target|path)")


def _wsl_units(data: dict[str, Any]) -> WslUnits:
    unknown = set(data) - {"systemd", "dxg", "librocdxg"}
    if unknown:
        raise CompatDataError(f"envbuilder/data/wsl.toml: unknown table [{sorted(unknown)[0]}]")
    r = _Reader("wsl.toml", "systemd", data.get("systemd"))
    units = WslUnits(
        discouraged=r.strs("discouraged_units"),
        also_masked=r.strs("also_masked"),
        source=r.get("source", str),
    )
    r.get("also_masked_source", str)
    r.done()
    for key, names in (
        ("discouraged_units", units.discouraged),
        ("also_masked", units.also_masked),
    ):
        bad = [n for n in names if not _UNIT.fullmatch(n)]
        if bad or len(set(names)) != len(names):
            raise r._fail(key, f"expected distinct systemd unit names, got {bad or list(names)}")
    if not units.discouraged:
        raise r._fail("discouraged_units", "empty")
    return units


def _dxg(table: Any) -> DxgFacts:
    r = _Reader("wsl.toml", "dxg", table)
    facts = DxgFacts(
        detection_default_from=r.version("detection_default_from"),
        dids_conf_host=r.get("dids_conf_host", str),
        dids_conf_container=r.get("dids_conf_container", str),
        ubuntu=r.strs("ubuntu"),
        source=r.get("detection_source", str),
    )
    for key in ("dids_conf_source", "ubuntu_source"):
        r.get(key, str)
    r.done()
    if not (facts.dids_conf_host.startswith("/") and facts.dids_conf_container.startswith("/")):
        raise r._fail("dids_conf_host", "expected absolute paths")
    return facts


def _librocdxg(r: _Reader) -> Librocdxg:
    lib = Librocdxg(
        version=r.version("version"),
        deb=r.get("deb", str),
        url=r.get("url", str),
        sha256=r.opt("sha256"),
        dids_conf=r.get("dids_conf", bool),
        rocm=r.opt("rocm"),
        source=r.get("source", str),
        unverified=r.get("unverified", bool, False),
    )
    if not lib.url.endswith("/" + lib.deb) or not lib.url.startswith("https://"):
        raise r._fail("url", f"expected an https URL ending in /{lib.deb}")
    if lib.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", lib.sha256):
        raise r._fail("sha256", "expected 64 lower-case hex digits")
    return lib


def _base_image(r: _Reader) -> BaseImage:
    return BaseImage(
        match=r.get("match", str), python=r.get("python", str), source=r.get("source", str)
    )


def _knob_names(r: _Reader, key: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    names = r.strs(key)
    bad = [n for n in names if not n.startswith(prefixes) or not re.fullmatch(r"[A-Z0-9_]+", n)]
    if bad or len(set(names)) != len(names):
        raise r._fail(
            key, f"expected distinct {'/'.join(prefixes)}* names, got {bad or list(names)}"
        )
    return names


def _rccl(data: dict[str, Any]) -> RcclKnobs:
    unknown = set(data) - {"nccl", "rccl", "misspelled", "pytorch"}
    if unknown:
        raise CompatDataError(f"envbuilder/data/rccl.toml: unknown table [{sorted(unknown)[0]}]")
    n = _Reader("rccl.toml", "nccl", data.get("nccl"))
    r = _Reader("rccl.toml", "rccl", data.get("rccl"))
    m = _Reader("rccl.toml", "misspelled", data.get("misspelled"))
    p = _Reader("rccl.toml", "pytorch", data.get("pytorch"))
    also = _knob_names(n, "documented", ("NCCL_",)) + _knob_names(r, "also_read", ("RCCL_",))
    knobs = RcclKnobs(
        nccl=_knob_names(n, "names", ("NCCL_",)),
        rccl=_knob_names(r, "names", ("RCCL_",)),
        misspelled=m.str_map("map"),
        source=m.get("source", str),
        also_read=also,
        pytorch=p.str_map("map"),
    )
    for reader, keys in (
        (n, ("source", "documented_source")),
        (r, ("source", "also_read_source")),
        (p, ("source",)),
    ):
        for key in keys:
            reader.get(key, str)
    for reader in (n, r, m, p):
        reader.done()
    wrong = (set(knobs.misspelled) | set(knobs.pytorch)) & set(knobs.known)
    if wrong:
        raise m._fail("map", f"{sorted(wrong)[0]} is also listed as a name RCCL reads")
    return knobs

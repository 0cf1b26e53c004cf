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
    Compat.wsl_units -> WslUnits                 systemd units a WSL distro masks (wsl.toml)
"""

from __future__ import annotations

import fnmatch
import functools
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal, TypeVar, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder.errors import CompatDataError

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
    unverified: bool = False  # the wsl/windows flags are a lead, not a checked fact


@dataclass(frozen=True)
class RocmRelease:
    """One ROCm release and how it is installed inside WSL."""

    version: str  # "6.4.1"
    wsl_stack: WslStack | None  # None: this release ships no WSL runtime
    ubuntu: tuple[str, ...]  # Ubuntu releases supported inside WSL, e.g. ("22.04", "24.04")
    amdgpu_install: str | None  # package version "6.4.60401-1", for amdgpu-install_<...>_all.deb
    amdgpu_install_path: str | None  # URL of that .deb, with {codename} for the Ubuntu codename
    libhsa_fix: LibhsaFix | None  # what to do to torch's bundled libhsa-runtime64 in WSL
    docker_images: Mapping[str, str]  # e.g. {"22.04": "rocm/dev-ubuntu-22.04:6.4.1"}
    source: str
    unverified: bool = False  # derived from a pattern, not a checked fact

    def amdgpu_install_url(self, codename: str) -> str | None:
        """The amdgpu-install .deb URL for an Ubuntu codename ("jammy", "noble")."""
        if self.amdgpu_install_path is None:
            return None
        return self.amdgpu_install_path.replace("{codename}", codename)


@dataclass(frozen=True)
class TorchIndexEntry:
    """A row of the torch <-> ROCm index <-> Python matrix."""

    torch: SpecifierSet  # torch versions served, e.g. ">=2.8,<2.10"
    index: str  # "rocm6.4", "cpu", "cu128"
    url: str  # the PyTorch wheel index URL
    python: SpecifierSet  # Python versions with wheels
    source: str
    versions: tuple[str, ...] = ()  # torch releases known to be on the index ("2.9.1")
    local: str | None = None  # local version label of its wheels ("rocm6.4", "cpu")
    gfx: tuple[str, ...] = ()  # gfx targets the wheels are compiled for (empty: not a ROCm index)

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
    """AMD's native-Windows PyTorch wheels for one ROCm release (direct wheel URLs)."""

    rocm: str
    url: str  # folder URL the wheel file names are relative to
    python: SpecifierSet
    wheels: tuple[str, ...]
    source: str
    unverified: bool = False

    def wheel_urls(self) -> list[str]:
        return [self.url + w for w in self.wheels]


@dataclass(frozen=True)
class BaseImage:
    """The `python3` of base images whose reference matches `match` (shell-style pattern)."""

    match: str
    python: str
    source: str


@dataclass(frozen=True)
class RcclKnobs:
    """The NCCL_*/RCCL_* names RCCL reads, and names it does not read -> the real name."""

    nccl: tuple[str, ...]
    rccl: tuple[str, ...]
    misspelled: Mapping[str, str]
    source: str

    @property
    def known(self) -> tuple[str, ...]:
        return self.nccl + self.rccl


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
class Compat:
    """All compatibility data, loaded once (`load_compat()`)."""

    gpus: tuple[Gpu, ...]
    releases: tuple[RocmRelease, ...]
    torch_matrix: tuple[TorchIndexEntry, ...]
    windows_wheels: tuple[WindowsWheels, ...]
    flags: Mapping[str, DeviceFlags]
    rccl: RcclKnobs
    wheel_gfx_base: tuple[str, ...]
    wheel_gfx_later: tuple[str, ...]
    wheel_gfx_later_from: tuple[str, ...]
    base_images: tuple[BaseImage, ...] = ()
    wsl_units: WslUnits = WslUnits((), (), "")

    def gpu(self, name_or_gfx: str) -> Gpu | None:
        """The GPU by marketing name (any spelling/case) or by gfx target (first row of it)."""
        key = _norm(name_or_gfx)
        if re.fullmatch(r"gfx[0-9a-f]+", key):
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
        """Releases with a WSL runtime, nearest to `version` first (ties: the newer first)."""
        try:
            want = _as_float_key(Version(version))
        except InvalidVersion:
            want = 0.0
        ok = [r for r in self.releases if r.wsl_stack is not None]
        ok.sort(key=lambda r: (abs(_as_float_key(Version(r.version)) - want),
                               -_as_float_key(Version(r.version))))
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

    def wheel_gfx(self, index: str) -> tuple[str, ...]:
        """gfx targets upstream torch wheels of that index are compiled for."""
        if index in self.wheel_gfx_later_from:
            return self.wheel_gfx_base + self.wheel_gfx_later
        return self.wheel_gfx_base

    def base_image(self, reference: str) -> BaseImage | None:
        """What envbuilder knows about a base image reference's python3, if anything."""
        return next((b for b in self.base_images if fnmatch.fnmatchcase(reference, b.match)),
                    None)

    def device_flags(self, host_kind: HostKind) -> DeviceFlags:
        if host_kind not in self.flags:
            raise CompatDataError(f"no Docker device flags for host kind {host_kind!r}; "
                                  f"known: {', '.join(self.flags)}")
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
        return CompatDataError(f"envbuilder/data/{self.file}: {self.where}.{key}: {what} "
                               "(envbuilder's shipped data is malformed; please report it)")

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

    def opt(self, key: str) -> str | None:
        """A string where "" means none."""
        return self.get(key, str) or None

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


def _gpu(r: _Reader) -> Gpu:
    gfx = r.get("gfx", str)
    if not re.fullmatch(r"gfx[0-9a-f]+", gfx):
        raise r._fail("gfx", f"not a gfx target: {gfx!r}")
    return Gpu(names=r.strs("names"), gfx=gfx, wsl=r.get("wsl", bool),
               windows=r.get("windows", bool),
               linux_official_since=r.opt("linux_official_since"),
               hsa_override=r.opt("hsa_override"), source=r.get("source", str),
               unverified=r.get("unverified", bool, False))


def _release(r: _Reader) -> RocmRelease:
    stack = r.get("wsl_stack", str)
    fix = r.opt("libhsa_fix")
    if stack not in ("legacy", "rocdxg", "none"):
        raise r._fail("wsl_stack", f"unknown stack {stack!r}")
    if fix not in (None, "copy", "delete"):
        raise r._fail("libhsa_fix", f"unknown fix {fix!r}")
    Version(r.get("version", str))
    return RocmRelease(
        version=r.get("version", str),
        wsl_stack=None if stack == "none" else cast(WslStack, stack),
        ubuntu=r.strs("ubuntu"), amdgpu_install=r.opt("amdgpu_install"),
        amdgpu_install_path=r.opt("amdgpu_install_path"), libhsa_fix=cast(LibhsaFix | None, fix),
        docker_images=r.str_map("docker_images"), source=r.get("source", str),
        unverified=r.get("unverified", bool, False))


def _index(r: _Reader) -> TorchIndexEntry:
    index = r.get("index", str)
    entry = TorchIndexEntry(
        torch=r.spec("torch"), index=index, url=r.get("url", str), python=r.spec("python"),
        source=r.get("source", str), versions=r.strs("versions"), local=index)
    for v in entry.versions:
        if not entry.torch.contains(v, prereleases=True):
            raise r._fail("versions", f"{v} is outside torch {entry.torch}")
    return entry


def _windows(r: _Reader) -> WindowsWheels:
    return WindowsWheels(rocm=r.get("rocm", str), url=r.get("url", str), python=r.spec("python"),
                         wheels=r.strs("wheels"), source=r.get("source", str),
                         unverified=r.get("unverified", bool, False))


def _flags(kind: str, r: _Reader) -> DeviceFlags:
    vols = r.get("volumes", list)
    if not all(isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
               for v in vols):
        raise r._fail("volumes", "expected [host, container] pairs")
    return DeviceFlags(
        host_kind=cast(HostKind, kind), devices=r.strs("devices"),
        volumes=tuple((v[0], v[1]) for v in vols), environment=r.str_map("environment"),
        group_add=r.strs("group_add"), security_opt=r.strs("security_opt"),
        cap_add=r.strs("cap_add"), ipc_mode=r.opt("ipc_mode") if "ipc_mode" in r.table else None,
        shm_size=r.opt("shm_size") if "shm_size" in r.table else None,
        gpu_request=r.get("gpu_request", bool), source=r.get("source", str))


@functools.cache
def load_compat() -> Compat:
    """All shipped compatibility data, typed and checked; cached. Raises CompatDataError."""
    gpus = _rows("gpus.toml", _read("gpus.toml"), "gpu", _gpu)
    releases = _rows("rocm.toml", _read("rocm.toml"), "release", _release)
    tdata = _read("torch.toml")
    matrix = _rows("torch.toml", tdata, "index", _index)
    windows = _rows("torch.toml", tdata, "windows", _windows)
    g = _Reader("torch.toml", "gfx", tdata.get("gfx"))
    gfx_base, gfx_later = g.strs("base"), g.strs("later")
    later_from = g.strs("later_from_index")
    g.get("source", str)
    g.done()
    # rows reference their gfx lists by index name
    matrix = [_with_gfx(e, gfx_base + gfx_later if e.index in later_from else gfx_base)
              for e in matrix]
    ddata = _read("docker.toml")
    hosts = ddata.get("host")
    if not isinstance(hosts, dict) or set(hosts) != set(HOST_KINDS):
        raise CompatDataError(f"envbuilder/data/docker.toml: [host.*] must be exactly "
                              f"{', '.join(HOST_KINDS)}")
    flags: dict[str, DeviceFlags] = {}
    for kind in HOST_KINDS:
        r = _Reader("docker.toml", f"host.{kind}", hosts[kind])
        flags[kind] = _flags(kind, r)
        r.done()
    return Compat(gpus=tuple(gpus), releases=tuple(releases), torch_matrix=tuple(matrix),
                  windows_wheels=tuple(windows), flags=flags, rccl=_rccl(_read("rccl.toml")),
                  wheel_gfx_base=gfx_base, wheel_gfx_later=gfx_later,
                  wheel_gfx_later_from=later_from,
                  base_images=tuple(_rows("images.toml", _read("images.toml"), "image",
                                          _base_image)),
                  wsl_units=_wsl_units(_read("wsl.toml")))


_UNIT = re.compile(r"[\w@.:-]+\.(service|timer|mount|socket|target|path)")


def _wsl_units(data: dict[str, Any]) -> WslUnits:
    unknown = set(data) - {"systemd"}
    if unknown:
        raise CompatDataError(f"envbuilder/data/wsl.toml: unknown table [{sorted(unknown)[0]}]")
    r = _Reader("wsl.toml", "systemd", data.get("systemd"))
    units = WslUnits(discouraged=r.strs("discouraged_units"), also_masked=r.strs("also_masked"),
                     source=r.get("source", str))
    r.get("also_masked_source", str)
    r.done()
    for key, names in (("discouraged_units", units.discouraged),
                       ("also_masked", units.also_masked)):
        bad = [n for n in names if not _UNIT.fullmatch(n)]
        if bad or len(set(names)) != len(names):
            raise r._fail(key, f"expected distinct systemd unit names, got {bad or list(names)}")
    if not units.discouraged:
        raise r._fail("discouraged_units", "empty")
    return units


def _base_image(r: _Reader) -> BaseImage:
    return BaseImage(match=r.get("match", str), python=r.get("python", str),
                     source=r.get("source", str))


def _with_gfx(e: TorchIndexEntry, gfx: tuple[str, ...]) -> TorchIndexEntry:
    return replace(e, gfx=gfx) if e.index.startswith("rocm") else e


def _rccl(data: dict[str, Any]) -> RcclKnobs:
    n = _Reader("rccl.toml", "nccl", data.get("nccl"))
    r = _Reader("rccl.toml", "rccl", data.get("rccl"))
    m = _Reader("rccl.toml", "misspelled", data.get("misspelled"))
    knobs = RcclKnobs(nccl=n.strs("names"), rccl=r.strs("names"), misspelled=m.str_map("map"),
                      source=m.get("source", str))
    n.get("source", str)
    r.get("source", str)
    for reader in (n, r, m):
        reader.done()
    return knobs

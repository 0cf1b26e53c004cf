"""Loading the compatibility data (envbuilder/data/*.toml) into envbuilder.core.compat's records,
strictly: a wrong type, a missing or unknown key is a CompatDataError naming the file and key.
`load_compat()` is the one entry point, cached."""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, TypeVar, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder.core.compat import (
    GFX,
    HOST_KINDS,
    INSTALL_MODELS,
    UNKNOWN,
    BaseImage,
    Compat,
    DeviceFlags,
    DxgFacts,
    GfxSet,
    Gpu,
    HostKind,
    InstallModel,
    LibhsaFix,
    Librocdxg,
    PipSdkNames,
    RcclKnobs,
    RocmRelease,
    TorchIndexEntry,
    WindowsWheels,
    WslStack,
    WslUnits,
)
from envbuilder.core.errors import CompatDataError

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
        bad = [t for t in targets if not GFX.fullmatch(t)]
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
    if not GFX.fullmatch(gfx):
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

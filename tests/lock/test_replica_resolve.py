"""The real uv against a replica of AMD's ROCm 7.14 index, PyTorch's rocm7.14 index and a
default index playing PyPI (placeholders, a CUDA torch), served on 127.0.0.1 by tests/replica.

Every stand-in carries the real names, versions, tags and Requires-Dist metadata recorded in
tests/data/replica/packages.toml (sources in SOURCES.md). Offline: nothing leaves 127.0.0.1.
What the tests show is written up in docs/rocm.md ("Locking the pip SDK")."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import os
import re
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from replica.catalog import Catalog, load_catalog
from replica.recipes import amd_names, amd_recipe, narrowed_rocm, pytorch_recipe
from replica.server import ReplicaServer, serve
from replica.uvcompile import (
    LINUX,
    WINDOWS,
    CompileRequest,
    CompileResult,
    SearchedIndex,
    compile_pylock,
    with_index,
)

from envbuilder.core.model import Index
from envbuilder.lock.uv import make_request, postprocess, run_uv

AMD_CANONICAL = "https://repo.amd.com/rocm/whl-multi-arch/"
# Names that must only ever come from AMD's or PyTorch's ROCm indexes.
ROCM_FAMILY = re.compile(r"^(rocm|torch|triton|amd-torch)")
# gfx1100's device wheels from AMD's index: the SDK's, torch's and torch's gfx11 family wheel.
GFX1100 = {"rocm-sdk-device-gfx1100", "amd-torch-device-gfx1100", "amd-torch-device-gfx11"}
# What moves with torch: its device wheels (the SDK's stay).
MOVED = {"torch", "amd-torch-device-gfx1100", "amd-torch-device-gfx11"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def replica(catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaServer]:
    """The replica with every stand-in published (round 2)."""
    with serve(catalog, tmp_path_factory.mktemp("replica"), round_=2) as server:
        yield server


class Uv:
    """Runs compile_pylock against one replica, each run in its own folder, one uv cache."""

    def __init__(self, server: ReplicaServer, root: Path) -> None:
        self.server, self.root, self.cache = server, root, root / "uv-cache"
        self._n = itertools.count()

    def __call__(
        self,
        request: CompileRequest,
        previous: str | None = None,
        cache: Path | None = None,
        environ: dict[str, str] | None = None,
    ) -> CompileResult:
        return compile_pylock(
            request,
            self.root / f"run{next(self._n)}",
            default_index=self.server.url("pypi"),
            cache=cache or self.cache,
            previous=previous,
            environ=environ,
        )


@pytest.fixture(scope="module")
def uv(replica: ReplicaServer, tmp_path_factory: pytest.TempPathFactory) -> Uv:
    return Uv(replica, tmp_path_factory.mktemp("uv"))


def _ok(result: CompileResult) -> CompileResult:
    assert result.ok, f"uv failed ({result.returncode}):\n{result.stderr}\n{result.command}"
    return result


def _devices(result: CompileResult) -> set[str]:
    return {n for n in result.packages() if "device-gfx" in n}


def _family_from(result: CompileResult, index: str) -> set[str]:
    """ROCm-family names whose files come from `index`."""
    return {
        n for n, p in result.packages().items() if ROCM_FAMILY.match(n) and index in p.indexes()
    }


# --- the replica itself ------------------------------------------------------------------------


def test_every_standin_is_a_valid_tiny_distribution(catalog: Catalog, tmp_path: Path) -> None:
    """Each wheel is a few KiB with METADATA, WHEEL and a RECORD whose hashes match."""
    wheels = [f for f in catalog.files if f.filename.endswith(".whl")]
    assert len(wheels) > 100 and all(len(f.data) < 8192 for f in catalog.files)
    for f in wheels:
        path = tmp_path / f.filename
        path.write_bytes(f.data)
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            record = next(n for n in names if n.endswith(".dist-info/RECORD"))
            for line in zf.read(record).decode().splitlines():
                member, digest, _size = line.split(",")
                if member == record:
                    continue
                data = zf.read(member)
                expected = (
                    base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                )
                assert digest == f"sha256={expected}", (f.filename, member)
            assert {n.rsplit("/", 1)[-1] for n in names} >= {"METADATA", "WHEEL", "RECORD"}


def test_every_fact_names_a_source_and_unconfirmed_ones_say_so() -> None:
    """packages.toml's [Sn] keys are rows of SOURCES.md; an unverified entry says what is
    unconfirmed or which value is invented."""
    data_dir = Path(__file__).parents[1] / "data" / "replica"
    raw = tomllib.loads((data_dir / "packages.toml").read_text(encoding="utf-8"))
    documented = set(
        re.findall(
            r"^\| (S\d+) \|", (data_dir / "SOURCES.md").read_text(encoding="utf-8"), re.MULTILINE
        )
    )
    cited: set[str] = set(raw["targets"]["sources"]) | set(raw["targets"]["seen_sources"])
    for entry in raw["package"]:
        assert "sources" in entry and "verified" in entry, entry["name"]
        if not entry["verified"]:
            assert entry.get("unverified") or entry.get("replica_value"), entry["name"]
        elif not entry["sources"]:
            raise AssertionError(f"{entry['name']} is verified without a source")
        cited |= set(entry["sources"])
    cited |= {size["source"] for size in raw["size"]}
    cited |= {s for index in raw["indexes"].values() for s in index["sources"]}
    assert cited <= documented, cited - documented
    assert set(raw["targets"]["seen"]) <= set(raw["targets"]["linux"])


def test_windows_torch_offers_only_the_windows_targets(catalog: Catalog) -> None:
    """rocm-kpack's splitter writes the extras of the targets a wheel was built for."""

    def extras(filename: str) -> set[str]:
        data = next(f.data for f in catalog.files if f.filename == filename)
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            meta = zf.read("torch-2.12.0+rocm7.14.0.dist-info/METADATA").decode()
        return set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.MULTILINE))

    linux = extras("torch-2.12.0+rocm7.14.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    windows = extras("torch-2.12.0+rocm7.14.0-cp312-cp312-win_amd64.whl")
    assert {"device-gfx1100", "device-gfx942", "device-all"} <= linux
    assert "device-gfx1100" in windows and "device-gfx942" not in windows


def test_amd_index_answers_403_for_a_project_it_does_not_hold(replica: ReplicaServer) -> None:
    for index, status in (("amd", 403), ("pytorch-rocm714", 403), ("pypi", 404)):
        with pytest.raises(urllib.error.HTTPError) as err:
            # a project no index holds (numpy is on the replica's PyPI and whl-next)
            urllib.request.urlopen(replica.url(index) + "no-such-project/", timeout=5)
        assert err.value.code == status


# --- (a) a correct lock ---------------------------------------------------------------------


def test_amd_recipe_locks_exactly_the_env_device(uv: Uv, replica: ReplicaServer) -> None:
    replica.log.clear()
    result = _ok(
        uv(amd_recipe(["gfx1100"], LINUX, replica.url("amd"), torch="torch==2.12.0+rocm7.14.0"))
    )
    packages = result.packages()
    assert _devices(result) == GFX1100
    assert packages["torch"].version == "2.12.0+rocm7.14.0"
    for name in ("rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-device-gfx1100"):
        assert packages[name].version == "7.14.0"
    # Every ROCm-family file from AMD's index; nothing of PyPI's (no placeholder, no CUDA).
    family = {n for n in packages if ROCM_FAMILY.match(n)}
    assert _family_from(result, "amd") == family
    assert not any(n.startswith(("nvidia", "cuda")) for n in packages)
    # `rocm` is AMD's sdist (uv built it to read its dependencies); the rest are wheels.
    assert packages["rocm"].kinds == ("sdist",)
    assert packages["rocm-sdk-core"].filenames() == [
        "rocm_sdk_core-7.14.0-py3-none-linux_x86_64.whl"
    ]
    # The explicit index was asked only for the names pinned to it.
    asked = replica.log.projects("amd")
    assert "torch" in asked and asked <= set(amd_names(["gfx1100"]))


def test_pytorch_recipe_narrows_device_all_to_the_env_device(
    uv: Uv, replica: ReplicaServer
) -> None:
    result = _ok(
        uv(pytorch_recipe(["gfx1100"], LINUX, replica.url("pytorch-rocm714"), replica.url("amd")))
    )
    packages = result.packages()
    assert packages["torch"].version == "2.14.1+rocm7.14"
    assert _devices(result) == {"rocm-sdk-device-gfx1100"}
    assert _family_from(result, "pytorch-rocm714") == {"torch", "triton-rocm"}
    assert _family_from(result, "amd") == {
        "rocm",
        "rocm-sdk-core",
        "rocm-sdk-libraries",
        "rocm-sdk-device-gfx1100",
    }
    assert packages["rocm"].version == "7.14.0"
    assert not any(n.startswith(("nvidia", "cuda")) or n == "triton" for n in packages)


def test_without_the_override_torch_2_14_locks_every_device(
    uv: Uv, replica: ReplicaServer, catalog: Catalog
) -> None:
    """torch 2.14.1+rocm7.14 asks for rocm[device-all]: without narrowing, every target."""
    request = pytorch_recipe(["gfx1100"], LINUX, replica.url("pytorch-rocm714"), replica.url("amd"))
    result = _ok(uv(replace(request, overrides=())))
    expected = {f"rocm-sdk-device-{t}" for t in catalog.targets["linux"]}
    assert _devices(result) == expected and len(expected) > 20


# --- (b) the hazards, demonstrated --------------------------------------------------------------


def test_merging_amd_and_pypi_with_unsafe_best_match_locks_the_cuda_torch(
    uv: Uv, replica: ReplicaServer
) -> None:
    """No pins: AMD's index searched beside the default one, best version wins. PyPI's torch
    2.14.1 beats AMD's 2.12.0+rocm7.14.0, and uv only warns that it lacks the device extra."""
    request = CompileRequest(
        packages=("torch[device-gfx1100]", "rocm[libraries,device-gfx1100]"),
        platform=LINUX,
        searched=(SearchedIndex("amd", replica.url("amd")),),
        extra_args=("--index-strategy", "unsafe-best-match"),
    )
    result = _ok(uv(request))
    packages = result.packages()
    assert packages["torch"].version == "2.14.1" and packages["torch"].indexes() == {"pypi"}
    assert {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "cuda-toolkit"} <= set(packages)
    assert packages["triton"].indexes() == {"pypi"}  # the CUDA triton
    assert "amd-torch-device-gfx1100" not in packages


def test_an_unpinned_rocm_resolves_to_the_placeholder(uv: Uv, replica: ReplicaServer) -> None:
    """AMD's index is explicit but `rocm` is not pinned to it: PyPI's rocm 0.1.0 is locked, its
    missing extras only warned about (and --quiet, as envbuilder runs uv, hides even that)."""
    request = CompileRequest(
        packages=("rocm[libraries,device-gfx1100]",),
        platform=LINUX,
        explicit={"amd": replica.url("amd")},
    )
    result = _ok(uv(request))
    assert result.versions() == {"rocm": "0.1.0"}
    assert result.packages()["rocm"].indexes() == {"pypi"}
    assert result.stderr == ""


def test_an_override_drops_the_index_pin(uv: Uv, replica: ReplicaServer) -> None:
    """`rocm` pinned to AMD's index and narrowed by --override: the override replaces the
    pinned requirement, the pin goes with it, and PyPI's placeholder is all that is left."""
    pinned = CompileRequest(
        packages=("torch==2.14.1+rocm7.14", "triton-rocm", "rocm[libraries,device-gfx1100]"),
        platform=LINUX,
        explicit={"pytorch-rocm714": replica.url("pytorch-rocm714"), "amd": replica.url("amd")},
        pins={"torch": "pytorch-rocm714", "triton-rocm": "pytorch-rocm714", "rocm": "amd"},
    )
    exact = _ok(uv(replace(pinned, overrides=("rocm[libraries]",))))
    assert exact.versions()["rocm"] == "0.1.0" and exact.versions()["torch"] == "2.14.1+rocm7.14"
    versioned = uv(replace(pinned, overrides=(narrowed_rocm(["gfx1100"]),)))
    assert not versioned.ok and "rocm[libraries]==0.1.0" in versioned.stderr


def test_a_pin_of_a_name_that_is_not_a_dependency_is_ignored(
    uv: Uv, replica: ReplicaServer
) -> None:
    """Pinning only torch (or pinning the transitive names without listing them) leaves
    rocm==7.14.0 to the default index, which has only the placeholder."""
    request = amd_recipe(["gfx1100"], LINUX, replica.url("amd"), torch="torch==2.12.0+rocm7.14.0")
    only_torch = replace(request, packages=request.packages[:1])
    result = uv(only_torch)
    assert not result.ok and "rocm[libraries]==7.14.0" in result.stderr


def test_an_unlisted_family_wheel_under_an_explicit_index_has_no_solution(
    uv: Uv, replica: ReplicaServer
) -> None:
    """AMD's torch requires amd-torch-device-gfx11 == <its version> under device-gfx1100. With
    AMD's index `explicit` and that name not pinned, uv looks for it on the default index, which
    holds only PyPI's placeholder 0.0.1.dev0: no solution (what envbuilder's lock did before the
    pip SDK's index was searched first)."""
    request = amd_recipe(["gfx1100"], LINUX, replica.url("amd"), families=False)
    result = uv(request)
    assert not result.ok and "amd-torch-device-gfx11==" in result.stderr


def test_amd_searched_first_takes_every_name_it_serves_from_amd(
    uv: Uv, replica: ReplicaServer
) -> None:
    """AMD's index searched first (403 = not here), nothing pinned: the family wheel, the
    unversioned rocm-bootstrap (PyPI's replica holds 99.0.0) and every other name AMD serves
    come from AMD; only the pure-Python names come from the default index."""
    request = CompileRequest(
        packages=("torch[device-gfx1100]==2.12.0+rocm7.14.0", "rocm[libraries,device-gfx1100]"),
        platform=LINUX,
        searched=(SearchedIndex("amd", replica.url("amd"), (403,)),),
    )
    result = _ok(uv(request))
    family = {n for n in result.packages() if ROCM_FAMILY.match(n)}
    assert _family_from(result, "amd") == family and family >= GFX1100
    assert result.versions()["rocm-bootstrap"] == "1.0.0+replica"
    assert all(p.indexes() == {"pypi"} for n, p in result.packages().items() if n not in family)


def test_searching_amd_without_ignoring_403_stops_at_the_first_other_name(
    uv: Uv, replica: ReplicaServer
) -> None:
    request = pytorch_recipe(["gfx1100"], LINUX, replica.url("pytorch-rocm714"), replica.url("amd"))
    bare = replace(request, searched=(SearchedIndex("amd", replica.url("amd")),))
    result = uv(bare)
    assert not result.ok and "403" in result.stderr


def test_the_generic_device_extra_depends_on_the_machine_that_builds_rocm(
    uv: Uv, replica: ReplicaServer, tmp_path: Path
) -> None:
    """`rocm[device]` names whatever target the machine that builds the sdist detects
    (ROCM_SDK_TARGET_FAMILY here, else offload-arch, else a default), so a lock must name
    device-<target> extras. Fresh caches: uv caches the metadata it built."""
    request = CompileRequest(
        packages=("rocm[libraries,device]==7.14.0",),
        platform=LINUX,
        searched=(SearchedIndex("amd", replica.url("amd"), (403,)),),
    )
    seen = {}
    for n, family in enumerate(("gfx942", "")):
        env = {k: v for k, v in os.environ.items() if k != "ROCM_SDK_TARGET_FAMILY"}
        if family:
            env["ROCM_SDK_TARGET_FAMILY"] = family
        seen[family] = _devices(_ok(uv(request, cache=tmp_path / f"cache{n}", environ=env)))
    assert seen == {
        "gfx942": {"rocm-sdk-device-gfx942"},
        "": {"rocm-sdk-device-gfx1010"},
    }  # the data's DEFAULT_TARGET_FAMILY


# --- (c) one spec, Linux and Windows ---------------------------------------------------------


def test_the_same_amd_recipe_locks_win_amd64_wheels_for_windows(
    uv: Uv, replica: ReplicaServer
) -> None:
    linux = _ok(uv(amd_recipe(["gfx1100"], LINUX, replica.url("amd"))))
    windows = _ok(uv(amd_recipe(["gfx1100"], WINDOWS, replica.url("amd"))))
    # the same names but triton, which TheRock builds (and AMD's torch requires) on Linux only
    assert set(linux.packages()) - set(windows.packages()) == {"triton"}
    assert set(windows.packages()) <= set(linux.packages())
    assert _devices(windows) == GFX1100
    for name, pkg in windows.packages().items():
        for filename, kind in zip(pkg.filenames(), pkg.kinds, strict=True):
            assert kind == "sdist" or filename.endswith(("-win_amd64.whl", "-any.whl")), name
    assert windows.packages()["torch"].filenames() == [
        "torch-2.12.0+rocm7.14.0-cp312-cp312-win_amd64.whl"
    ]


def test_pytorch_index_has_no_windows_torch_so_recipe_b_fails_loudly(
    uv: Uv, replica: ReplicaServer
) -> None:
    result = uv(
        pytorch_recipe(["gfx1100"], WINDOWS, replica.url("pytorch-rocm714"), replica.url("amd"))
    )
    assert not result.ok and "torch" in result.stderr


def test_merged_indexes_lock_pypi_torch_for_windows_from_a_rocm_spec(
    uv: Uv, replica: ReplicaServer
) -> None:
    """pip-style: PyTorch's rocm7.14 index searched beside the default one, best match. On Linux
    that gives the ROCm torch (with every device: nothing narrows device-all); on Windows,
    where that index has no wheel, PyPI's torch, silently."""
    request = CompileRequest(
        packages=("torch==2.14.1",),
        platform=WINDOWS,
        searched=(SearchedIndex("pytorch", replica.url("pytorch-rocm714")),),
        extra_args=("--index-strategy", "unsafe-best-match"),
    )
    windows = _ok(uv(request))
    assert windows.packages()["torch"].indexes() == {"pypi"}
    linux = _ok(uv(replace(request, platform=LINUX)))
    assert linux.versions()["torch"] == "2.14.1+rocm7.14" and len(_devices(linux)) > 20


# --- (d) several devices --------------------------------------------------------------------


def test_two_devices_give_both_device_packages(uv: Uv, replica: ReplicaServer) -> None:
    amd = _ok(uv(amd_recipe(["gfx1100", "gfx942"], LINUX, replica.url("amd"))))
    assert _devices(amd) == GFX1100 | {"rocm-sdk-device-gfx942", "amd-torch-device-gfx942"}
    pytorch = _ok(
        uv(
            pytorch_recipe(
                ["gfx1100", "gfx942"], LINUX, replica.url("pytorch-rocm714"), replica.url("amd")
            )
        )
    )
    assert _devices(pytorch) == {"rocm-sdk-device-gfx1100", "rocm-sdk-device-gfx942"}


# --- --upgrade-package --------------------------------------------------------------------------


def test_upgrade_package_torch_moves_torch_and_keeps_the_rest(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Round 1 has torch 2.11.0+rocm7.14.0 and filelock 3.20.3; round 2 publishes torch
    2.12.0+rocm7.14.0 and filelock 3.21.0. The first lock, handed back as uv's output file, is
    read as preferences. uv keeps a preference of a package pinned to a named index only when
    the pylock entry names that index (`index = ...`), which `uv pip compile` does not write:
    without it the pinned torch floats to 2.12.0 on a plain relock."""
    with serve(catalog, tmp_path / "replica", round_=1) as server:
        run = Uv(server, tmp_path)
        request = amd_recipe(["gfx1100"], LINUX, server.url("amd"))
        first = _ok(run(request))
        before = first.versions()
        assert (before["torch"], before["filelock"]) == ("2.11.0+rocm7.14.0", "3.20.3")
        assert first.pylock_text is not None and "\nindex = " not in first.pylock_text
        server.publish(2)
        fresh = _ok(run(request, cache=tmp_path / "fresh"))  # control: round 2 is served
        assert (fresh.versions()["torch"], fresh.versions()["filelock"]) == (
            "2.12.0+rocm7.14.0",
            "3.21.0",
        )

        def changed(result: CompileResult) -> set[str]:
            return {n for n, v in _ok(result).versions().items() if before.get(n) != v}

        plain = run(request, previous=first.pylock_text, cache=tmp_path / "c1")
        assert changed(plain) == MOVED  # the hazard
        marked = with_index(first.pylock_text, dict.fromkeys(request.pins, server.url("amd")))
        assert changed(run(request, previous=marked, cache=tmp_path / "c2")) == set()
        upgrade = replace(request, upgrade_packages=("torch",))
        moved = run(upgrade, previous=marked, cache=tmp_path / "c3")
        assert changed(moved) == MOVED
        assert moved.versions()["torch"] == "2.12.0+rocm7.14.0"
        assert moved.versions()["filelock"] == "3.20.3"


# --- envbuilder's own resolver on recipe A ---------------------------------------------------


def test_envbuilder_run_uv_locks_recipe_a_with_canonical_urls(
    replica: ReplicaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """envbuilder.lock.uv as it is: packages + index_pins of recipe A, AMD's index mirrored by
    the replica. The lock names AMD's canonical URLs and holds only the env's device."""
    recipe = amd_recipe(["gfx1100"], LINUX, replica.url("amd"))
    monkeypatch.setenv("ENVBUILDER_DEFAULT_INDEX", replica.url("pypi"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    indexes = {"amd": Index("amd", AMD_CANONICAL, mirror=replica.url("amd"))}
    request, warnings = make_request(
        LINUX, "3.12", recipe.packages, dict(recipe.pins), indexes, tmp_path, environ={}
    )
    assert warnings == []
    text = postprocess(run_uv(request), request, "").decode()
    urls = re.findall(r'url = "([^"]+)"', text)
    family = [u for u in urls if ROCM_FAMILY.match(u.rsplit("/", 1)[-1].replace("_", "-"))]
    assert family and all(u.startswith(AMD_CANONICAL) for u in family)
    assert f"{AMD_CANONICAL}rocm-7.14.0.tar.gz" in family
    assert [u for u in family if "device_gfx" in u] == [
        f"{AMD_CANONICAL}amd_torch_device_gfx11-2.12.0%2Brocm7.14.0-cp312-cp312-"
        "manylinux_2_28_x86_64.whl",
        f"{AMD_CANONICAL}amd_torch_device_gfx1100-2.12.0%2Brocm7.14.0-cp312-cp312-"
        "manylinux_2_28_x86_64.whl",
        f"{AMD_CANONICAL}rocm_sdk_device_gfx1100-7.14.0-py3-none-linux_x86_64.whl",
    ]


def test_envbuilder_relock_keeps_torch_until_it_is_upgraded(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hazard of test_upgrade_package_torch_moves_torch_and_keeps_the_rest, through
    envbuilder.lock.uv: round 1 is locked (AMD's index mirrored by the replica), round 2 is
    published, and the committed pylock is handed back to uv. A relock keeps torch 2.11 (uvrun
    names the mirror as each pinned entry's `index`); `--upgrade-package torch` moves torch and
    its device package only. The committed pylocks name AMD's canonical index. Each uv run has
    its own cache, so none reads round 1's pages from a cache."""
    caches = itertools.count()

    def resolve(previous: bytes | None = None, upgrade: tuple[str, ...] = ()) -> bytes:
        monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / f"cache{next(caches)}"))
        return postprocess(run_uv(request, previous, upgrade_packages=upgrade), request, "")

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with serve(catalog, tmp_path / "replica", round_=1) as server:
        monkeypatch.setenv("ENVBUILDER_DEFAULT_INDEX", server.url("pypi"))
        recipe = amd_recipe(["gfx1100"], LINUX, server.url("amd"))
        indexes = {"amd": Index("amd", AMD_CANONICAL, mirror=server.url("amd"))}
        request, _ = make_request(
            LINUX, "3.12", recipe.packages, dict(recipe.pins), indexes, tmp_path, environ={}
        )

        def versions(pylock: bytes) -> dict[str, str]:
            doc = tomllib.loads(pylock.decode())
            assert {p["index"] for p in doc["packages"] if p["name"] in recipe.pins} == {
                AMD_CANONICAL
            }
            return {p["name"]: p["version"] for p in doc["packages"]}

        first = resolve()
        before = versions(first)
        assert before["torch"] == "2.11.0+rocm7.14.0"
        server.publish(2)
        assert versions(resolve())["torch"] == "2.12.0+rocm7.14.0"  # control: round 2 served
        assert versions(resolve(first)) == before
        moved = versions(resolve(first, ("torch",)))
        assert moved["torch"] == "2.12.0+rocm7.14.0"
        assert {n for n, v in moved.items() if before.get(n) != v} == MOVED

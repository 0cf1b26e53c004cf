"""The shipped flagship env (rocm714: ROCm 7.14.1's pip SDK, RX 7900 XTX) locked for real by
`envbuilder lock` against the replica of AMD's index (tests/replica, round 3 holds 7.14.1): a copy
of environments.toml whose AMD index gets the replica as its mirror, so the lock records AMD's
canonical URLs exactly as a lock made against the real index would.

What it shows: the pylocks hold exactly the env's device packages, every ROCm-family name from
AMD's index (no PyPI placeholder, no CUDA torch), Linux and Windows pylocks come from the one
spec, `--upgrade-package torch` keeps the rest, the wsl2 target's librocdxg .deb is pinned in
the env lock, and the rendered Dockerfile, .wsl Dockerfile and setup.ps1 install from those
pylocks. Offline: nothing leaves 127.0.0.1."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replica.catalog import Catalog, load_catalog
from replica.server import ReplicaServer, serve

from envbuilder.commands._cli import main
from envbuilder.core.compatload import load_compat
from envbuilder.lock import uv

REPO = Path(__file__).resolve().parents[2]
AMD = "https://repo.amd.com/rocm/whl-multi-arch/"
AMD_NEXT = "https://stable.repo.amd.com/rocm/whl-next/"
ROCM_FAMILY = re.compile(r"^(rocm|torch|triton|amd-torch)")
# gfx1100's device wheels: the SDK's, torch's, and torch's family wheel of the gfx11 targets,
# which AMD's torch requires under device-gfx1100 and envbuilder does not list (rocm.toml
# [pip_sdk]): uv finds it on AMD's index, searched first; PyPI's placeholder is never taken.
DEVICES = {"rocm-sdk-device-gfx1100", "amd-torch-device-gfx1100", "amd-torch-device-gfx11"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture()
def replica(catalog: Catalog, tmp_path: Path) -> Iterator[ReplicaServer]:
    with serve(catalog, tmp_path / "replica", round_=3) as server:
        yield server


# An env the shipped spec does not have: an RX 7900 XTX on ROCm Core SDK 10.1.0, whose torch
# requires the sub-family wheel amd-torch-device-gfx110x, a name envbuilder lists nowhere.
NEXT_1100 = """
[env.next1100]
accelerator = "rocm"
rocm = "10.1.0"
gpu = "gfx1100"
python = "3.12"
packages = ["torch==2.14.0+rocm10.1.0"]
index_pins = { torch = "amd-rocm-next" }
targets = ["docker"]
"""


def spec_text(replica: ReplicaServer) -> str:
    """The shipped spec, AMD's two indexes mirrored by the replica, plus NEXT_1100."""
    text = (REPO / "environments.toml").read_text(encoding="utf-8")
    for canonical, index in ((AMD, "amd"), (AMD_NEXT, "amd-next")):
        old = f'url = "{canonical}"\n'
        assert text.count(old) == 1
        text = text.replace(old, f'{old}mirror = "{replica.url(index)}"\n')
    return text + NEXT_1100


@pytest.fixture()
def project(replica: ReplicaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped spec, AMD's indexes mirrored by the replica, PyPI played by it."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "environments.toml").write_text(spec_text(replica), encoding="utf-8")
    monkeypatch.setenv("ENVBUILDER_DEFAULT_INDEX", replica.url("pypi"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    return root / "environments.toml"


def lock(spec: Path, *extra: str, env: str = "rocm714") -> None:
    assert main(["lock", "--spec", str(spec), "--env", env, "--no-base-digest", *extra]) == 0


def pylock(spec: Path, target: str, env: str = "rocm714") -> dict[str, Any]:
    path = spec.parent / "lockfiles" / f"pylock.{env}-{target}.toml"
    return tomllib.loads(path.read_text(encoding="utf-8"))


def pylock_bytes(spec: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((spec.parent / "lockfiles").iterdir())}


def assert_from(index: str, pkgs: dict[str, dict[str, Any]]) -> None:
    """Every ROCm-family entry names `index` and has its files there."""
    family = {n: p for n, p in pkgs.items() if ROCM_FAMILY.match(n)}
    assert family
    for name, pkg in family.items():
        assert pkg["index"] == index and all(u.startswith(index) for u in files(pkg)), name


def packages(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["packages"]}


def files(pkg: dict[str, Any]) -> list[str]:
    arts = ([pkg["sdist"]] if "sdist" in pkg else []) + pkg.get("wheels", [])
    return [a["url"] for a in arts]


def test_flagship_locks_its_device_packages_from_amds_index(project: Path) -> None:
    lock(project)
    for target in ("docker", "wsl2", "windows"):
        pkgs = packages(pylock(project, target))
        assert {n for n in pkgs if "device-gfx" in n} == DEVICES, target
        assert pkgs["torch"]["version"] == "2.12.0+rocm7.14.1"
        for name in (
            "rocm",
            "rocm-sdk-core",
            "rocm-sdk-libraries",
            "rocm-sdk-devel",
            "rocm-sdk-device-gfx1100",
        ):
            assert pkgs[name]["version"] == "7.14.1", (target, name)
        # every ROCm-family name from AMD's index, recorded by its canonical URLs: no PyPI
        # placeholder (rocm 0.1.0, rocm-sdk-*), no CUDA torch or triton
        family = {n: p for n, p in pkgs.items() if ROCM_FAMILY.match(n)}
        assert_from(AMD, pkgs)
        assert set(family) == {
            "rocm",
            "rocm-bootstrap",
            "rocm-sdk-core",
            "rocm-sdk-libraries",
            "rocm-sdk-devel",
            "torch",
            # TheRock builds triton for Linux only (its Windows torch does not require one)
            *(["triton"] if target != "windows" else []),
            *DEVICES,
        }
        assert not any(n.startswith(("nvidia", "cuda")) for n in pkgs), target
        # (the other names come from the default index, here the replica's stand-in of PyPI)
    # one spec, two platforms: the Windows pylock holds the win_amd64 wheels
    windows = packages(pylock(project, "windows"))
    for name, pkg in windows.items():
        for url in files(pkg):
            assert url.endswith(("-win_amd64.whl", "-any.whl", ".tar.gz")), (name, url)
    assert files(windows["torch"]) == [f"{AMD}torch-2.12.0%2Brocm7.14.1-cp312-cp312-win_amd64.whl"]
    assert files(packages(pylock(project, "docker"))["torch"]) == [
        f"{AMD}torch-2.12.0%2Brocm7.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    ]


def test_upgrade_package_torch_keeps_the_rest(project: Path, replica: ReplicaServer) -> None:
    lock(project)
    before = {t: pylock(project, t) for t in ("docker", "windows")}
    assert packages(before["docker"])["filelock"]["version"] == "3.21.0"
    replica.publish(4)  # a newer filelock appears on the default index
    lock(project, "--upgrade-package", "torch")
    for target, doc in before.items():
        assert pylock(project, target)["packages"] == doc["packages"], target
    lock(project, "--upgrade")  # control: the newer filelock is served
    assert packages(pylock(project, "docker"))["filelock"]["version"] == "3.22.0"


def test_rendered_files_install_from_those_pylocks(project: Path) -> None:
    lock(project)
    env_lock = tomllib.loads((project.parent / "lockfiles" / "rocm714.lock.toml").read_text())
    lib = load_compat().librocdxg_for(load_compat().rocm("7.14.1"))  # type: ignore[arg-type]
    assert lib is not None and lib.sha256
    assert env_lock["targets"]["wsl2"]["system_file"] == f"{lib.url}#sha256={lib.sha256}"
    assert "system_file" not in env_lock["targets"]["docker"]
    assert main(["render", "--spec", str(project), "--env", "rocm714"]) == 0
    root = project.parent
    docker = (root / "dockerfiles" / "rocm714" / "Dockerfile").read_text()
    wsl = (root / "wsl" / "rocm714" / "Dockerfile").read_text()
    setup = (root / "windows" / "rocm714" / "setup.ps1").read_text()
    for text, target in ((docker, "docker"), (wsl, "wsl2")):
        sha = env_lock["targets"][target]["pylock_sha256"]
        assert "NOT LOCKED" not in text
        assert f'org.opencontainers.image.version="{sha}"' in text  # built from that pylock
        assert "-r /tmp/envbuilder/requirements.txt" in text
        assert "FROM ubuntu:24.04" in text and "amdgpu-install" not in text
        assert "rocm/dev-ubuntu" not in text
        assert "ROCM_PATH" in text and '/opt/rocm"' not in text
        assert 'rocm-sdk" path --root' in text or "rocm-sdk path --root" in text
    assert f"{lib.sha256}  /tmp/{lib.deb}" in wsl and "HSA_ENABLE_DXG_DETECTION" not in wsl
    windows_sha = env_lock["targets"]["windows"]["pylock_sha256"]
    assert "pylock.rocm714-windows.toml" in setup and windows_sha in setup
    assert "HIP_PATH" not in setup.split("<#", 1)[0]


def test_hostile_uv_settings_change_nothing(
    project: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A developer machine's uv settings: UV_INDEX_URL, UV_EXTRA_INDEX_URL and UV_INDEX at
    another index (a later round of the replica's PyPI: a newer filelock), a best-match index
    strategy, pre-releases, find-links. envbuilder runs uv without them, so the pylocks are
    byte-identical to a clean run's; uv itself, given them, locks the newer filelock."""
    lock(project)
    clean = pylock_bytes(project)
    assert packages(pylock(project, "docker"))["filelock"]["version"] == "3.21.0"
    with serve(catalog, tmp_path / "elsewhere", round_=4) as other:
        hostile = {
            "UV_INDEX_URL": other.url("pypi"),
            "UV_EXTRA_INDEX_URL": other.url("pypi"),
            "UV_INDEX": f"evil={other.url('pypi')}",
            "UV_INDEX_STRATEGY": "unsafe-best-match",
            "UV_PRERELEASE": "allow",
            "UV_FIND_LINKS": str(tmp_path),
        }
        for name, value in hostile.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "another-cache"))  # kept: a cache
        for target in ("docker", "wsl2", "windows"):  # resolve every target again
            (project.parent / "lockfiles" / f"pylock.rocm714-{target}.toml").unlink()
        lock(project)
        assert pylock_bytes(project) == clean
        # control: the same settings do change what uv picks when they reach it
        monkeypatch.setattr(uv, "UV_PASSTHROUGH", uv.UV_PASSTHROUGH | set(hostile))
        (project.parent / "lockfiles" / "pylock.rocm714-docker.toml").unlink()
        lock(project)
        assert packages(pylock(project, "docker"))["filelock"]["version"] == "3.22.0"


def test_mi300x_locks_rocm_10_1_from_amds_whl_next(project: Path) -> None:
    """The shipped datacenter env (ROCm Core SDK 10.1.0, MI300X) against the replica of AMD's
    stable whl-next: gfx942's device wheels only (whl-next has no gfx9 family torch wheel),
    every ROCm-family name from whl-next."""
    lock(project, env="mi300x")
    for target in ("docker", "native"):
        pkgs = packages(pylock(project, target, "mi300x"))
        assert {n for n in pkgs if "device-gfx" in n} == {
            "rocm-sdk-device-gfx942",
            "amd-torch-device-gfx942",
        }
        assert pkgs["torch"]["version"] == "2.14.0+rocm10.1.0"
        assert pkgs["rocm"]["version"] == pkgs["rocm-sdk-core"]["version"] == "10.1.0"
        assert_from(AMD_NEXT, pkgs)


def test_a_device_wheel_envbuilder_does_not_list_comes_from_amd(project: Path) -> None:
    """gfx1100 on 10.1.0: AMD's torch requires amd-torch-device-gfx110x, which no list of
    envbuilder names and PyPI's replica holds as a placeholder (0.0.1.dev0); the lock takes
    AMD's, records it by whl-next's canonical URL, and keeps it on a relock."""
    lock(project, env="next1100")
    pkgs = packages(pylock(project, "docker", "next1100"))
    assert {n for n in pkgs if "device-gfx" in n} == {
        "rocm-sdk-device-gfx1100",
        "amd-torch-device-gfx1100",
        "amd-torch-device-gfx110x",
    }
    assert pkgs["amd-torch-device-gfx110x"]["version"] == "2.14.0+rocm10.1.0"
    assert_from(AMD_NEXT, pkgs)
    before = pylock_bytes(project)
    lock(project, "--upgrade-package", "filelock", env="next1100")
    assert pylock_bytes(project) == before


# TheRock's update_dependencies.py PACKAGES_PER_PROJECT (tests/data/replica/SOURCES.md S23) as
# torch's metadata here requires them: AMD's copies of PyPI's files on whl-next.
MIRRORED_DEPS = {
    "filelock",
    "fsspec",
    "jinja2",
    "networkx",
    "setuptools",
    "sympy",
    "typing-extensions",
}


def test_mi300x_locks_through_a_folder_mirror_of_whl_next(
    project: Path, replica: ReplicaServer, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """whl-next serves AMD's copies of torch's pure dependencies (TheRock's own mirroring made
    the replica's); searched first, they come from AMD. Through a folder mirror of whl-next the
    lock records them, like the family, by whl-next's canonical URL and `index`, with PyPI's
    hashes (the copies are byte-identical): every package of this lock comes from AMD."""
    folder = replica.root / "amd-next" / "files"  # a flat folder of every whl-next file
    monkeypatch.setenv("ENVBUILDER_MIRROR_AMD_ROCM_NEXT", str(folder))
    lock(project, env="mi300x")
    pypi = {f.filename: f for f in catalog.files_of("pypi", 3)}
    for target in ("docker", "native"):
        pkgs = packages(pylock(project, target, "mi300x"))
        assert_from(AMD_NEXT, pkgs)
        from_amd = {n for n, p in pkgs.items() if p.get("index") == AMD_NEXT}
        assert from_amd - {n for n in pkgs if ROCM_FAMILY.match(n)} == MIRRORED_DEPS, target
        for name in MIRRORED_DEPS:
            (url,) = files(pkgs[name])
            filename = url.removeprefix(AMD_NEXT)
            assert filename in pypi and "/" not in filename, url
            sha = pkgs[name]["wheels"][0]["hashes"]["sha256"]
            assert sha == hashlib.sha256(pypi[filename].data).hexdigest(), name
        assert from_amd == set(pkgs), target
        text = (project.parent / "lockfiles" / f"pylock.mi300x-{target}.toml").read_text()
        assert str(folder) not in text and "file:" not in text


def test_a_family_name_from_the_default_index_is_still_refused(
    project: Path,
    replica: ReplicaServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A folder mirror of whl-next that lacks rocm-bootstrap (a ROCm-family name AMD's torch
    requires unversioned and envbuilder does not list): uv finds only the default index's
    (the replica's hostile 99.0.0), so the lock is refused, naming it and where it came from,
    and nothing is written. The copies of PyPI's files beside it change nothing here."""
    folder = tmp_path / "partial"
    folder.mkdir()
    for f in (replica.root / "amd-next" / "files").iterdir():
        if not f.name.startswith("rocm_bootstrap-"):
            (folder / f.name).write_bytes(f.read_bytes())
    monkeypatch.setenv("ENVBUILDER_MIRROR_AMD_ROCM_NEXT", str(folder))
    capsys.readouterr()
    assert main(["lock", "--spec", str(project), "--env", "mi300x", "--no-base-digest"]) == 1
    err = capsys.readouterr().err
    assert "the lock is refused" in err, err
    hostile = replica.file_url("pypi", "rocm_bootstrap-99.0.0-py3-none-any.whl")
    assert f"rocm-bootstrap 99.0.0 ({hostile})" in err, err
    assert not (project.parent / "lockfiles").exists()

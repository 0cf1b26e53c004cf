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

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replica.catalog import Catalog, load_catalog
from replica.server import ReplicaServer, serve

from envbuilder.cli import main
from envbuilder.compat import load_compat

REPO = Path(__file__).resolve().parents[1]
AMD = "https://repo.amd.com/rocm/whl-multi-arch/"
ROCM_FAMILY = re.compile(r"^(rocm|torch|triton|amd-torch)")
DEVICES = {"rocm-sdk-device-gfx1100", "amd-torch-device-gfx1100"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture()
def replica(catalog: Catalog, tmp_path: Path) -> Iterator[ReplicaServer]:
    with serve(catalog, tmp_path / "replica", round_=3) as server:
        yield server


@pytest.fixture()
def project(replica: ReplicaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped spec, AMD's index mirrored by the replica, PyPI played by it."""
    text = (REPO / "environments.toml").read_text(encoding="utf-8")
    old = f'url = "{AMD}"\n'
    assert text.count(old) == 1
    root = tmp_path / "proj"
    root.mkdir()
    (root / "environments.toml").write_text(
        text.replace(old, f'{old}mirror = "{replica.url("amd")}"\n'), encoding="utf-8"
    )
    monkeypatch.setenv("UV_DEFAULT_INDEX", replica.url("pypi"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    return root / "environments.toml"


def lock(spec: Path, *extra: str) -> None:
    assert main(["lock", "--spec", str(spec), "--env", "rocm714", "--no-base-digest", *extra]) == 0


def pylock(spec: Path, target: str) -> dict[str, Any]:
    path = spec.parent / "lockfiles" / f"pylock.rocm714-{target}.toml"
    return tomllib.loads(path.read_text(encoding="utf-8"))


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
        assert set(family) == {
            "rocm",
            "rocm-bootstrap",
            "rocm-sdk-core",
            "rocm-sdk-libraries",
            "rocm-sdk-devel",
            "torch",
            "triton",
            *DEVICES,
        }
        for name, pkg in family.items():
            assert pkg["index"] == AMD and all(u.startswith(AMD) for u in files(pkg)), name
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

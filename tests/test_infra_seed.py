"""The reproducible base-image seed (.ci/seed_image.py) and `envbuilder lock --refresh-base`.

The seed must give the same repository digest on every machine, so that the digest committed in
lockfiles/cpu.lock.toml can be pulled wherever `.ci/services.sh` seeded the registry: two
normalizations of trees that differ only in what records the run give identical bytes, and the
registry serves exactly the bytes the script wrote (checked again from the served layer).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import service_missing
from test_lock_support import FAKE_INDEX_URL, make_wheel, write_spec

from envbuilder.commands._cli import main
from envbuilder.lock.lockfile import read_env_lock

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("ENVBUILDER_CI_STATE", "/var/lib/envbuilder-ci"))
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def _seed_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("seed_image", ROOT / ".ci" / "seed_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["seed_image"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


seed = _seed_module()


def _fake_debootstrap(root: Path, day: int, salt: str) -> Path:
    """A small tree with what a debootstrap run leaves behind; `day`/`salt` stand for the run."""
    files = {
        "etc/shadow": f"root:*:{day}:0:99999:7:::\nnobody:*:{day}:0:99999:7:::\n",
        "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
        "usr/bin/tool": "#!/bin/sh\necho tool\n",
        "var/log/dpkg.log": f"{salt} install base-files\n",
        "var/log/wtmp": salt,
        "var/cache/ldconfig/aux-cache": salt,
        "var/cache/debconf/config.dat-old": salt,
        "var/lib/dpkg/status-old": salt,
        "var/lib/dpkg/status": "Package: base-files\n",
        "dev/null": "",  # a device node in a real tree; the runtime provides /dev
    }
    for i, (rel, text) in enumerate(sorted(files.items(), reverse=salt == "b")):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000 + i * 7 + len(salt), 1_700_000_000 + i * 13))
    (root / "usr/bin/tool").chmod(0o755)
    (root / "bin").symlink_to("usr/bin")
    os.link(root / "usr/bin/tool", root / "usr/bin/tool2")
    return root


def test_two_normalized_runs_give_identical_image_bytes(tmp_path: Path) -> None:
    # Two "runs" on different days, created in different orders with different mtimes.
    trees = [
        _fake_debootstrap(tmp_path / "a", 20_000, "a"),
        _fake_debootstrap(tmp_path / "b", 20_789, "b"),
    ]
    blobs = []
    for tree in trees:
        seed.normalize(tree)
        out = tmp_path / f"out-{tree.name}"
        out.mkdir()
        blobs.append(seed.build_image(tree, out))
    assert [b.digest for b in blobs[0]] == [b.digest for b in blobs[1]]

    tree = trees[0]
    for gone in (
        "var/log/dpkg.log",
        "var/cache/ldconfig/aux-cache",
        "dev/null",
        "var/cache/debconf/config.dat-old",
        "var/lib/dpkg/status-old",
    ):
        assert not (tree / gone).exists(), gone
    assert (tree / "var/log/wtmp").read_bytes() == b""
    day = seed.SOURCE_DATE_EPOCH // 86400
    assert (tree / "etc/shadow").read_text().splitlines()[0] == f"root:*:{day}:0:99999:7:::"

    layer, config, manifest = blobs[0]
    with tarfile.open(layer.path) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert {m.mtime for m in members} == {seed.SOURCE_DATE_EPOCH}
    assert {(m.uname, m.gname) for m in members} == {("", "")}
    assert next(m for m in members if m.name == "usr/bin/tool2").islnk()
    with layer.path.open("rb") as fh:
        header = fh.read(10)
    assert header[:2] == b"\x1f\x8b" and header[4:8] == b"\0\0\0\0"  # gzip, mtime 0
    doc = json.loads(config.path.read_bytes())
    assert doc["created"] == seed.CREATED and doc["config"]["Cmd"] == ["bash"]
    assert json.loads(manifest.path.read_bytes())["config"]["digest"] == config.digest


def _served_digest(registry: str, name: str, tag: str) -> str:
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": MANIFEST_TYPE},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def seed_dir() -> Path:
    folder = STATE_DIR / "seed"
    if not (folder / "manifest.json").is_file():
        service_missing(f"no seed files in {folder}: .ci/services.sh writes them")
    return folder


@pytest.mark.docker
@pytest.mark.slow
def test_served_base_image_is_the_seed_scripts_output(
    tmp_path: Path, seed_dir: Path, registry: str, docker_client: Any
) -> None:
    manifest = json.loads((seed_dir / "manifest.json").read_bytes())
    assert _served_digest(registry, "library/debian", "bookworm-slim") == _sha256(
        seed_dir / "manifest.json"
    )
    assert manifest["config"]["digest"] == _sha256(seed_dir / "config.json")
    assert manifest["layers"][0]["digest"] == _sha256(seed_dir / "layer.tar.gz")
    assert docker_client.images.get("debian:bookworm-slim").id == manifest["config"]["digest"]

    # The layer is a fixed point of the script: unpacked and written again, the same tar.
    if os.geteuid() != 0:
        pytest.skip("unpacking the seed with its owners needs root (CI runs as root)")
    tree = tmp_path / "rootfs"
    with tarfile.open(seed_dir / "layer.tar.gz") as tar:
        tar.extractall(tree, numeric_owner=True, filter="fully_trusted")
    seed.normalize(tree)
    seed.write_layer(tree, tmp_path / "again.tar")
    diff_id = json.loads((seed_dir / "config.json").read_bytes())["rootfs"]["diff_ids"][0]
    assert _sha256(tmp_path / "again.tar") == diff_id


@pytest.mark.docker
def test_committed_cpu_lock_pins_this_workplaces_seed(seed_dir: Path, registry: str) -> None:
    pinned = read_env_lock(ROOT / "lockfiles" / "cpu.lock.toml").targets["docker"].base_image
    served = _sha256(seed_dir / "manifest.json")
    assert pinned == f"debian:bookworm-slim@{served}", (
        "the seed no longer matches the lock (Debian's archive moved on?): re-pin with "
        "`envbuilder lock --env cpu --refresh-base && envbuilder render --env cpu`"
    )


def _tiny_image(tmp_path: Path, registry: str, name: str, text: str, docker_client: Any) -> str:
    """A small image pushed as NAME:v1, its repository digest returned. It is built on the
    seeded Debian base: `lock` resolves the plan's apt packages in a container of the base
    (docs/reproducibility.md), so the base needs a shell and apt like any real one."""
    context = tmp_path / f"context-{text}"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM debian:bookworm-slim\nRUN echo {text} > /etc/release\n", encoding="utf-8"
    )
    ref = f"{registry}/{name}"
    docker_client.images.build(path=str(context), tag=f"{ref}:v1", network_mode="host", rm=True)
    docker_client.images.push(ref, tag="v1")
    return str(docker_client.images.get_registry_data(f"{ref}:v1").id)


def test_refresh_base_re_reads_the_digest_only(
    tmp_path: Path, registry: str, docker_client: Any
) -> None:
    name = "envbuilder-test/refresh-base"
    first = _tiny_image(tmp_path, registry, name, "one", docker_client)
    make_wheel(tmp_path / "mirror", "tinytorch", "1.0+cpu")
    project = write_spec(
        tmp_path / "proj",
        f"""
[indexes.fake]
url = "{FAKE_INDEX_URL}"
mirror = "{tmp_path / "mirror"}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu"]
index_pins = {{ tinytorch = "fake" }}
targets = ["docker"]

[env.small.docker]
base = "{registry}/{name}:v1"
""",
    )

    def lock(*args: str) -> int:
        return main(["-q", "lock", "--spec", str(project.spec_path), *args])

    def pinned() -> str | None:
        return read_env_lock(project.env_lock("small")).targets["docker"].base_image

    assert lock() == 0
    assert pinned() == f"{registry}/{name}:v1@{first}"
    pylock = project.pylock("small", "docker")
    os.utime(pylock, ns=(1_000_000_000, 1_000_000_000))
    before = (pylock.read_bytes(), pylock.stat().st_mtime_ns)

    second = _tiny_image(
        tmp_path, registry, name, "two", docker_client
    )  # the tag now names another image
    assert second != first
    assert lock() == 0 and pinned() == f"{registry}/{name}:v1@{first}"  # known digest kept
    assert lock("--refresh-base") == 0
    assert pinned() == f"{registry}/{name}:v1@{second}"
    assert (pylock.read_bytes(), pylock.stat().st_mtime_ns) == before  # nothing re-resolved
    assert lock("--check") == 0
    assert main(["lock", "--spec", str(project.spec_path), "--check", "--refresh-base"]) == 2

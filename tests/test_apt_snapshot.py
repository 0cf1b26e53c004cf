"""apt reads Debian's snapshot archive of the lock's time (envbuilder.aptsnapshot,
envbuilder/data/apt.toml), so every pinned version stays installable.

The live snapshot archive (snapshot.debian.org) is unreachable from this project's machines, so
the builds here go to .ci/apt_snapshot.py's replica on 127.0.0.1: Debian's own signed InRelease
and Packages files (from the machine's Debian mirror, hash-checked) and only the pinned .debs,
reached through
ENVBUILDER_APT_PROXY as apt's http proxy. The image built that way is the one the lock predicts
(`build --verify`), and a replica lacking one pinned .deb fails the build with a message naming
it. Markers: docker, network (the replica copies from the machine's Debian mirror), slow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from shipped import rendered_folders

from envbuilder import aptsnapshot
from envbuilder.lockfile import read_env_lock

REPO = Path(__file__).resolve().parent.parent
REPLICA = REPO / ".ci" / "apt_snapshot.py"
LOCK = REPO / "lockfiles" / "cpu.lock.toml"


def _copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True)
    shutil.copy2(REPO / "environments.toml", dest / "environments.toml")
    for folder in ("lockfiles", *rendered_folders()):
        shutil.copytree(REPO / folder, dest / folder)
    return dest


class Replica:
    """A replica built from the shipped locks and served on a free port; `served()`: the .debs
    apt downloaded from it."""

    def __init__(
        self, root: Path, leave_out: tuple[str, ...] = (), serve_prefix: list[str] | None = None
    ) -> None:
        """Build the replica (on this machine's network) and serve it, in the network
        namespace `serve_prefix` enters (`ip netns exec NAME`) when given."""
        self.root, self.log = root / "replica", root / "served.log"
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envbuilder-test"
        subprocess.run(
            [sys.executable, str(REPLICA), "build", "--lock", str(LOCK), "--out", str(self.root)]
            + ["--cache", str(cache / "apt-debs")]
            + [a for item in leave_out for a in ("--leave-out", item)],
            check=True,
            timeout=600,
        )
        self.process = subprocess.Popen(
            [
                *(serve_prefix or []),
                *(sys.executable, str(REPLICA), "serve", str(self.root), "--log", str(self.log)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().strip()}"

    def served(self) -> set[str]:
        lines = self.log.read_text(encoding="utf-8").split() if self.log.is_file() else []
        return set(lines)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    served = Replica(tmp_path)
    try:
        yield served
    finally:
        served.stop()


def _pins(target: str) -> dict[str, str]:
    doc = tomllib.loads(LOCK.read_text(encoding="utf-8"))
    pins: dict[str, str] = {}
    for stage in doc["targets"][target]["apt"].values():
        pins.update(stage)
    return pins


def _build(project: Path, replica: Replica, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVBUILDER_APT_PROXY": replica.url, "NO_COLOR": "1"}
    return subprocess.run(
        [
            *(sys.executable, "-m", "envbuilder", "build", "--target", "docker", "--env", "cpu"),
            *args,
            *("--spec", str(project / "environments.toml")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


# --- what is rendered ----------------------------------------------------------------------------


@pytest.mark.parametrize("rendered", ["dockerfiles/cpu/Dockerfile", "wsl/cpu/Dockerfile"])
def test_the_rendered_files_point_apt_at_the_snapshot_of_the_lock(rendered: str) -> None:
    lock = read_env_lock(LOCK)
    stamp = aptsnapshot.timestamp(lock.source_date_epoch)
    text = (REPO / rendered).read_text(encoding="utf-8")
    first_apt = text.index("apt-get update")
    sources = text.index("> /etc/apt/sources.list")
    assert sources < first_apt  # before any apt runs
    for line in (
        f"http://snapshot.debian.org/archive/debian/{stamp} bookworm main",
        f"http://snapshot.debian.org/archive/debian/{stamp} bookworm-updates main",
        f"http://snapshot.debian.org/archive/debian-security/{stamp} bookworm-security main",
    ):
        assert f"'deb [check-valid-until=no] {line}'" in text
    assert "rm -f /etc/apt/sources.list.d/debian.sources" in text
    assert "trusted=yes" not in text  # apt keeps checking Debian's signatures


def test_no_snapshot_without_a_verified_entry_or_a_real_time() -> None:
    assert aptsnapshot.sources_for("debian:bookworm-slim@sha256:" + "0" * 64, 1795456873)
    assert aptsnapshot.sources_for("debian:bookworm-slim", aptsnapshot.ZIP_EPOCH) is None
    assert aptsnapshot.sources_for("debian:bookworm-slim", None) is None
    assert aptsnapshot.sources_for("ubuntu:24.04", 1795456873) is None  # unverified
    assert aptsnapshot.entry_for("ubuntu:24.04") is not None
    assert aptsnapshot.sources_for("alpine:3.20", 1795456873) is None
    assert aptsnapshot.timestamp(1795456873) == "20261123T180113Z"
    for entry in aptsnapshot.entries():
        assert entry.source and (entry.verified or "unverified" in entry.note)


# --- builds from the replica ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.network
def test_the_cpu_image_builds_from_the_snapshot_replica_with_every_pin(
    docker_client: object, tmp_path: Path, replica: Replica
) -> None:
    """`build --verify` (no cache: apt really runs) of a copy of the shipped project: apt gets
    every pinned .deb of the docker target from the replica, and the image is the one the
    committed lock predicts."""
    project = _copy_project(tmp_path / "proj")
    done = _build(project, replica, "--verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified: the digest the lock records" in done.stdout
    pool = {p.rsplit("/", 1)[-1] for p in replica.served()}
    wanted = {f"{name}_{version.split(':', 1)[-1]}_" for name, version in _pins("docker").items()}
    missing = {w for w in wanted if not any(p.startswith(w) for p in pool)}
    assert not missing, f"apt did not fetch these pinned versions from the replica: {missing}"


@pytest.mark.slow
@pytest.mark.network
def test_a_snapshot_lacking_a_pinned_version_fails_the_build_clearly(
    docker_client: object, tmp_path: Path
) -> None:
    version = _pins("docker")["libssl3"]
    lacking = Replica(tmp_path, leave_out=(f"libssl3={version}",))
    try:
        project = _copy_project(tmp_path / "proj")
        done = _build(project, lacking, "--no-cache")
    finally:
        lacking.stop()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert (
        "cpu/docker: the snapshot archive apt reads (http://snapshot.debian.org/archive/"
    ) in done.stderr, done.stderr
    assert f"does not serve libssl3 {version}" in done.stderr
    assert "which lockfiles/cpu.lock.toml pins ([targets.docker.apt])" in done.stderr
    assert "ENVBUILDER_APT_PROXY" in done.stderr

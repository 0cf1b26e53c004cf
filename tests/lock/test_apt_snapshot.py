"""apt reads Debian's snapshot archive of the lock's time (envbuilder.lock.aptsnapshot,
envbuilder/data/apt.toml), so every pinned version stays installable.

The live snapshot archive (snapshot.debian.org) is unreachable from this project's machines, so
the builds here go to .ci/apt_snapshot.py's replica on 127.0.0.1: Debian's own signed InRelease
and Packages files (from the machine's Debian mirror, hash-checked) and only the pinned .debs,
reached through
ENVBUILDER_APT_PROXY as apt's http proxy. The image built that way is the one the lock predicts
(`build --verify`: that cold build is tests/image/test_repro_build.py's, through
tests/aptreplica.py,
which also checks that apt fetched every pin from the replica), and a replica lacking one pinned
.deb fails the build with a message naming it. Markers: docker, network (the replica copies
from the machine's Debian mirror), slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from aptreplica import Replica, build_through, copy_project, pins

from envbuilder.lock import aptsnapshot
from envbuilder.lock.lockfile import read_env_lock

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "lockfiles" / "cpu.lock.toml"


# --- what is rendered ----------------------------------------------------------------------------


@pytest.mark.parametrize("rendered", ["dockerfiles/cpu/Dockerfile", "wsl/cpu/Dockerfile"])
def test_the_rendered_files_point_apt_at_the_snapshot_of_the_lock(rendered: str) -> None:
    lock = read_env_lock(LOCK)
    stamp = aptsnapshot.timestamp(lock.source_date_epoch)
    text = (REPO / rendered).read_text(encoding="utf-8")
    first_apt = text.index("apt-get ")
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
def test_a_snapshot_lacking_a_pinned_version_fails_the_build_clearly(
    docker_client: object, tmp_path: Path
) -> None:
    version = pins("docker")["libssl3"]
    lacking = Replica(tmp_path, leave_out=(f"libssl3={version}",))
    try:
        project = copy_project(tmp_path / "proj")
        done = build_through(project, lacking, "--no-cache")
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

"""A replica of Debian's snapshot archive for one test (.ci/apt_snapshot.py on a free port of
127.0.0.1), built from the shipped cpu lock: what apt downloads from it is logged, so a test can
say that every pinned .deb came from it. Used by tests/lock/test_apt_snapshot.py and by the cold
build
of tests/image/test_repro_build.py (the one cold docker build of the suite: it shows both that the
image
is the one the committed lock predicts and that apt fetched every pin from the snapshot)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from shipped import rendered_folders

REPO = Path(__file__).resolve().parent.parent
REPLICA = REPO / ".ci" / "apt_snapshot.py"
LOCK = REPO / "lockfiles" / "cpu.lock.toml"


def copy_project(dest: Path) -> Path:
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


def pins(target: str) -> dict[str, str]:
    doc = tomllib.loads(LOCK.read_text(encoding="utf-8"))
    pins: dict[str, str] = {}
    for stage in doc["targets"][target]["apt"].values():
        pins.update(stage)
    return pins


def build_through(project: Path, replica: Replica, *args: str) -> subprocess.CompletedProcess[str]:
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


def unfetched_pins(replica: Replica, target: str = "docker") -> set[str]:
    """The `name_version_` .deb prefixes the lock pins for `target` that apt did not download."""
    pool = {p.rsplit("/", 1)[-1] for p in replica.served()}
    wanted = {f"{name}_{version.split(':', 1)[-1]}_" for name, version in pins(target).items()}
    return {w for w in wanted if not any(p.startswith(w) for p in pool)}

"""Build times of the cpu image on every engine CI runs (issue 29), one engine after the other.

    /work/venv/bin/python benchmarks/engine_builds.py [--engines main,sid-containerd,...]
                                                      [--json PATH]

For each engine (`main`: DOCKER_HOST as set, else the local socket; the others from
ENVBUILDER_TEST_ENGINES, as `.ci/services.sh` exports it), on a fresh copy of the checkout's
spec, lockfiles/ and dockerfiles/cpu (the user's wheel cache already filled), the envbuilder CLI
in a child process:

  cold      `build --target docker --env cpu --no-cache`: every Dockerfile step again, then the
            reproducible image written (docker save, normalise, canonical diffs, docker load);
  warm      the written image's tag removed, `build` again: the engine's steps come from its
            layer cache, the image is written again (what a changed label or format costs);
  nothing   `build` again: the tag is up to date, nothing is built or written.

Also printed: the image digest each engine recorded (all must be the committed lock's) and the
1-minute load average before each build. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.lock import lockfile  # noqa: E402

ENV = "cpu"


def _engines(selected: list[str]) -> dict[str, str]:
    hosts = {"main": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")}
    for pair in os.environ.get("ENVBUILDER_TEST_ENGINES", "").split():
        name, _, host = pair.partition("=")
        hosts[name] = host
    return {name: hosts[name] for name in selected if name in hosts}


def _copy(dest: Path) -> Path:
    shutil.copy(ROOT / "environments.toml", dest / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", dest / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / ENV, dest / "dockerfiles" / ENV)
    return dest


def _cli(project: Path, host: str, *argv: str) -> float:
    env = {**os.environ, "DOCKER_HOST": host, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "envbuilder", "-q", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} on {host} failed:\n{done.stdout}{done.stderr}")
    return took


def _rmi(host: str, tag: str) -> None:
    subprocess.run(
        ["docker", "rmi", tag],
        env={**os.environ, "DOCKER_HOST": host},
        capture_output=True,
        check=False,
    )


def measure(name: str, host: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"engine-bench-{name}-") as tmp:
        project = _copy(Path(tmp))
        build = ("build", "--target", "docker", "--env", ENV)
        row: dict[str, object] = {"engine": name}
        row["load_cold"] = os.getloadavg()[0]
        row["cold_s"] = _cli(project, host, *build, "--no-cache")
        lock = lockfile.read_env_lock(project / "lockfiles" / f"{ENV}.lock.toml")
        tag = lock.artifacts["docker"]["tag"]
        row["digest"] = lock.artifacts["docker"]["image_id"]
        _rmi(host, tag)
        row["load_warm"] = os.getloadavg()[0]
        row["warm_s"] = _cli(project, host, *build)
        row["nothing_s"] = _cli(project, host, *build)
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="main,sid-classic,sid-containerd,podman")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    committed = lockfile.read_env_lock(ROOT / "lockfiles" / f"{ENV}.lock.toml")
    predicted = committed.artifacts["docker"]["image_id"]
    rows = [measure(name, host) for name, host in _engines(args.engines.split(",")).items()]
    print("| engine | cold s (load) | warm s (load) | nothing to do s | digest = committed |")
    print("| --- | ---: | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r['engine']} | {r['cold_s']:.1f} ({r['load_cold']:.1f}) | "
            f"{r['warm_s']:.1f} ({r['load_warm']:.1f}) | {r['nothing_s']:.1f} | "
            f"{'yes' if r['digest'] == predicted else 'NO: ' + str(r['digest'])} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

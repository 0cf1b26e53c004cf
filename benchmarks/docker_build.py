"""Docker target benchmark: cold build, no-op rebuild, image size overhead, shared-wheel downloads.

    .venv/bin/python benchmarks/docker_build.py [--env cpu] [--json PATH]

Everything in one run, on a copy of the checkout's spec/lockfiles/dockerfiles with a fresh, empty
wheel cache (so "cold" really downloads, from the index mirror where the spec names one):

1. cold build: empty wheel cache + `no_cache` build (every layer built again; the base image is
   already on the engine);
2. no-op rebuild: `envbuilder build` again with nothing changed (goal <= 5 s);
3. image size against base image + the venv's installed site-packages (goal <= 5 % overhead),
   with the per-layer sizes so the overhead can be attributed;
4. bytes downloaded for a second env/target that locks the same torch (the same env's other
   pylocks; goal 0): the wheel cache is keyed by sha256.

Prints a Markdown table (paste into docs/benchmarks.md) and optionally writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.builders.docker import DockerBuilder  # noqa: E402
from envbuilder.core.project import Project  # noqa: E402
from envbuilder.image import engine  # noqa: E402
from envbuilder.lock import lockfile, wheelcache  # noqa: E402
from envbuilder.spec.load import load_spec  # noqa: E402
from envbuilder.targets.base import BuildOptions  # noqa: E402


def _copy_project(dest: Path, env: str) -> Project:
    shutil.copy(ROOT / "environments.toml", dest / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", dest / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / env, dest / "dockerfiles" / env)
    return Project.from_spec(dest / "environments.toml", cache=dest / "cache")


def _quiet(what: str, done: int, total: int | None) -> None:
    pass


def _cli_noop(project: Project, env: str) -> float:
    """Wall time of `envbuilder build` as a process (interpreter and CLI start-up included)."""
    command = [
        sys.executable,
        "-m",
        "envbuilder",
        "-q",
        "build",
        "--target",
        "docker",
        "--env",
        env,
        "--spec",
        str(project.spec_path),
    ]
    start = time.perf_counter()
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        env={**os.environ, "ENVBUILDER_CACHE": str(project.cache)},
    )
    return time.perf_counter() - start


def _du_in_image(client: Any, image: str, path: str) -> int:
    out = client.containers.run(image, ["du", "-sb", path], remove=True, user="0")
    return int(out.split()[0])


def _layers(client: Any, image: str) -> list[dict[str, Any]]:
    return [
        {"size": h["Size"], "created_by": h["CreatedBy"][:90]}
        for h in client.images.get(image).history()
        if h["Size"]
    ]


def measure(env_name: str) -> dict[str, Any]:
    """Run the four measurements and return their numbers."""
    client = engine.connect()
    target = DockerBuilder()
    with tempfile.TemporaryDirectory(prefix="envbuilder-bench-") as tmp:
        project = _copy_project(Path(tmp), env_name)
        env = load_spec(project.spec_path).env(env_name)

        start = time.perf_counter()
        fetched = wheelcache.fetch_locked(project, env_name, "docker", indexes=env.indexes)
        fetch_s = time.perf_counter() - start
        start = time.perf_counter()
        artifact = target.build(project, env, BuildOptions(no_cache=True), _quiet)
        build_s = time.perf_counter() - start

        start = time.perf_counter()
        again = target.build(project, env, BuildOptions(), _quiet)
        noop_s = time.perf_counter() - start
        assert again.details["changed"] == "no", "the no-op rebuild built something"

        noop_cli_s = _cli_noop(project, env_name)

        lock = lockfile.load_env_lock(project, env_name)
        assert lock is not None
        base_ref = lock.targets["docker"].base_image or ""
        image = client.images.get(artifact.reference)
        base = client.images.get(base_ref)
        site = _du_in_image(client, artifact.reference, "/opt/venv/lib")
        venv = _du_in_image(client, artifact.reference, "/opt/venv")

        shared: dict[str, int] = {}
        for other in sorted(t for t in lock.targets if t != "docker"):
            arts = wheelcache.fetch_locked(project, env_name, other, indexes=env.indexes)
            shared[other] = wheelcache.downloaded_bytes(arts)
        result = {
            "env": env_name,
            "machine": f"{platform.node()} {platform.machine()}, {_cpus()} cores",
            "engine": client.version()["Version"],
            "wheels": len(fetched),
            "downloaded_bytes_cold": wheelcache.downloaded_bytes(fetched),
            "fetch_s": round(fetch_s, 1),
            "cold_build_s": round(build_s, 1),
            "noop_rebuild_s": round(noop_s, 2),
            "noop_rebuild_cli_s": round(noop_cli_s, 2),
            "image_bytes": image.attrs["Size"],
            "base_bytes": base.attrs["Size"],
            "site_packages_bytes": site,
            "venv_bytes": venv,
            "layers": _layers(client, artifact.reference),
            "second_target_downloaded_bytes": shared,
        }
    result["overhead_vs_base_plus_site"] = round(
        result["image_bytes"] / (result["base_bytes"] + result["site_packages_bytes"]) - 1, 4
    )
    return result


def _cpus() -> int:
    return os.cpu_count() or 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def markdown(r: dict[str, Any]) -> str:
    """The result as the Markdown table docs/benchmarks.md keeps."""
    base_site = r["base_bytes"] + r["site_packages_bytes"]
    rows = [
        (
            "cold build (empty wheel cache, no layer cache)",
            f"{r['fetch_s'] + r['cold_build_s']:.0f} s (fetch {r['fetch_s']:.0f} s + "
            f"build {r['cold_build_s']:.0f} s; {_mb(r['downloaded_bytes_cold'])} fetched, "
            f"{r['wheels']} wheels)",
        ),
        (
            "no-op rebuild (goal <= 5 s)",
            f"{r['noop_rebuild_s']:.2f} s in-process, {r['noop_rebuild_cli_s']:.2f} s as "
            f"`envbuilder build` ({r['noop_rebuild_cli_s'] / r['cold_build_s']:.4f} x cold)",
        ),
        (
            "image / (base + site-packages) (goal <= 1.05)",
            f"{_mb(r['image_bytes'])} / ({_mb(r['base_bytes'])} + "
            f"{_mb(r['site_packages_bytes'])}) = {r['image_bytes'] / base_site:.3f}",
        ),
    ]
    for other, n in r["second_target_downloaded_bytes"].items():
        rows.append((f"bytes downloaded for `{r['env']}`/{other} after /docker (goal 0)", str(n)))
    lines = ["| measurement | result |", "| --- | --- |"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    lines.append("")
    lines.append("Layers of the final image (non-empty):")
    lines.append("")
    lines += [
        f"- {_mb(layer['size'])}: `{layer['created_by'] or '(base image)'}`"
        for layer in r["layers"]
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.env)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"# docker_build.py, env {args.env}, {result['machine']}, Docker {result['engine']}, "
        f"commit {commit or '?'}\n"
    )
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmarks of `envbuilder lock` and the wheel cache, measured side by side in one run.

    .venv/bin/python benchmarks/lock_bench.py [--spec environments.toml] [--env cpu] [--runs 5]

1. A lock with nothing changed (`envbuilder lock --env cpu` on a current lock), run with network
   and Docker made unreachable (proxy env vars aimed at a closed 127.0.0.1 port, DOCKER_HOST at a
   missing socket, UV_OFFLINE=1): it must pass, which shows it needs neither. Also `lock --check`.
2. A full lock of the env (fresh folder, no lockfiles/: uv resolution of every target plus base
   image digests) against raw `uv pip compile` of the same inputs (the same generated pyproject
   and flags), interleaved, same warm uv cache. Ratio = median(envbuilder) / median(uv).
3. The wheel cache: fetching the env's docker artifacts into an empty cache, then the same for
   the wsl2 target (the same torch): bytes brought in each time.

Prints a markdown table (paste it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envbuilder.locking import lock_env, target_python
from envbuilder.locking import platform as lock_platform
from envbuilder.project import Project
from envbuilder.pyfinder import uv_bin
from envbuilder.specload import load_spec
from envbuilder.uvrun import make_request, pyproject_for
from envbuilder.wheelcache import downloaded_bytes, fetch_locked

ENVBUILDER = [sys.executable, "-m", "envbuilder"]
#: Subprocesses may cache bytecode (this workplace sets PYTHONDONTWRITEBYTECODE=1, which makes
#: every `envbuilder` start compile its modules again; a user's machine does not).
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    env = env or BASE_ENV
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return took


def _copy_project(spec: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    shutil.copy(spec, dest / "environments.toml")
    return dest / "environments.toml"


def _offline_env() -> dict[str, str]:
    env = dict(BASE_ENV)
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    env.update({"HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead,
                "https_proxy": dead, "NO_PROXY": "", "no_proxy": "", "UV_OFFLINE": "1",
                "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    return env


def _raw_uv(spec: Path, env_name: str, work: Path) -> list[str]:
    """The uv command envbuilder runs for the env (one per distinct request), ready in `work`."""
    loaded = load_spec(spec)
    env = loaded.env(env_name)
    seen = []
    for target in env.targets:
        request, _ = make_request(lock_platform(target), target_python(env, target),
                                  env.packages_for(target), env.index_pins_for(target),
                                  loaded.indexes, spec.parent)
        if request not in seen:
            seen.append(request)
    if len(seen) != 1:
        raise SystemExit("this benchmark compares envs whose targets share one uv request")
    (work / "pyproject.toml").write_text(pyproject_for(seen[0]), encoding="utf-8")
    return [uv_bin(), "pip", "compile", "pyproject.toml", "--format", "pylock.toml",
            "--output-file", "pylock.toml", "--python-version", seen[0].python,
            "--python-platform", seen[0].platform, "--generate-hashes", "--no-header",
            "--no-config", "--quiet", "--python", sys.executable]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="environments.toml", type=Path)
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    spec = args.spec.resolve()
    with tempfile.TemporaryDirectory(prefix="lock-bench-") as tmp:
        root = Path(tmp)
        locked = _copy_project(spec, root / "locked")
        _timed([*ENVBUILDER, "-q", "lock", "--env", args.env], locked.parent)  # warm uv cache
        lock_cmd = [*ENVBUILDER, "-q", "lock", "--env", args.env]
        nochange = [_timed(lock_cmd, locked.parent, _offline_env()) for _ in range(args.runs)]
        check = [_timed([*ENVBUILDER, "-q", "lock", "--check"], locked.parent, _offline_env())
                 for _ in range(args.runs)]
        raw_dir = root / "raw"
        raw_dir.mkdir()
        raw_cmd = _raw_uv(spec, args.env, raw_dir)
        full, raw, inproc = [], [], []
        loaded = load_spec(spec)
        for i in range(args.runs):  # interleaved, so drift in network/cache hits both alike
            fresh = _copy_project(spec, root / f"full{i}")
            full.append(_timed(lock_cmd, fresh.parent))
            (raw_dir / "pylock.toml").unlink(missing_ok=True)
            raw.append(_timed(raw_cmd, raw_dir))
            other = _copy_project(spec, root / f"inproc{i}")
            start = time.perf_counter()
            lock_env(Project.from_spec(other), loaded.env(args.env), loaded.env_hash(args.env),
                     loaded.indexes)
            inproc.append(time.perf_counter() - start)
        cache = root / "cache"
        project = Project.from_spec(locked, cache=cache)
        start = time.perf_counter()
        indexes = loaded.env(args.env).indexes
        first = fetch_locked(project, args.env, "docker", indexes=indexes)
        t_first = time.perf_counter() - start
        start = time.perf_counter()
        second = fetch_locked(project, args.env, "wsl2", indexes=indexes)
        t_second = time.perf_counter() - start
    med = statistics.median
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, runs={args.runs}, env={args.env}")
    print()
    print("| what | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    for name, xs in (("`lock` nothing changed (no network, no Docker)", nochange),
                     ("`lock --check` (all envs)", check),
                     ("`lock` full (fresh folder: uv + base digests)", full),
                     ("`locking.lock_env()` full, in-process (no CLI start-up)", inproc),
                     ("raw `uv pip compile`, same inputs", raw)):
        print(f"| {name} | {med(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} |")
    print()
    print(f"full lock / raw uv = {med(full) / med(raw):.2f}x; "
          f"lock_env() in-process / raw uv = {med(inproc) / med(raw):.2f}x")
    print(f"wheel cache: docker target brought in {downloaded_bytes(first)} bytes "
          f"({len(first)} files, {t_first:.2f} s); wsl2 target (same wheels) "
          f"{downloaded_bytes(second)} bytes ({t_second:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmarks of `envbuilder lock` and the wheel cache, measured side by side in one run.

    .venv/bin/python benchmarks/lock_bench.py [--spec environments.toml] [--env cpu] [--runs 5]
    .venv/bin/python benchmarks/lock_bench.py --startup [--runs 15]   # section 4 only

1. A lock with nothing changed (`envbuilder lock --env cpu` on a current lock), run with network
   and Docker made unreachable (proxy env vars aimed at a closed 127.0.0.1 port, DOCKER_HOST at a
   missing socket, UV_OFFLINE=1): it must pass, which shows it needs neither. Also `lock --check`.
2. A full lock of the env (fresh folder, no lockfiles/: uv resolution of every target plus base
   image digests) against raw `uv pip compile` of the same inputs (the same generated pyproject
   and flags), interleaved, same warm uv cache. Ratio = median(envbuilder) / median(uv).
3. The wheel cache: fetching the env's docker artifacts into an empty cache, then the same for
   the wsl2 target (the same torch): bytes brought in each time.

4. --startup: CLI start-up. `envbuilder lock --env ENV` with nothing to do (the console script,
   a copy of the spec and its lockfiles) against the `uv pip compile` command envbuilder runs for
   that env (resolve.run_uv: the same generated pyproject and flags, the committed pylock as the
   output file, which uv reads as preferences), as whole processes, alternating A B A B after one
   warm-up of each; wall and CPU (user + sys of the child) seconds, and the ratio pair by pair.
   Also `envbuilder --help`, and `lock --upgrade-package torch` (uv runs, same pins, nothing
   written) against its uv command (the same plus --upgrade-package torch). Set PYTHONPATH to
   another checkout to time its code.

Prints markdown tables (paste them into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envbuilder.core.project import Project
from envbuilder.host.pyfinder import uv_bin
from envbuilder.lock.resolve import lock_env, target_python
from envbuilder.lock.resolve import platform as lock_platform
from envbuilder.lock.uv import make_request, pyproject_for
from envbuilder.lock.wheelcache import downloaded_bytes, fetch_locked
from envbuilder.spec.load import load_spec

ENVBUILDER = [sys.executable, "-m", "envbuilder"]
#: The console script users run (its entry point, envbuilder.__main__:entry), beside the
#: interpreter; `python -m envbuilder` where there is none.
_SCRIPT = Path(sys.executable).with_name("envbuilder")
CONSOLE = [str(_SCRIPT)] if _SCRIPT.is_file() else ENVBUILDER
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
    env.update(
        {
            "HTTP_PROXY": dead,
            "HTTPS_PROXY": dead,
            "http_proxy": dead,
            "https_proxy": dead,
            "NO_PROXY": "",
            "no_proxy": "",
            "UV_OFFLINE": "1",
            "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        }
    )
    return env


def _raw_uv(spec: Path, env_name: str, work: Path, previous: Path | None = None) -> list[str]:
    """The uv command envbuilder runs for the env (one per distinct request), ready in `work`;
    `previous` (a committed pylock) becomes the output file, as resolve.run_uv hands it over."""
    loaded = load_spec(spec)
    env = loaded.env(env_name)
    seen = []
    for target in env.targets:
        request, _ = make_request(
            lock_platform(target),
            target_python(env, target),
            env.packages_for(target),
            env.index_pins_for(target),
            loaded.indexes,
            spec.parent,
        )
        if request not in seen:
            seen.append(request)
    if len(seen) != 1:
        raise SystemExit("this benchmark compares envs whose targets share one uv request")
    (work / "pyproject.toml").write_text(pyproject_for(seen[0]), encoding="utf-8")
    if previous is not None:
        shutil.copy(previous, work / "pylock.toml")
    return [
        uv_bin(),
        "pip",
        "compile",
        "pyproject.toml",
        "--format",
        "pylock.toml",
        "--output-file",
        "pylock.toml",
        "--python-version",
        seen[0].python,
        "--python-platform",
        seen[0].platform,
        "--generate-hashes",
        "--no-header",
        "--no-config",
        "--quiet",
        "--python",
        sys.executable,
    ]


def _run_measured(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `cmd` as a whole process; SystemExit when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _paired(
    a: list[str], a_cwd: Path, b: list[str], b_cwd: Path, runs: int, env: dict[str, str]
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """A and B in turn (one warm-up each, then `runs` pairs): their (wall, CPU) lists."""
    _run_measured(a, a_cwd, env)
    _run_measured(b, b_cwd, env)
    xs: list[tuple[float, float]] = []
    ys: list[tuple[float, float]] = []
    for _ in range(runs):
        xs.append(_run_measured(a, a_cwd, env))
        ys.append(_run_measured(b, b_cwd, env))
    return xs, ys


def _row(name: str, values: list[float]) -> str:
    med = statistics.median
    return f"| {name} | {med(values):.3f} | {min(values):.3f} | {max(values):.3f} |"


def startup(spec: Path, env_name: str, runs: int) -> None:
    """Section 4 of the module docstring: prints its tables."""
    with tempfile.TemporaryDirectory(prefix="lock-bench-startup-") as tmp:
        root = Path(tmp)
        project = _copy_project(spec, root / "project").parent
        shutil.copytree(spec.parent / "lockfiles", project / "lockfiles")
        loaded = load_spec(spec)
        first = loaded.env(env_name).targets[0]
        uv_dir = root / "uv"
        uv_dir.mkdir()
        uv_cmd = _raw_uv(
            spec,
            env_name,
            uv_dir,
            previous=project / "lockfiles" / f"pylock.{env_name}-{first}.toml",
        )
        noop = [*CONSOLE, "lock", "--env", env_name]
        relock = [*noop, "--upgrade-package", "torch"]
        env = dict(BASE_ENV)
        lock_runs, uv_runs = _paired(noop, project, uv_cmd, uv_dir, runs, env)
        relock_runs, uv2_runs = _paired(
            relock, project, [*uv_cmd, "--upgrade-package", "torch"], uv_dir, runs, env
        )
        helps = [_run_measured([*CONSOLE, "--help"], project, env) for _ in range(runs)]
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}, runs={runs} "
        f"(pairs, after one warm-up each), env={env_name}, "
        f"PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}"
    )
    print(f"uv command: {' '.join(uv_cmd)}")
    print()
    print("| what | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    walls = {
        "`envbuilder lock` nothing to do, wall": lock_runs,
        "`uv pip compile` (envbuilder's command), wall": uv_runs,
        "`envbuilder lock --upgrade-package torch` (uv runs), wall": relock_runs,
        "`uv pip compile ... --upgrade-package torch` (its command), wall": uv2_runs,
        "`envbuilder --help`, wall": helps,
    }
    for name, pairs in walls.items():
        print(_row(name, [w for w, _ in pairs]))
    for name, pairs in (
        ("`envbuilder lock` nothing to do, CPU", lock_runs),
        ("`uv pip compile`, CPU", uv_runs),
    ):
        print(_row(name, [c for _, c in pairs]))
    print()
    ratio = [a[0] / b[0] for a, b in zip(lock_runs, uv_runs, strict=True)]
    ratio2 = [a[0] / b[0] for a, b in zip(relock_runs, uv2_runs, strict=True)]
    print("| ratio, pair by pair (wall) | median | min | max |")
    print("| --- | --- | --- | --- |")
    print(_row("no-op lock / uv pip compile", ratio))
    print(_row("lock --upgrade-package torch / uv pip compile", ratio2))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", default="environments.toml", type=Path)
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--startup", action="store_true", help="only section 4: CLI start-up against uv pip compile"
    )
    args = parser.parse_args()
    spec = args.spec.resolve()
    if args.startup:
        startup(spec, args.env, args.runs)
        return 0
    with tempfile.TemporaryDirectory(prefix="lock-bench-") as tmp:
        root = Path(tmp)
        locked = _copy_project(spec, root / "locked")
        _timed([*ENVBUILDER, "-q", "lock", "--env", args.env], locked.parent)  # warm uv cache
        lock_cmd = [*ENVBUILDER, "-q", "lock", "--env", args.env]
        nochange = [_timed(lock_cmd, locked.parent, _offline_env()) for _ in range(args.runs)]
        check = [
            _timed([*ENVBUILDER, "-q", "lock", "--check"], locked.parent, _offline_env())
            for _ in range(args.runs)
        ]
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
            lock_env(
                Project.from_spec(other),
                loaded.env(args.env),
                loaded.env_hash(args.env),
                loaded.indexes,
            )
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
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, runs={args.runs}, env={args.env}"
    )
    print()
    print("| what | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    for name, xs in (
        ("`lock` nothing changed (no network, no Docker)", nochange),
        ("`lock --check` (all envs)", check),
        ("`lock` full (fresh folder: uv + base digests)", full),
        ("`locking.lock_env()` full, in-process (no CLI start-up)", inproc),
        ("raw `uv pip compile`, same inputs", raw),
    ):
        print(f"| {name} | {med(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} |")
    print()
    print(
        f"full lock / raw uv = {med(full) / med(raw):.2f}x; "
        f"lock_env() in-process / raw uv = {med(inproc) / med(raw):.2f}x"
    )
    print(
        f"wheel cache: docker target brought in {downloaded_bytes(first)} bytes "
        f"({len(first)} files, {t_first:.2f} s); wsl2 target (same wheels) "
        f"{downloaded_bytes(second)} bytes ({t_second:.2f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Slurm path's overhead over a plain local `validate` on the same env (issue 16).

    .venv/bin/python benchmarks/slurm_overhead.py [--env cpu] [--pairs 2] [--rows both]

Needs the services of `.ci/services.sh` (Docker engine, the two-node Slurm; SLURM_CONF in the
environment) and the env's docker image built from its lock (`envbuilder build --target docker
--env cpu`: this script runs that first, a no-op when the engine has it). Two comparisons, each
as pairs of runs side by side, the order alternating from pair to pair (local first, then Slurm
first, ...) so that a drift of the machine's load hits both sides alike:

  same-work   `validate --skip collectives` locally vs `validate --slurm --nodes 1 --skip
              collectives`: the same probe in one container of the same image on one node, so
              the difference is the Slurm path itself (render check, staging probe.pyz and the
              pylock, sbatch, scheduling, srun, polling every 2 s, the fleet report)
  acceptance  plain `validate` (the probe, its collectives check with 2 gloo ranks) vs the
              acceptance command `validate --slurm --nodes 2` (the probe on both nodes, then
              torchrun across both): what a user waits for, more work on the Slurm side

Every run is the CLI as a user starts it (`python -m envbuilder -q ...`), wall time; for the
Slurm runs also Slurm's RunTime of the job (whole seconds, from fleet.json), so the time outside
the job (submit, pending, polling, fleet report) shows. The load average is read before each
run. Prints a markdown table per comparison (paste it into docs/benchmarks.md). Everything runs
in a temp copy of the spec's folder (environments.toml, lockfiles/, dockerfiles/, slurm/), so
the build's [artifacts] record and the reports stay out of the checkout; every job is cancelled
if the script is interrupted (validate does it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Subprocesses may cache bytecode (this workplace sets PYTHONDONTWRITEBYTECODE=1).
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ROWS = {
    "same-work": (["--skip", "collectives"], ["--nodes", "1", "--skip", "collectives"]),
    "acceptance": ([], ["--nodes", "2"]),
}


@dataclass(frozen=True)
class Run:
    side: str  # "local" | "slurm"
    wall_s: float
    load: float  # 1-minute load average just before the run
    job_s: float | None = None  # Slurm's RunTime of the job


def envbuilder(spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "-q", *args, "--spec", str(spec)],
        env=BASE_ENV,
        capture_output=True,
        text=True,
        check=False,
    )


def seconds(run_time: str) -> float:
    """Slurm's [D-]HH:MM:SS as seconds."""
    days, _, clock = run_time.rpartition("-")
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total + (int(days) * 86400 if days else 0)


def job_seconds(stdout: str) -> float | None:
    """Slurm's RunTime of the job whose folder the job line names (fleet.json)."""
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[2].startswith("job-"):
            fleet = json.loads((Path(parts[4]) / "fleet.json").read_text())
            run_time = fleet["job"].get("run_time") or ""
            return seconds(run_time) if run_time else None
    return None


def copy_project(spec: Path, dest: Path) -> Path:
    """The spec and its committed inputs beside it copied to `dest`; the copied spec's path."""
    dest.mkdir(parents=True)
    shutil.copy(spec, dest / spec.name)
    for folder in ("lockfiles", "dockerfiles", "slurm"):
        if (spec.parent / folder).is_dir():
            shutil.copytree(spec.parent / folder, dest / folder)
    return dest / spec.name


def one(side: str, spec: Path, env: str, extra: list[str], run_dir: Path) -> Run:
    args = ["validate", "--env", env, "--target", "docker", *extra]
    if side == "slurm":
        args += ["--slurm", "--run-dir", str(run_dir)]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    result = envbuilder(spec, *args)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(
            f"envbuilder {' '.join(args)} failed ({result.returncode}):\n{result.stdout}"
            f"{result.stderr}"
        )
    return Run(side, wall, load, job_seconds(result.stdout) if side == "slurm" else None)


def table(name: str, runs: list[Run]) -> str:
    """`runs` in the order they ran; each side's list keeps the pair order."""
    local = [r for r in runs if r.side == "local"]
    slurm = [r for r in runs if r.side == "slurm"]
    ratios = [s.wall_s / lo.wall_s for lo, s in zip(local, slurm, strict=True)]
    lines = [
        f"### {name}",
        "",
        "| pair | first | local s | Slurm s | Slurm job RunTime s | Slurm / local | "
        "load before (local, Slurm) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for i, (lo, s) in enumerate(zip(local, slurm, strict=True)):
        first = "local" if i % 2 == 0 else "Slurm"
        job = f"{s.job_s:.0f}" if s.job_s is not None else "-"
        lines.append(
            f"| {i + 1} | {first} | {lo.wall_s:.1f} | {s.wall_s:.1f} | {job} | "
            f"{ratios[i]:.2f} | {lo.load:.1f}, {s.load:.1f} |"
        )
    lines += [
        "",
        f"median Slurm / local: **{statistics.median(ratios):.2f}x** "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs); median "
        f"local {statistics.median(r.wall_s for r in local):.1f} s, Slurm "
        f"{statistics.median(r.wall_s for r in slurm):.1f} s",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("--env", default="cpu", help="the env (default: cpu)")
    parser.add_argument(
        "--spec",
        type=Path,
        default=ROOT / "environments.toml",
        help="the spec (default: the checkout's)",
    )
    parser.add_argument(
        "--pairs", type=int, default=2, help="pairs of runs per comparison (default: 2)"
    )
    parser.add_argument(
        "--rows",
        choices=("same-work", "acceptance", "both"),
        default="both",
        help="which comparisons (default: both)",
    )
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if not os.environ.get("SLURM_CONF"):
        parser.error('SLURM_CONF is not set: start the services (eval "$(.ci/services.sh)")')
    if not args.spec.is_file():
        parser.error(f"{args.spec}: no such spec")
    names = list(ROWS) if args.rows == "both" else [args.rows]
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; env {args.env}; {args.pairs} pair(s)\n"
    )
    with tempfile.TemporaryDirectory(prefix="slurm-overhead-") as tmp:
        spec = copy_project(args.spec, Path(tmp) / "project")
        built = envbuilder(spec, "build", "--target", "docker", "--env", args.env)
        if built.returncode != 0:
            sys.exit(f"envbuilder build failed:\n{built.stdout}{built.stderr}")
        for name in names:
            local_extra, slurm_extra = ROWS[name]
            runs: list[Run] = []
            for pair in range(args.pairs):
                order = ("local", "slurm") if pair % 2 == 0 else ("slurm", "local")
                for side in order:
                    extra = local_extra if side == "local" else slurm_extra
                    runs.append(one(side, spec, args.env, extra, Path(tmp) / "runs"))
                    print(
                        f"  {name} pair {pair + 1} {side}: {runs[-1].wall_s:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
            print(table(name, runs), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

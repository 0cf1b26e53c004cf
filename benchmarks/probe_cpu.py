"""The probe on this CPU machine: wall time and per-check times, before vs after, side by side.

    .venv/bin/python benchmarks/probe_cpu.py [--runs 3] [--level quick] [--before OLD.pyz]
        [--zipapp NEW.pyz] [--variants zipapp,module] [--venv PATH] [--cpus 0,1] [--json OUT]

Each variant runs `--level LEVEL --expect cpu --lock SELF` (SELF: a pylock of the running
interpreter, tests/data/probe/make_pylock.py); runs are interleaved, so a change in the
machine's load hits every variant alike. Variants: `module` (`python -m envbuilder.probe`),
`zipapp` (this tree's zipapp), `before` (--before: another zipapp, e.g. one built from main,
for a before/after ratio in one run), `zipapp-venv` (--venv: this tree's zipapp in a
torch-only venv: `python -m venv V && V/bin/pip install torch==2.13.0`). --cpus pins the
runs to those CPUs (a small machine on a big one). Prints medians, per-check medians and the
load average before each run (the machine may be shared); --json writes them too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAKE_PYLOCK = ROOT / "tests" / "data" / "probe" / "make_pylock.py"


def one(cmd: list[str], out: Path) -> dict[str, Any]:
    """Wall s, per-check s, status, load average before, exit code of one probe run."""
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if not out.is_file():
        print(proc.stdout + proc.stderr, file=sys.stderr)
        return {"wall_s": wall, "checks": {}, "status": f"exit {proc.returncode}", "load": load}
    report = json.loads(out.read_text())
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
    fp = report["fingerprint"]
    return {
        "wall_s": round(wall, 2),
        "load": load,
        "status": report["status"],
        "probe": report["probe_version"],
        "checks": {c["name"]: c["duration_s"] for c in report["checks"]},
        "cpu": {
            k: fp.get(k) for k in ("torch_threads", "cpus_allowed", "cpu_quota", "cpu_warnings")
        },
    }


def zipapp(dest: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from envbuilder.probe import build_zipapp

    return build_zipapp(dest)


def variants(args: argparse.Namespace, tmp: Path) -> dict[str, list[str]]:
    lock = tmp / "self.toml"
    subprocess.run([sys.executable, str(MAKE_PYLOCK), str(lock)], check=True)
    base = ["--level", args.level, "--expect", "cpu", "--lock", str(lock)]
    wanted = args.variants.split(",")
    out: dict[str, list[str]] = {}
    if args.before:
        out["before"] = [sys.executable, str(args.before), *base]
    if "zipapp" in wanted or args.venv:
        pyz = args.zipapp or zipapp(tmp / "probe.pyz")
        if "zipapp" in wanted:
            out["zipapp"] = [sys.executable, str(pyz), *base]
    if "module" in wanted:
        out["module"] = [sys.executable, "-m", "envbuilder.probe", *base]
    if args.venv:
        vpy = str(args.venv / "bin" / "python")
        vlock = tmp / "venv.toml"
        subprocess.run([vpy, str(MAKE_PYLOCK), str(vlock)], check=True)
        out["zipapp-venv"] = [
            vpy,
            str(pyz),
            "--level",
            args.level,
            "--expect",
            "cpu",
            "--lock",
            str(vlock),
        ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--level", default="quick", choices=("quick", "standard", "long"))
    parser.add_argument("--before", type=Path, help="another probe zipapp to run alongside")
    parser.add_argument(
        "--zipapp", type=Path, help="the `zipapp` variant's probe (default: built from this tree)"
    )
    parser.add_argument(
        "--variants", default="module,zipapp", help="comma-separated: module, zipapp (default both)"
    )
    parser.add_argument("--venv", type=Path, help="a torch-only venv to run the zipapp in")
    parser.add_argument("--cpus", help="pin the runs to these CPUs, e.g. 0,1")
    parser.add_argument("--json", type=Path, help="write the summary here too")
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})  # children inherit
    tmp = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    cmds = variants(args, tmp)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in cmds}
    for i in range(args.runs):
        for name, cmd in cmds.items():
            results[name].append(one(cmd, tmp / f"{name}-{i}.json"))
    cores = os.cpu_count()
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    summary: dict[str, Any] = {
        "level": args.level,
        "cores": cores,
        "cpus_allowed": allowed,
        "python": sys.version.split()[0],
        "runs": args.runs,
        "variants": {},
    }
    print(
        f"level {args.level}; cores {cores}, allowed {allowed}; runs {args.runs}; "
        f"python {summary['python']}"
    )
    for name, runs in results.items():
        walls = [r["wall_s"] for r in runs]
        names = runs[0]["checks"]
        checks = {c: statistics.median(r["checks"].get(c, 0.0) for r in runs) for c in names}
        summary["variants"][name] = {
            "cmd": " ".join(cmds[name]),
            "wall_median_s": statistics.median(walls),
            "walls_s": walls,
            "loads": [round(r["load"], 2) for r in runs],
            "statuses": sorted({r["status"] for r in runs}),
            "check_medians_s": checks,
            "probe": runs[0].get("probe"),
            "cpu": runs[-1].get("cpu"),
        }
        print(
            f"{name:12s} wall median {statistics.median(walls):.1f} s "
            f"(min {min(walls):.1f}, max {max(walls):.1f}); status "
            f"{sorted({r['status'] for r in runs})}; load {[round(r['load'], 1) for r in runs]}"
        )
        print("             " + ", ".join(f"{c} {s:.1f}" for c, s in checks.items()))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

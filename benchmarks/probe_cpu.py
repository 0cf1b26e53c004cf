"""The probe's quick level on this CPU machine: wall time, per check, module vs zipapp.

    .venv/bin/python benchmarks/probe_cpu.py [--runs 3] [--venv PATH]

Runs, interleaved, `python -m envbuilder.probe --level quick --expect cpu --lock SELF` (SELF: a
pylock of the running interpreter, tests/data/probe/make_pylock.py) and the same through the
zipapp; with --venv, also the zipapp under that venv's python (a torch-only venv: create it with
`python -m venv V && V/bin/pip install torch==2.13.0`). Prints medians, per-check durations
and the load average before each run (the machine may be shared).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MAKE_PYLOCK = ROOT / "tests" / "data" / "probe" / "make_pylock.py"


def one(cmd: list[str], out: Path) -> tuple[float, dict[str, float], str, float]:
    """(wall s, per-check s, status, load average) of one probe run."""
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True,
                          check=False)
    wall = time.monotonic() - t0
    report = json.loads(out.read_text())
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
    return wall, {c["name"]: c["duration_s"] for c in report["checks"]}, report["status"], load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--venv", type=Path, help="a torch-only venv to run the zipapp in")
    args = parser.parse_args()
    from envbuilder.probe import build_zipapp

    tmp = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    pyz = build_zipapp(tmp / "probe.pyz")
    variants: dict[str, list[str]] = {}
    lock = tmp / "self.toml"
    subprocess.run([sys.executable, str(MAKE_PYLOCK), str(lock)], check=True)
    base = ["--level", "quick", "--expect", "cpu", "--lock", str(lock)]
    variants["module"] = [sys.executable, "-m", "envbuilder.probe", *base]
    variants["zipapp"] = [sys.executable, str(pyz), *base]
    if args.venv:
        vpy = str(args.venv / "bin" / "python")
        vlock = tmp / "venv.toml"
        subprocess.run([vpy, str(MAKE_PYLOCK), str(vlock)], check=True)
        variants["zipapp-venv"] = [vpy, str(pyz), "--level", "quick", "--expect", "cpu",
                                   "--lock", str(vlock)]
    results: dict[str, list[tuple[float, dict[str, float], str, float]]] = {
        k: [] for k in variants}
    for i in range(args.runs):
        for name, cmd in variants.items():
            results[name].append(one(cmd, tmp / f"{name}-{i}.json"))
    print(f"cores: {os.cpu_count()}, runs: {args.runs}, python {sys.version.split()[0]}")
    for name, runs in results.items():
        walls = [r[0] for r in runs]
        checks = {c: statistics.median(r[1][c] for r in runs) for c in runs[0][1]}
        print(f"{name:12s} wall median {statistics.median(walls):.1f} s "
              f"(min {min(walls):.1f}, max {max(walls):.1f}); status "
              f"{sorted({r[2] for r in runs})}; load {[round(r[3], 1) for r in runs]}")
        print("             " + ", ".join(f"{c} {s:.1f}" for c, s in checks.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

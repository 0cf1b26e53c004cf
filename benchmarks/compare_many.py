"""`envbuilder compare` on two reports with many metrics (issue 13: 50,000 metrics took 4 min).

    .venv/bin/python benchmarks/compare_many.py [--metrics 50000] [--runs 1] [--html]

Writes two probe reports (schema_version 1) with N metrics each into a temp folder: the first
half of the metrics shared, the rest only in one report or the other (so matching, "missing"
notes and the terminal table all see real work), 3 samples each. Then, per run:

1. the whole command as a user runs it: `python -m envbuilder compare a.json b.json --json
   c.json --markdown c.md` (stdout to a file), wall time;
2. the stages in-process: load both reports, `compare_reports`, `to_markdown`, `dumps_json`
   (and `write_html` with --html).

Prints a markdown table (paste it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envbuilder.report import comparison, documents, reading
from envbuilder.report import html as compare_html

CHECKS = ("matmul", "amp", "membw", "collectives")
#: Subprocesses may cache bytecode (this workplace sets PYTHONDONTWRITEBYTECODE=1).
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def make_report(n: int, target: str, offset: int, scale: float) -> dict[str, Any]:
    """A report whose metric i (i in offset..offset+n) has samples around scale * (i % 97 + 1)."""
    checks: dict[str, list[dict[str, Any]]] = {c: [] for c in CHECKS}
    for i in range(offset, offset + n):
        base = scale * (i % 97 + 1)
        samples = [base * 0.99, base, base * 1.01]
        checks[CHECKS[i % len(CHECKS)]].append(
            {
                "name": f"metric{i}",
                "value": base,
                "unit": "GB/s",
                "dtype": "fp32",
                "size": str(1 << (i % 20)),
                "samples": samples,
                "higher_is_better": True,
            }
        )
    return {
        "schema_version": 1,
        "tool": "envbuilder-probe",
        "probe_version": "0.1.0",
        "started_at": "2026-12-02T14:00:00Z",
        "duration_s": 1.0,
        "status": "pass",
        "options": {"level": "quick", "expect": "cpu", "repeat": 3},
        "labels": {"env": "cpu", "target": target},
        "fingerprint": {
            "python": "3.11.2",
            "torch": "2.13.0+cpu",
            "hip": None,
            "cuda": None,
            "driver": None,
            "devices": [],
            "host_os": "Debian 12",
            "kernel": "6.1",
            "wsl": False,
            "lock_sha256": "a" * 64,
            "env_vars": {},
        },
        "checks": [
            {
                "name": c,
                "status": "pass",
                "reason": None,
                "duration_s": 1.0,
                "details": {},
                "metrics": ms,
            }
            for c, ms in checks.items()
        ],
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_cli(folder: Path, a: Path, b: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "envbuilder",
        "compare",
        str(a),
        str(b),
        "--json",
        str(folder / "c.json"),
        "--markdown",
        str(folder / "c.md"),
    ]
    with (folder / "stdout.txt").open("w") as out:
        start = time.perf_counter()
        # cwd: the temp folder, so `-m envbuilder` is the interpreter's installed one, not a
        # checkout that happens to be the current folder.
        proc = subprocess.run(
            cmd,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=BASE_ENV,
            cwd=folder,
            check=False,
        )
        took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"compare failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def one_run(folder: Path, a: Path, b: Path, html: bool) -> dict[str, float]:
    """Seconds per stage: the CLI as a whole, then each library step in-process."""
    times = {"CLI: compare --json --markdown (wall)": run_cli(folder, a, b)}
    start = time.perf_counter()
    reports = [reading.load_report(a), reading.load_report(b)]
    times["load_report x 2"] = time.perf_counter() - start
    start = time.perf_counter()
    comp = comparison.compare_reports(reports)
    times["compare_reports"] = time.perf_counter() - start
    steps: dict[str, Callable[[], object]] = {
        "to_markdown": lambda: documents.to_markdown(comp),
        "dumps_json": lambda: documents.dumps_json(comp),
    }
    if html:
        steps["write_html"] = lambda: compare_html.write_html(comp, folder / "html")
    for name, step in steps.items():
        times[name] = timed(step)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--metrics", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--html", action="store_true", help="also time write_html")
    args = parser.parse_args()
    shared = args.metrics // 2
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        a, b = folder / "a.json", folder / "b.json"
        # a: metrics 0..N-1; b: metrics shared..shared+N-1 (half shared, half its own)
        a.write_text(json.dumps(make_report(args.metrics, "docker", 0, 1.0)))
        b.write_text(json.dumps(make_report(args.metrics, "native", args.metrics - shared, 1.1)))
        for _ in range(args.runs):
            for name, took in one_run(folder, a, b, args.html).items():
                rows.setdefault(name, []).append(took)
        size = a.stat().st_size
    print(
        f"{args.metrics} metrics per report ({shared} shared), report {size / 1e6:.1f} MB; "
        f"{platform.python_version()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}"
    )
    print("\n| stage | median s | min s | max s |\n| --- | --- | --- | --- |")
    for name, values in rows.items():
        print(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )


if __name__ == "__main__":
    main()

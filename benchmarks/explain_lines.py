"""`envbuilder explain` on long adversarial lines (issue 13: a 1 MB line took 345 s).

    .venv/bin/python benchmarks/explain_lines.py [--sizes 65536,131072,1048576] [--cli]

For each size: one line of "/dev/kfd" repeated (no newline, no "Permission denied": every
occurrence starts a match attempt that fails), timed through `explain.match_all` in-process;
then, for every shipped pattern, a line of that pattern's leading text repeated (the dense
worst case for it), all of them timed together. With --cli, also `python -m envbuilder explain -`
fed the kfd line on standard input (wall time, start-up included).

Prints a markdown table (paste it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from envbuilder.host import explain


def kfd_line(size: int) -> str:
    return ("/dev/kfd" * (size // 8 + 1))[:size]


def prefix_lines(size: int) -> list[str]:
    """Per shipped pattern: its text up to the first regex operator, repeated to `size`."""
    lines = []
    for e in explain.load_errors():
        for p in (*e.patterns, *e.requires):
            prefix = re.split(r"[\\.\[\](){}*+?|^$]", p.pattern, maxsplit=1)[0] or p.pattern[:1]
            lines.append((prefix * (size // len(prefix) + 1))[:size])
    return lines


def timed_match(*lines: str) -> float:
    start = time.perf_counter()
    for line in lines:
        explain.match_all(line)
    return time.perf_counter() - start


def timed_cli(line: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:  # cwd: not a checkout (see compare_many.py)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "envbuilder", "explain", "-"],
            cwd=tmp,
            input=line.encode(),
            capture_output=True,
            check=False,
        )
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes",
        default="65536,131072,1048576",
        help="line lengths in characters, comma-separated",
    )
    parser.add_argument("--cli", action="store_true", help="also time the CLI on the kfd line")
    args = parser.parse_args()
    explain.load_errors()  # parse the data file before timing
    print(f"{platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    header = "| line length | /dev/kfd repeated, s | each pattern's prefix repeated (all), s |"
    print("\n" + header + (" CLI on the kfd line, s |" if args.cli else ""))
    print("| --- | --- | --- |" + (" --- |" if args.cli else ""))
    for size in (int(s) for s in args.sizes.split(",")):
        cells = [
            f"{size:,}",
            f"{timed_match(kfd_line(size)):.3f}",
            f"{timed_match(*prefix_lines(size)):.3f}",
        ]
        if args.cli:
            cells.append(f"{timed_cli(kfd_line(size)):.3f}")
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

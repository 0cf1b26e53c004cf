"""What one Tab costs: `envbuilder completion bash`'s function answering in a real bash, against
`envbuilder --version` (the bare start of the CLI), interleaved in one run (issue 23).

    .venv/bin/python benchmarks/completion_bench.py [--runs 7] [--project DIR]

argcomplete's script starts envbuilder at every Tab; envbuilder then builds its whole parser
(every command module imported) to answer. Timed: "envbuilder va<Tab>" (commands) and
"envbuilder run --env <Tab>" (env names read from the spec found by walking up), each as a full
bash process, and `envbuilder --version`. Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMPLETE = r"""
source <(envbuilder completion bash)
line="$1"; COMP_LINE="$line"; COMP_POINT=${#line}
read -ra COMP_WORDS <<< "$line"; [[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_python_argcomplete envbuilder
printf '%s\n' "${COMPREPLY[@]}"
"""

CASES = {
    "`envbuilder --version`": ["envbuilder", "--version"],
    "Tab: `envbuilder va`": ["bash", "-c", COMPLETE, "bash", "envbuilder va"],
    "Tab: `envbuilder run --env `": ["bash", "-c", COMPLETE, "bash", "envbuilder run --env "],
}


def time_once(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--project", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    exe = str(Path(sys.executable).with_name("envbuilder"))
    env = {**os.environ, "PATH": f"{Path(exe).parent}{os.pathsep}{os.environ['PATH']}"}
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):  # interleaved: each run times every case once
        for name, argv in CASES.items():
            times[name].append(time_once(argv, args.project, env))
    base = statistics.median(times["`envbuilder --version`"])
    print(f"Machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f}, {args.runs} runs each, interleaved\n")
    print("| what | median s | min s | max s | median / `--version` |")
    print("| --- | --- | --- | --- | --- |")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.3f} | {min(values):.3f} | {max(values):.3f} "
            f"| {median / base:.2f}x |"
        )


if __name__ == "__main__":
    main()

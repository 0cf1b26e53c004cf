"""What the safety work of issue 21 costs a command: whole `envbuilder` processes, this checkout
against an older one, side by side in one run.

    .venv/bin/python benchmarks/safety_overhead.py --baseline DIR [--pairs 10]

DIR is a copy of an older checkout's tree (e.g. `git archive 6d448e4 | tar -x -C DIR`); its
`envbuilder` package runs on this interpreter and these packages (PYTHONPATH=DIR). Timed, in a
fresh copy of the shipped spec, lockfiles/ and rendered folders per run:

  lock      `envbuilder lock --env cpu` with nothing to do (now: the journal look-up, the sweep
            of killed runs' work folders, the stricter lock reader with its digests)
  render    `envbuilder render` rewriting one changed Dockerfile (now: a receipt in the state
            folder, sha256 of each new file, O_NOFOLLOW folder handles)

Each pair runs A (this checkout) and B (the baseline) in turn, the order alternating; the
ratio A/B is taken pair by pair. Prints medians (min-max) and the median ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPIED = ("environments.toml", "lockfiles", "dockerfiles", "wsl", "windows", "slurm")


def project(base: Path, lockfiles_from: Path) -> Path:
    """A copy of the shipped project; its lockfiles/ from `lockfiles_from` (each checkout
    reads the lock format it wrote)."""
    root = base / "p"
    root.mkdir()
    for name in COPIED:
        src = (lockfiles_from if name == "lockfiles" else REPO) / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


def run_once(code: Path | None, lockfiles_from: Path, what: str) -> float:
    """Seconds of one whole process of `what` ("lock" or "render")."""
    with tempfile.TemporaryDirectory(prefix="safety-bench-") as tmp:
        root = project(Path(tmp), lockfiles_from)
        env = {**os.environ, "XDG_STATE_HOME": str(Path(tmp) / "state")}
        env.pop("PYTHONPATH", None)
        if code is not None:
            env["PYTHONPATH"] = str(code)
        if what == "render":
            dockerfile = root / "dockerfiles" / "cpu" / "Dockerfile"
            dockerfile.write_text(dockerfile.read_text() + "# stale\n")
            argv = ["render"]
        else:
            argv = ["lock", "--env", "cpu"]
        # -I would drop PYTHONPATH; -P keeps the current folder off sys.path instead
        cmd = [sys.executable, "-P", "-m", "envbuilder", "-q", *argv]
        started = time.perf_counter()
        subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="an older checkout's tree")
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    for what in ("lock", "render"):
        run_once(None, REPO, what)  # warm-up (bytecode, page cache)
        run_once(args.baseline, args.baseline, what)
        a: list[float] = []
        b: list[float] = []
        for i in range(args.pairs):
            order = [(None, REPO, a), (args.baseline, args.baseline, b)]
            for code, locks, out in order if i % 2 == 0 else order[::-1]:
                out.append(run_once(code, locks, what))
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(
            f"{what}: this checkout {statistics.median(a):.3f} s ({min(a):.3f}-{max(a):.3f}), "
            f"baseline {statistics.median(b):.3f} s ({min(b):.3f}-{max(b):.3f}), "
            f"ratio pair by pair {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()

"""Throughput of the `.wsl` writer against plain `docker export | gzip`, side by side in one run.

    .venv/bin/python benchmarks/wsl_export.py [--image IMAGE] [--runs 3] [--level 6]

IMAGE defaults to the cpu env's wsl2 rootfs image (`envbuilder build --target wsl2 --env cpu`
first). One container of it is created (never started) and exported, interleaved, `--runs` times
each way:

  plain      `docker export CONTAINER | gzip -LEVEL > FILE` (the docker CLI and GNU gzip, a shell
             pipeline: two processes, so export and compression overlap on two cores)
  sdk+gzip   the docker SDK's export stream -> Python's gzip at LEVEL, nothing else (what the
             normalizer's plumbing costs without the normalizing)
  envbuilder envbuilder.builders.wsl2.export_image: SDK stream -> wsltar (spool, sort, rewrite)
             -> deterministic gzip at LEVEL, sha256 while writing

Throughput = uncompressed rootfs bytes (what docker export streams) / wall seconds. Ratios are
medians against `plain`. Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envbuilder.builders import wsl2
from envbuilder.image import engine, wsl

SDE = 1_790_000_000


def default_image() -> str:
    from envbuilder.core.project import Project
    from envbuilder.lock.lockfile import load_env_lock

    lock = load_env_lock(Project.from_spec("environments.toml"), "cpu")
    if lock is None:
        raise SystemExit(
            "no lockfiles/cpu.lock.toml; run `envbuilder lock --env cpu` and "
            "`envbuilder build --target wsl2 --env cpu` first, or pass --image"
        )
    return wsl2.image_tag("cpu", lock.targets["wsl2"].pylock_sha256)


def plain(container: Any, out: Path, level: int) -> int:
    cmd = f"docker export {container.id} | gzip -{level} > {out}"
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True)
    with gzip.open(out, "rb") as fh:  # count the rootfs bytes (not timed)
        return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 20), b""))


def sdk_gzip(container: Any, out: Path, level: int) -> int:
    stream = wsl.IterStream(container.export(chunk_size=1 << 20))
    source = io.BufferedReader(stream, buffer_size=1 << 20)
    with gzip.GzipFile(out, "wb", compresslevel=level, mtime=0) as gz:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            gz.write(chunk)
    return stream.count


def envbuilder_way(client: Any, image: str, out: Path, level: int) -> int:
    counted: list[int] = [0]

    def progress(what: str, done: int, total: int | None) -> None:
        if what == "export":
            counted[0] = max(counted[0], done)

    wsl2.export_image(client, image, out, SDE, progress, compresslevel=level)
    return counted[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--level", type=int, default=wsl.COMPRESSLEVEL)
    args = parser.parse_args()
    client = engine.connect()
    image = args.image or default_image()
    container = client.containers.create(image, command=["/bin/sh"])
    ways: dict[str, Callable[[Path], int]] = {
        "plain": lambda out: plain(container, out, args.level),
        "sdk+gzip": lambda out: sdk_gzip(container, out, args.level),
        "envbuilder": lambda out: envbuilder_way(client, image, out, args.level),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    sizes: dict[str, int] = {}
    rootfs: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            for run in range(args.runs):
                for name, way in ways.items():
                    out = Path(tmp) / f"{name}-{run}.out"
                    start = time.perf_counter()
                    rootfs[name] = way(out)
                    times[name].append(time.perf_counter() - start)
                    sizes[name] = out.stat().st_size
                    out.unlink()
    finally:
        container.remove(force=True)
    base = statistics.median(times["plain"])
    print(
        f"image {image}; {os.cpu_count()} cores; {platform.platform()}; gzip level "
        f"{args.level}; {args.runs} runs each, interleaved\n"
    )
    print("| way | rootfs MB | median s | MB/s | output MB | time vs plain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in ways:
        med = statistics.median(times[name])
        mb = rootfs[name] / 1e6
        print(
            f"| {name} | {mb:.0f} | {med:.1f} ({min(times[name]):.1f}-{max(times[name]):.1f})"
            f" | {mb / med:.1f} | {sizes[name] / 1e6:.1f} | {med / base:.2f}x |"
        )


if __name__ == "__main__":
    main()

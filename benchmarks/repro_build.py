"""Reproducible-image benchmark: the deterministic path against the plain engine build.

    .venv/bin/python benchmarks/repro_build.py [--env cpu] [--pairs 3] [--json PATH]

On a copy of the checkout's spec/lockfiles/dockerfiles (the user's wheel cache, already filled),
each pair builds the env's docker image twice without any layer cache, side by side:

  plain          the engine's build only (`imagebuild.build_rendered_image` without
                 `deterministic`): what envbuilder did before issue 18;
  deterministic  the engine's build plus writing the reproducible image (docker save,
                 normalise the layers above the base, docker load, id check): what
                 `envbuilder build` does now. Its write step is timed on its own too (again,
                 on the engine image the pair just built).

The pairs alternate which build goes first (pair 1 plain first, pair 2 deterministic first, ...),
so a drift in the machine's load does not favour one side; the 1-minute load average is recorded
before each build. The ratio is taken per pair (deterministic / plain), and the median of the
pairs is reported beside them.

Also: whether the deterministic images of all pairs (and the committed lock's prediction) are
one digest, and the image size against base + interpreter + site-packages (goal <= 5 % over
them), with the plain image's size beside it. Prints a Markdown table.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.builders.docker import image_tag  # noqa: E402
from envbuilder.builders.rendered_image import RenderedBuild, build_rendered_image  # noqa: E402
from envbuilder.core.fsutil import atomic_write_bytes  # noqa: E402
from envbuilder.core.imagedefs import ENV_LABEL, LOCK_LABEL, LOCK_SHA_ARG  # noqa: E402
from envbuilder.core.project import Project  # noqa: E402
from envbuilder.image import engine, repro  # noqa: E402
from envbuilder.image.oci.writer import write_image  # noqa: E402
from envbuilder.lock import lockfile  # noqa: E402
from envbuilder.spec.load import load_spec  # noqa: E402
from envbuilder.targets.docker import DESCRIPTOR  # noqa: E402


def _copy_project(dest: Path, env: str) -> Project:
    shutil.copy(ROOT / "environments.toml", dest / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", dest / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / env, dest / "dockerfiles" / env)
    return Project.from_spec(dest / "environments.toml")


def _quiet(what: str, done: int, total: int | None) -> None:
    pass


def _du(client: Any, image: str, *paths: str) -> int:
    out = client.containers.run(image, ["du", "-sbc", *paths], remove=True, user="0")
    return int(out.decode().split()[-2])


def _engine_build(
    client: Any,
    project: Project,
    env: str,
    tag: str,
    pylock_sha: str,
    deterministic: repro.Deterministic | None,
) -> str:
    request = RenderedBuild(
        env,
        "docker",
        DESCRIPTOR.rendered_folder(project, env),
        tag=tag,
        labels={LOCK_LABEL: pylock_sha, ENV_LABEL: env},
        build_args={LOCK_SHA_ARG: pylock_sha},
        ca_bundle=None,
        indexes=load_spec(project.spec_path).env(env).indexes,
        nocache=True,
        deterministic=deterministic,
    )
    image_id, _ = build_rendered_image(client, project, request, _quiet)
    return image_id


def _memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def measure(env: str, pairs: int) -> dict[str, Any]:
    client = engine.connect()
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="envbuilder-repro-bench-") as tmp:
        project = _copy_project(Path(tmp), env)
        lock = lockfile.read_env_lock(project.env_lock(env))
        target = lock.targets["docker"]
        tag = image_tag(env, target.pylock_sha256)
        plain_tag = f"envbuilder-bench/{env}-plain:{target.pylock_sha256[:12]}"
        inputs = repro.Deterministic(target.base_image, lock.source_date_epoch)
        for n in range(pairs):
            row: dict[str, Any] = {"first": "plain" if n % 2 == 0 else "deterministic"}
            sides = ["plain", "deterministic"] if n % 2 == 0 else ["deterministic", "plain"]
            for side in sides:
                row[f"{side}_load"] = _load()
                start = time.perf_counter()
                image = _engine_build(
                    client,
                    project,
                    env,
                    plain_tag if side == "plain" else tag,
                    target.pylock_sha256,
                    None if side == "plain" else inputs,
                )
                row[f"{side}_s"] = round(time.perf_counter() - start, 1)
                row["plain_id" if side == "plain" else "image_id"] = image
            # The write step alone, again on the engine image this pair built.
            row["write_load"] = _load()
            start = time.perf_counter()
            again = write_image(
                client,
                repro.engine_tag(tag),
                base=target.base_image,
                source_date_epoch=lock.source_date_epoch,
                workdir=project.cache,
            )
            row["write_s"] = round(time.perf_counter() - start, 1)
            row["rewrite_id"] = again.image_id
            row["ratio"] = round(row["deterministic_s"] / row["plain_s"], 3)
            rows.append(row)
        # By id, not by tag: the engine may be shared, and another checkout's build of the same
        # lock tags its own image envbuilder/<env>:<hash> meanwhile.
        written, plain_id = rows[-1]["image_id"], rows[-1]["plain_id"]
        base = client.images.get(target.base_image or "").attrs["Size"]
        image = client.images.get(written).attrs["Size"]
        plain_size = client.images.get(plain_id).attrs["Size"]
        site = _du(client, written, f"/opt/venv/lib/python{target.python}/site-packages")
        interpreter = _du(
            client, written, f"/usr/lib/python{target.python}", f"/usr/bin/python{target.python}"
        )
        client.images.remove(plain_tag, force=True)
    predicted = repro.recorded(lock.artifacts, "docker")
    return {
        "env": env,
        "machine": f"{platform.node()}, {os.cpu_count()} cores, {_memory_gb():.0f} GB",
        "load_before": [round(x, 1) for x in load_before],
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "engine": client.version()["Version"],
        "pairs": rows,
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "one_digest": len({r["image_id"] for r in rows} | {r["rewrite_id"] for r in rows}) == 1,
        "committed_prediction": predicted.image_id if predicted else None,
        "image_bytes": image,
        "plain_image_bytes": plain_size,
        "base_bytes": base,
        "interpreter_bytes": interpreter,
        "site_packages_bytes": site,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "| pair | first | plain engine build s (load) | deterministic path s, build + write "
        "(load) | write alone s (load) | ratio deterministic / plain |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for i, row in enumerate(r["pairs"], 1):
        lines.append(
            f"| {i} | {row['first']} | {row['plain_s']} ({row['plain_load']}) "
            f"| {row['deterministic_s']} ({row['deterministic_load']}) "
            f"| {row['write_s']} ({row['write_load']}) | {row['ratio']:.2f}x |"
        )
    parts = r["base_bytes"] + r["interpreter_bytes"] + r["site_packages_bytes"]
    digests = sorted({row["image_id"] for row in r["pairs"]})
    lines += [
        f"| median | | {statistics.median(row['plain_s'] for row in r['pairs'])} "
        f"| {statistics.median(row['deterministic_s'] for row in r['pairs'])} "
        f"| {statistics.median(row['write_s'] for row in r['pairs'])} "
        f"| {r['median_ratio']:.2f}x |",
        "",
        f"* digests of the deterministic images: {', '.join(d[:19] for d in digests)} "
        f"(one digest, the write-alone images included: {r['one_digest']}; the committed lock "
        f"predicts {(r['committed_prediction'] or 'none')[:19]}); plain engine images: "
        f"{', '.join(row['plain_id'][:19] for row in r['pairs'])}",
        f"* image {r['image_bytes'] / 1e6:,.1f} MB (plain engine image "
        f"{r['plain_image_bytes'] / 1e6:,.1f} MB) / (base {r['base_bytes'] / 1e6:,.1f} MB + "
        f"interpreter {r['interpreter_bytes'] / 1e6:,.1f} MB + site-packages "
        f"{r['site_packages_bytes'] / 1e6:,.1f} MB) = {r['image_bytes'] / parts:.3f}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="cpu")
    parser.add_argument(
        "--pairs",
        type=int,
        default=3,
        help="plain/deterministic pairs, alternating which goes first",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    result = measure(args.env, args.pairs)
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(result, indent=2) + "\n").encode())
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"# repro_build.py, env {args.env}, {result['machine']}, Docker {result['engine']}, "
        f"commit {commit or '?'}; load average (1, 5, 15 min) {result['load_before']} "
        f"before, {result['load_after']} after\n"
    )
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

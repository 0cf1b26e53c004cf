"""Reproducible-image benchmark: the deterministic path against the plain engine build.

    .venv/bin/python benchmarks/repro_build.py [--env cpu] [--runs 1] [--json PATH]

On a copy of the checkout's spec/lockfiles/dockerfiles (the user's wheel cache, already filled),
each run builds the env's docker image twice without any layer cache, one after the other:

  plain          the engine's build only (`imagebuild.build_rendered_image` without
                 `deterministic`): what envbuilder did before issue 18;
  deterministic  the engine's build plus writing the reproducible image (docker save,
                 normalise the layers above the base, docker load, id check): what
                 `envbuilder build` does now. Its write step is timed on its own too.

Also: whether the two deterministic images of the runs (and the committed lock's prediction)
are one digest, and the image size against base + interpreter + site-packages (goal <= 5 %
over them), with the plain image's size beside it. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder import docker_engine, lockfile, repro  # noqa: E402
from envbuilder.builders.docker import image_tag  # noqa: E402
from envbuilder.imagebuild import build_rendered_image  # noqa: E402
from envbuilder.imagedefs import ENV_LABEL, LOCK_LABEL, LOCK_SHA_ARG  # noqa: E402
from envbuilder.ociimage.writer import write_image  # noqa: E402
from envbuilder.project import Project  # noqa: E402
from envbuilder.specload import load_spec  # noqa: E402
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


def _engine_build(client: Any, project: Project, env: str, tag: str, pylock_sha: str,
                  deterministic: repro.Deterministic | None) -> str:
    image_id, _ = build_rendered_image(
        client, project, env, "docker", DESCRIPTOR.rendered_folder(project, env), tag=tag,
        labels={LOCK_LABEL: pylock_sha, ENV_LABEL: env},
        build_args={LOCK_SHA_ARG: pylock_sha}, progress=_quiet, ca_bundle=None,
        indexes=load_spec(project.spec_path).env(env).indexes, nocache=True,
        deterministic=deterministic)
    return image_id


def measure(env: str, runs: int) -> dict[str, Any]:
    client = docker_engine.connect()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="envbuilder-repro-bench-") as tmp:
        project = _copy_project(Path(tmp), env)
        lock = lockfile.read_env_lock(project.env_lock(env))
        target = lock.targets["docker"]
        tag = image_tag(env, target.pylock_sha256)
        plain_tag = f"envbuilder-bench/{env}-plain:{target.pylock_sha256[:12]}"
        inputs = repro.Deterministic(target.base_image, lock.source_date_epoch)
        for _ in range(runs):
            start = time.perf_counter()
            plain = _engine_build(client, project, env, plain_tag, target.pylock_sha256, None)
            plain_s = time.perf_counter() - start
            start = time.perf_counter()
            written = _engine_build(client, project, env, tag, target.pylock_sha256, inputs)
            deterministic_s = time.perf_counter() - start
            # The write step alone, again on the engine image this run just built.
            start = time.perf_counter()
            again = write_image(client, repro.engine_tag(tag), base=target.base_image,
                                source_date_epoch=lock.source_date_epoch,
                                workdir=project.cache)
            write_s = time.perf_counter() - start
            rows.append({"plain_s": round(plain_s, 1), "deterministic_s": round(deterministic_s, 1),
                         "write_s": round(write_s, 1), "plain_id": plain, "image_id": written,
                         "rewrite_id": again.image_id})
        base = client.images.get(target.base_image or "").attrs["Size"]
        image = client.images.get(tag).attrs["Size"]
        plain_size = client.images.get(plain_tag).attrs["Size"]
        site = _du(client, tag, f"/opt/venv/lib/python{target.python}/site-packages")
        interpreter = _du(client, tag, f"/usr/lib/python{target.python}",
                          f"/usr/bin/python{target.python}")
        client.images.remove(plain_tag, force=True)
    predicted = repro.recorded(lock.artifacts, "docker")
    return {
        "env": env, "machine": f"{platform.node()}, {os.cpu_count()} cores",
        "engine": client.version()["Version"], "runs": rows,
        "one_digest": len({r["image_id"] for r in rows} | {r["rewrite_id"] for r in rows}) == 1,
        "committed_prediction": predicted.image_id if predicted else None,
        "image_bytes": image, "plain_image_bytes": plain_size, "base_bytes": base,
        "interpreter_bytes": interpreter, "site_packages_bytes": site,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = ["| run | plain engine build s | deterministic path s (build + write) | write alone s "
             "| ratio deterministic / plain |", "| --- | ---: | ---: | ---: | ---: |"]
    for i, row in enumerate(r["runs"], 1):
        ratio = row["deterministic_s"] / row["plain_s"]
        lines.append(f"| {i} | {row['plain_s']} | {row['deterministic_s']} | {row['write_s']} "
                     f"| {ratio:.2f}x |")
    parts = r["base_bytes"] + r["interpreter_bytes"] + r["site_packages_bytes"]
    digests = sorted({row["image_id"] for row in r["runs"]})
    lines += [
        "",
        f"* digests of the deterministic images: {', '.join(d[:19] for d in digests)} "
        f"(one digest: {r['one_digest']}; the committed lock predicts "
        f"{(r['committed_prediction'] or 'none')[:19]}); plain engine images: "
        f"{', '.join(row['plain_id'][:19] for row in r['runs'])}",
        f"* image {r['image_bytes'] / 1e6:,.1f} MB (plain engine image "
        f"{r['plain_image_bytes'] / 1e6:,.1f} MB) / (base {r['base_bytes'] / 1e6:,.1f} MB + "
        f"interpreter {r['interpreter_bytes'] / 1e6:,.1f} MB + site-packages "
        f"{r['site_packages_bytes'] / 1e6:,.1f} MB) = {r['image_bytes'] / parts:.3f}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.env, args.runs)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    print(f"# repro_build.py, env {args.env}, {result['machine']}, Docker {result['engine']}, "
          f"commit {commit or '?'}\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

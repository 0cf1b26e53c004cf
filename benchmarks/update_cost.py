"""What a one-package bump costs a team (issue 31): the bytes a push uploads and a pull downloads
after `lock --upgrade-package`, envbuilder at a baseline revision against this checkout, in one
run on one engine and registry.

    python benchmarks/update_cost.py [--baseline REV] [--package filelock]
                                     [--registry 127.0.0.1:5000] [--json PATH]
    python benchmarks/update_cost.py --cold N [--baseline REV]

For each layout (`baseline`: envbuilder as of REV, by default the commit before layers by
package; `current`: this checkout), on a fresh copy of that revision's spec, lockfiles/ and
dockerfiles/cpu, its own CLI in a child process (DOCKER_HOST as set: CI's Debian 12 engine, a
classic image store):

  1. `build --target docker --env cpu`, `push` to REGISTRY/update-cost-<pid>-<layout>;
  2. `lock --env cpu --upgrade-package PACKAGE`, `render`, `build`, `push` again: the bytes this
     push uploaded (the per-layer "pushed" / "already there" lines both revisions print);
  3. the bumped image removed from the engine, then pulled by the digest the push recorded, with
     the first image on the engine as a team member has it (removed after step 1's push and
     pulled from the registry: an engine matches a registry's blobs only to layers it pulled or
     pushed itself): the bytes the engine fetched (its pull stream:
     envbuilder.image.engine_streams.pull_summary; "Already exists" layers cost 0).

`--cold N` instead times N cold builds of each (`build --no-cache`, every step again and the image
written), alternating baseline and current so both see the same load, and prints each pair and
the median of current/baseline.

Layers travel uncompressed in both revisions (envbuilder pushes its own manifest; issue 29), so
the bytes are the layers' tar sizes. Needs the CI services (`.ci/services.sh`: registry, apt
snapshot replica, torch mirror as ENVBUILDER_MIRROR_PYTORCH_CPU) and the default PyPI index for
the bumped package. It removes the images it pulls from the engine afterwards, by id with every
name (a reproducible image is the same id as your own build of that lock). Prints a Markdown
table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from envbuilder.image import engine, engine_streams  # noqa: E402
from envbuilder.lock import lockfile  # noqa: E402

ENV = "cpu"
#: The last commit before layers by package (stop 36's main).
BASELINE = "fde184f"
_PUSHED = re.compile(r"^layer \d+/\d+ (sha256:[0-9a-f]+) \((\d+) B\) (pushed|already there)$")


@dataclass
class Cost:
    layout: str
    layers: int
    pushed_layers: int
    pushed_bytes: int
    image_bytes: int
    fetched_layers: int
    fetched_bytes: int
    present_layers: int
    bump: str
    seconds: float
    second_engine: str = ""
    second_fetched_layers: int = 0
    second_fetched_bytes: int = 0


def _tree(rev: str | None, dest: Path) -> Path:
    """The revision's code and project files in `dest` (None: this checkout's files)."""
    dest.mkdir(parents=True)
    if rev is None:
        return ROOT
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _project(code: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    (dest / "environments.toml").write_bytes((code / "environments.toml").read_bytes())
    subprocess.run(["cp", "-r", str(code / "lockfiles"), str(dest)], check=True)
    (dest / "dockerfiles").mkdir()
    subprocess.run(
        ["cp", "-r", str(code / "dockerfiles" / ENV), str(dest / "dockerfiles")], check=True
    )
    return dest


def _cli(code: Path, project: Path, *argv: str) -> str:
    """Run `envbuilder argv` of the tree `code` in `project`; its stderr and stdout."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-m", "envbuilder", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"envbuilder {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return done.stderr + done.stdout


def _pushed(output: str) -> tuple[int, int, int, int]:
    """(layers, layers uploaded, bytes uploaded, image bytes) from a push's lines."""
    rows = [m.groups() for line in output.splitlines() if (m := _PUSHED.match(line.strip()))]
    sent = [int(size) for _, size, status in rows if status == "pushed"]
    return len(rows), len(sent), sum(sent), sum(int(size) for _, size, _ in rows)


def _measure(
    layout: str, rev: str | None, work: Path, registry: str, package: str, second: str
) -> Cost:
    start = time.monotonic()
    code = _tree(rev, work / "code")
    project = _project(code, work / "project")
    repo = f"{registry}/update-cost-{os.getpid()}-{layout}"
    _cli(code, project, "build", "--target", "docker", "--env", ENV)
    _cli(code, project, "push", "--target", "docker", "--env", ENV, "--registry", repo)
    first = _as_pulled(project)
    bump = _cli(code, project, "lock", "--env", ENV, "--upgrade-package", package)
    _cli(code, project, "render", "--env", ENV, "--target", "docker")
    _cli(code, project, "build", "--target", "docker", "--env", ENV)
    layers, pushed_layers, pushed_bytes, image_bytes = _pushed(
        _cli(code, project, "push", "--target", "docker", "--env", ENV, "--registry", repo)
    )
    lock = lockfile.read_env_lock(project / "lockfiles" / f"{ENV}.lock.toml")
    ref = lock.artifacts["docker"]["repo_digest"]
    client = docker.from_env()
    _drop(client, str(lock.artifacts["docker"]["tag"]))
    events = list(client.api.pull(ref, stream=True, decode=True))  # by digest: no tag
    fetched = engine_streams.pull_summary(events)
    _drop(client, ref)
    _drop(client, first)
    changed = next((line for line in bump.splitlines() if f"{package} " in line), "")
    other = _second_pull(second, first, ref)
    return Cost(
        layout,
        layers,
        pushed_layers,
        pushed_bytes,
        image_bytes,
        fetched.fetched,
        fetched.fetched_bytes,
        fetched.present,
        changed.strip(),
        round(time.monotonic() - start, 1),
        second,
        other.fetched,
        other.fetched_bytes,
    )


def _second_pull(name: str, first: str, bumped: str) -> engine_streams.PullSummary:
    """On the engine `name` of ENVBUILDER_TEST_ENGINES: pull the first image, then what the
    bumped one fetches; both removed after."""
    hosts = dict(
        p.partition("=")[::2] for p in os.environ.get("ENVBUILDER_TEST_ENGINES", "").split()
    )
    if not name:
        return engine_streams.PullSummary(0, 0, 0)
    if name not in hosts:
        raise SystemExit(
            f"--second-engine {name}: not in ENVBUILDER_TEST_ENGINES ({sorted(hosts)})"
        )
    client = docker.DockerClient(base_url=hosts[name])
    try:
        list(client.api.pull(first, stream=True, decode=True))
        fetched = engine_streams.pull_summary(
            list(client.api.pull(bumped, stream=True, decode=True))
        )
        _drop(client, bumped)
        _drop(client, first)
        return fetched
    finally:
        client.close()


def _cold(rev: str, work: Path, runs: int) -> list[tuple[float, float]]:
    """`runs` pairs of cold-build seconds (baseline, current), alternating."""
    trees = {"baseline": _tree(rev, work / "baseline"), "current": _tree(None, work / "current")}
    projects = {k: _project(code, work / f"{k}-project") for k, code in trees.items()}
    pairs = []
    for n in range(runs):
        times = {}
        for layout in ("baseline", "current") if n % 2 == 0 else ("current", "baseline"):
            start = time.monotonic()
            _cli(
                trees[layout],
                projects[layout],
                "build",
                "--target",
                "docker",
                "--env",
                ENV,
                "--no-cache",
            )
            times[layout] = time.monotonic() - start
        pairs.append((times["baseline"], times["current"]))
        print(
            f"cold build {n + 1}: baseline {pairs[-1][0]:.1f} s, current {pairs[-1][1]:.1f} s",
            file=sys.stderr,
        )
    return pairs


def _as_pulled(project: Path) -> str:
    """Make the engine hold the first image as a team member's does: pulled from the registry
    (the engine then knows which blob is which layer; an image it built or loaded it does not
    match to a registry's blobs, and would fetch every layer again)."""
    lock = lockfile.read_env_lock(project / "lockfiles" / f"{ENV}.lock.toml")
    ref = lock.artifacts["docker"]["repo_digest"]
    client = docker.from_env()
    _drop(client, str(lock.artifacts["docker"]["tag"]))
    list(client.api.pull(ref, stream=True, decode=True))
    return ref


def _drop(client: docker.DockerClient, ref: str) -> None:
    """Remove the image `ref` names with every name it has (an earlier run's pull of the same,
    reproducible, image included), so that the next pull has to fetch it."""
    found = engine.image_info(client, ref)
    if found is not None:
        client.images.remove(found.id, force=True)


def _table(costs: list[Cost]) -> str:
    mb = 1e6
    lines = [
        "| layout | layers | push: layers sent | push: MB sent | image MB "
        "| pull: layers fetched | pull: MB fetched | second engine: layers, MB fetched |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in costs:
        second = (
            f"{c.second_engine}: {c.second_fetched_layers}, {c.second_fetched_bytes / mb:.1f}"
            if c.second_engine
            else "-"
        )
        lines.append(
            f"| {c.layout} | {c.layers} | {c.pushed_layers} | {c.pushed_bytes / mb:.1f} | "
            f"{c.image_bytes / mb:.1f} | {c.fetched_layers} | {c.fetched_bytes / mb:.1f} | "
            f"{second} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--package", default="filelock")
    parser.add_argument(
        "--registry", default=os.environ.get("ENVBUILDER_TEST_REGISTRY", "127.0.0.1:5000")
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--second-engine",
        default="",
        help="also pull on this engine of ENVBUILDER_TEST_ENGINES (e.g. sid-containerd)",
    )
    parser.add_argument("--cold", type=int, default=0, help="time N cold builds of each instead")
    args = parser.parse_args()
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="update-cost-") as tmp:
            pairs = _cold(args.baseline, Path(tmp), args.cold)
        ratios = sorted(c / b for b, c in pairs)
        print("| run | baseline s | current s | current/baseline |\n| --- | --- | --- | --- |")
        for n, (b, c) in enumerate(pairs, 1):
            print(f"| {n} | {b:.1f} | {c:.1f} | {c / b:.2f} |")
        print(f"\nmedian current/baseline: {ratios[len(ratios) // 2]:.2f}")
        return 0
    costs = []
    with tempfile.TemporaryDirectory(prefix="update-cost-") as tmp:
        for layout, rev in (("baseline", args.baseline), ("current", None)):
            work = Path(tmp) / layout
            costs.append(
                _measure(layout, rev, work, args.registry, args.package, args.second_engine)
            )
            print(f"{layout}: {asdict(costs[-1])}", file=sys.stderr)
    print(_table(costs))
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in costs], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

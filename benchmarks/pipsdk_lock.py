"""What the pip SDK's first-index lock costs (envbuilder.lock.sdk), measured side by side.

    .venv/bin/python benchmarks/pipsdk_lock.py [--runs 7]

The shipped flagship env (rocm714, RX 7900 XTX) for its Linux platform, against the replica of
AMD's index and of PyPI that the tests serve on 127.0.0.1 (tests/replica, round 3: ROCm 7.14.1),
in-process, one warm uv cache, interleaved A B A B:

  A. `sdklock.resolve_sdk`: AMD's index searched first; the ROCm-family names the first
     resolution finds unpinned (the family wheel amd-torch-device-gfx11, triton, rocm-bootstrap)
     are pinned and the env resolved again; the provenance check;
  B. one `uv pip compile` (uvrun.run_uv + postprocess) of the request A ends with: every family
     name already listed and pinned, which is what a lock needing every name listed in the data
     (the design before) would run when its list is complete.

Printed: a markdown table (median, min, max seconds), the ratio of the medians, and how many
resolutions A ran. Nothing leaves 127.0.0.1; nothing is written outside a temp folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from replica.catalog import load_catalog  # noqa: E402
from replica.server import serve  # noqa: E402

from envbuilder.core.compatload import load_compat  # noqa: E402
from envbuilder.core.model import Index  # noqa: E402
from envbuilder.core.pipsdk import lock_inputs, sdk_index  # noqa: E402
from envbuilder.lock.sdk import pinned_too, resolve_sdk, unpinned_family  # noqa: E402
from envbuilder.lock.uv import ResolveRequest, make_request, postprocess, run_uv  # noqa: E402
from envbuilder.spec.load import load_spec  # noqa: E402

AMD = "https://repo.amd.com/rocm/whl-multi-arch/"
PLATFORM = "x86_64-manylinux_2_28"


def request_for(amd_mirror: str, root: Path) -> ResolveRequest:
    """rocm714's Linux request, AMD's index mirrored by the replica."""
    env = load_spec(ROOT / "environments.toml").env("rocm714")
    packages, pins = lock_inputs(env, "docker")
    indexes = {"amd-rocm": Index("amd-rocm", AMD, mirror=amd_mirror)}
    request, _ = make_request(
        PLATFORM, env.python, packages, pins, indexes, root, {}, sdk_index(env, "docker")
    )
    return request


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def row(label: str, xs: list[float]) -> str:
    return f"| {label} | {statistics.median(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    release = load_compat().rocm("7.14.1")
    assert release is not None
    with tempfile.TemporaryDirectory() as tmp, serve(load_catalog(), Path(tmp) / "r", 3) as srv:
        os.environ.update(
            ENVBUILDER_DEFAULT_INDEX=srv.url("pypi"),
            UV_CACHE_DIR=str(Path(tmp) / "uv-cache"),
            NO_PROXY="127.0.0.1",
            no_proxy="127.0.0.1",
        )
        request = request_for(srv.url("amd"), Path(tmp))
        rounds, final = 1, request
        while found := unpinned_family(run_uv(final), final):  # also warms the cache
            final, rounds = pinned_too(final, list(found)), rounds + 1
        a: list[float] = []
        b: list[float] = []
        for _ in range(args.runs):
            a.append(timed(lambda: resolve_sdk(request, None, release, "rocm714")))
            b.append(timed(lambda: postprocess(run_uv(final), final, "")))
    print("| what | median s | min s | max s |\n| --- | --- | --- | --- |")
    print(row(f"A. first-index lock (`resolve_sdk`, {rounds} resolutions)", a))
    print(row("B. one resolution, every family name pinned", b))
    print(f"\nA / B (medians): {statistics.median(a) / statistics.median(b):.2f}x")


if __name__ == "__main__":
    main()

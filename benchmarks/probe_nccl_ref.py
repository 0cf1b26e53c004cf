"""Reference all_reduce bandwidth from NCCL driven directly by CuPy (`cupy.cuda.nccl`).

    python benchmarks/probe_nccl_ref.py [--bytes 268435456] [--ranks N] [--iters 20]

One process per GPU (N defaults to every visible GPU), float32 sum, timed with CUDA events
after warm-up, rccl-tests' formulas: algbw = bytes / time, busbw = algbw * 2(n-1)/n, time
averaged over ranks. Prints one JSON line. Independent of torch: it is the yardstick for the
probe's collectives check (issue 10). Keep NCCL_NVLS_ENABLE=0 in the environment.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from typing import Any


def _rank(rank: int, world: int, uid: Any, nbytes: int, iters: int, out: Any) -> None:
    import cupy
    from cupy.cuda import nccl

    cupy.cuda.Device(rank).use()
    comm = nccl.NcclCommunicator(world, uid, rank)
    buf = cupy.ones(nbytes // 4, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)

    def once() -> None:
        comm.allReduce(
            buf.data.ptr, buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr
        )

    for _ in range(5):
        once()
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(iters):
        once()
    end.record(stream)
    end.synchronize()
    seconds = cupy.cuda.get_elapsed_time(start, end) / 1000.0 / iters
    check = cupy.ones(7, dtype=cupy.float32)
    comm.allReduce(check.data.ptr, check.data.ptr, 7, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    out.put((rank, seconds, float(check[0])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=256 << 20)
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    import cupy
    from cupy.cuda import nccl

    world = args.ranks or cupy.cuda.runtime.getDeviceCount()
    uid = nccl.get_unique_id()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_rank, args=(r, world, uid, args.bytes, args.iters, queue))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    seconds = sum(r[1] for r in results) / world
    algbw = args.bytes / seconds / 1e9
    print(
        json.dumps(
            {
                "tool": "cupy.cuda.nccl",
                "nccl_version": nccl.get_version(),
                "ranks": world,
                "bytes": args.bytes,
                "iters": args.iters,
                "time_us": seconds * 1e6,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * 2 * (world - 1) / world,
                "sum_right": all(r[2] == world for r in results),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""collectives: torch.distributed all_reduce, right sums at several sizes, then algbw/busbw.

Backends: `nccl` (RCCL on ROCm) on GPUs, one process per GPU; `gloo` on the CPU (two processes)
and on Windows (no RCCL there). Under `torchrun` (RANK and WORLD_SIZE in the environment) this
process is one rank and uses torchrun's rendezvous, so multi-node runs need nothing extra;
otherwise this process starts the ranks itself, on 127.0.0.1, and watches them: a rank that
crashes ends the check with its output's tail instead of leaving the others hanging.

Bandwidth as rccl-tests/nccl-tests define it: algbw = bytes / time, busbw = algbw * 2(n-1)/n
for all_reduce (time per operation, averaged over ranks; rccl-tests src/all_reduce.cu,
AllReduceGetBw). On GPUs above the quick level the sizes are rccl-tests' sweep
`all_reduce_perf -b 8 -e 1G -f 2`, in place (rccl-tests prints out-of-place and in-place).
With one GPU, a single-rank `nccl` all_reduce still proves the library loads and runs; no
bandwidth is reported for one rank (NCCL moves no data then, and busbw's factor is zero).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from envbuilder.probe.common import (
    CheckFailed,
    CheckResult,
    CheckSkipped,
    Context,
    has_fault,
    in_wsl,
)

SPAWNED_ENV = "ENVBUILDER_PROBE_SPAWNED"
#: Element counts for the correctness part; odd ones catch chunking/remainder bugs.
CHECK_COUNTS = (1, 7, 1023, 65537, 1048579)
WSL_REASON = (
    'WSL: multi-GPU is not supported on WSL (AMD: "mGPU is not supported by '
    'Microsoft on WSL"); RCCL collectives are not tested there'
)


def bus_factor(world: int) -> float:
    """all_reduce's busbw/algbw ratio, 2(n-1)/n (rccl-tests)."""
    return 2.0 * (world - 1) / world


#: rccl-tests' `all_reduce_perf -b 8 -e 1G -f 2`: 8 bytes to 1 GiB, each size twice the last.
SWEEP = (8, 1 << 30, 2)


def _sweep_sizes(ctx: Context, gpu: bool) -> list[int]:
    """Message sizes in bytes at this level: on GPUs the quick level's few sizes (powers of 4,
    1M-64M), above it rccl-tests' sweep (SWEEP); on CPUs powers of 4."""
    if gpu:
        lo, hi, factor = ctx.pick((1 << 20, 64 << 20, 4), SWEEP, SWEEP)
    else:
        lo, hi = ctx.pick((64 << 10, 4 << 20), (4 << 10, 16 << 20), (4 << 10, 64 << 20))
        factor = 4
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def _iters(ctx: Context, gpu: bool, nbytes: int) -> int:
    """Operations per timed sample: the same on every rank (derived from the size only). On
    GPUs above the quick level at least rccl-tests' default of 20 (`-n 20`)."""
    budget, low, high = (
        ctx.pick((1 << 30, 5, 100), (4 << 30, 20, 200), (16 << 30, 20, 500))
        if gpu
        else ctx.pick((32 << 20, 3, 30), (128 << 20, 3, 50), (512 << 20, 5, 100))
    )
    return int(max(low, min(high, budget // nbytes)))


def _check_sums(rank: int, world: int, device: Any, counts: tuple[int, ...]) -> list[str]:
    """all_reduce of (rank+1)*pattern at each count; returns this rank's wrong results."""
    import torch
    import torch.distributed as dist

    wrong: list[str] = []
    total = world * (world + 1) / 2
    for count in counts:
        base = (torch.arange(count, device=device) % 251 + 1).to(torch.float32)
        t = base * (rank + 1)
        if has_fault("allreduce-wrong") and rank == 0:  # test hook: a wrong contribution
            t[count // 2] += 1
        dist.all_reduce(t)
        expected = base * total
        if not bool(torch.equal(t, expected)):
            bad = int((t != expected).sum())
            wrong.append(f"rank {rank}: {count} floats: {bad} element(s) wrong")
    return wrong


def _time_all_reduce(ctx: Context, device: Any, nbytes: int, iters: int) -> float:
    """Seconds per all_reduce of `nbytes` on this rank (events on GPUs, clock on CPUs)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    for _ in range(2 if device.type == "cpu" else 5):  # rccl-tests' default warm-up: -w 5
        dist.all_reduce(t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        dist.barrier()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(t)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0 / iters
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    return (time.perf_counter() - t0) / iters


def _mean_over_ranks(value: float, device: Any, world: int) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / world


def run_rank(ctx: Context, backend: str, rank: int, world: int, local: int) -> CheckResult:
    """This process's part as one rank: init, check sums, sweep, tear down."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    device = _join_group(ctx, backend, rank, world, local)
    phases = {"init_process_group": time.perf_counter() - t0}
    try:
        result = _checked_sums(backend, rank, world, device)
        # where the check's time goes (on one GPU: 0.95 s of the quick level, unexplained)
        result.details["phases_s"] = phases
        phases["checked_sums"] = time.perf_counter() - t0 - phases["init_process_group"]
        if world == 1:
            # One rank moves no data (NCCL returns at once): a bandwidth would be fiction.
            result.details["sweep"] = "not run: bandwidth needs 2+ ranks"
            return result
        gpu = backend == "nccl"
        for nbytes in _sweep_sizes(ctx, gpu):
            iters = _iters(ctx, gpu, nbytes)
            result.details["iters"][str(nbytes)] = iters
            seconds = [
                _mean_over_ranks(_time_all_reduce(ctx, device, nbytes, iters), device, world)
                for _ in range(ctx.repeat)
            ]
            _add_bandwidth(result, nbytes, seconds, world)
        return result
    finally:
        t1 = time.perf_counter()
        dist.destroy_process_group()
        phases["destroy_process_group"] = time.perf_counter() - t1
        for key, value in phases.items():
            phases[key] = round(value, 4)


def _join_group(ctx: Context, backend: str, rank: int, world: int, local: int) -> Any:
    """Init the process group as `rank` of `world`; returns this rank's device."""
    import torch
    import torch.distributed as dist

    gpu = backend == "nccl"
    device = torch.device("cuda", local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    kwargs: dict[str, Any] = {"device_id": device} if gpu else {}
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=max(30.0, ctx.timeout_s)),
        **kwargs,
    )
    return device


def _checked_sums(backend: str, rank: int, world: int, device: Any) -> CheckResult:
    """The result's details once every rank's all_reduce sums are right; CheckFailed (with
    how many ranks were wrong) otherwise."""
    counts = CHECK_COUNTS + ((16777259,) if backend == "nccl" else ())
    wrong = _check_sums(rank, world, device, counts)
    bad_ranks = _mean_over_ranks(float(bool(wrong)), device, world) * world
    result = CheckResult(
        details={
            "backend": backend,
            "world_size": world,
            "rank": rank,
            "device": str(device),
            "checked_counts": list(counts),
            "ranks_wrong": round(bad_ranks),
            "iters": {},
        }
    )
    if wrong or bad_ranks > 0:
        raise CheckFailed(
            f"all_reduce gave wrong sums on {round(bad_ranks)} of {world} "
            f"rank(s); here: {'; '.join(wrong) or 'right'}",
            result,
        )
    return result


def _add_bandwidth(result: CheckResult, nbytes: int, seconds: list[float], world: int) -> None:
    """algbw, busbw and the time per all_reduce of `nbytes`, one sample per repeat."""
    algbw = [nbytes / s / 1e9 for s in seconds]
    size = str(nbytes)
    result.add_metric("algbw", algbw, "GB/s", dtype="fp32", size=size)
    result.add_metric(
        "busbw", [a * bus_factor(world) for a in algbw], "GB/s", dtype="fp32", size=size
    )
    result.add_metric(
        "time", [s * 1e6 for s in seconds], "us", dtype="fp32", size=size, higher_is_better=False
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plan(ctx: Context) -> tuple[str, int, str | None]:
    """(backend, ranks to start, a note for the report) when not under torchrun."""
    if sys.platform == "win32":
        return "gloo", 2, "Windows: no RCCL/NCCL in torch there; gloo on the CPU, 2 ranks"
    if ctx.expect == "cpu":
        return "gloo", 2, None
    if in_wsl():
        raise CheckSkipped(WSL_REASON)
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise CheckFailed(f"--expect {ctx.expect}, but torch sees no GPU")
    if not (dist.is_available() and dist.is_nccl_available()):
        raise CheckFailed(f"torch {torch.__version__} has no NCCL/RCCL backend")
    count = torch.cuda.device_count()
    if count == 1:
        return (
            "nccl",
            1,
            (
                "multi-rank part skipped: 1 GPU visible (a single-rank nccl "
                "all_reduce ran; 2+ GPUs or torchrun across nodes test the rest)"
            ),
        )
    return "nccl", count, None


def _rank_env(rank: int, world: int, port: int, backend: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            SPAWNED_ENV: "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if backend == "gloo" and sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are local: stay on loopback
    return env


def _spawn_ranks(ctx: Context, backend: str, world: int) -> list[dict[str, Any]]:
    """Start `world` rank processes, wait for all (or kill the rest once one has crashed)."""
    from envbuilder.probe.runner import child_command, child_env, output_tail

    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="envbuilder-probe-ranks-") as tmp:
        ctx_file = Path(tmp, "ctx.json")
        ctx_file.write_text(json.dumps(ctx.to_json()))
        procs, logs, outs = [], [], []
        for rank in range(world):
            out, log = Path(tmp, f"rank{rank}.json"), Path(tmp, f"rank{rank}.log")
            env = child_env(_rank_env(rank, world, port, backend))
            with log.open("wb") as fh:
                procs.append(
                    subprocess.Popen(
                        child_command("collectives", ctx_file, out),
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                    )
                )
            logs.append(log)
            outs.append(out)
        _wait_all(procs)
        results = []
        for rank, (out, log) in enumerate(zip(outs, logs, strict=True)):
            if not out.is_file():
                raise RuntimeError(
                    f"rank {rank} died (exit {procs[rank].returncode}):\n{output_tail(log)}"
                )
            results.append(json.loads(out.read_text()))
        return results


def _wait_all(procs: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """Wait for every rank; once one exits non-zero, give the others `grace_s`, then kill."""
    failed_at: float | None = None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        time.sleep(0.05)


def _merge(results: list[dict[str, Any]], note: str | None) -> CheckResult:
    """Rank 0's metrics; the check fails or errs if any rank did."""
    for rank, res in enumerate(results):
        if res["status"] == "error":
            raise RuntimeError(f"rank {rank}: {res['reason']}")
    for rank, res in enumerate(results):
        if res["status"] == "fail":
            raise CheckFailed(
                f"rank {rank}: {res['reason']}",
                CheckResult(details=res["details"], metrics=res["metrics"]),
            )
    first = results[0]
    details = dict(first["details"], mode="spawned", ranks=[r["status"] for r in results])
    return CheckResult(details=details, metrics=first["metrics"], reason=note)


def run(ctx: Context) -> CheckResult:
    """One rank under torchrun (or under our own spawn); otherwise start the ranks."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", "0"))
        gpu = ctx.expect != "cpu" and sys.platform != "win32"
        if gpu and in_wsl():
            raise CheckSkipped(WSL_REASON)
        result = run_rank(ctx, "nccl" if gpu else "gloo", rank, world, local)
        result.details["mode"] = "spawned" if os.environ.get(SPAWNED_ENV) else "torchrun"
        return result
    backend, world, note = _plan(ctx)
    if world == 1:
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
        result = run_rank(ctx, backend, 0, 1, 0)
        result.details["mode"] = "single-rank"
        result.reason = note
        return result
    return _merge(_spawn_ranks(ctx, backend, world), note)

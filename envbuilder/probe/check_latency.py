"""latency: what one tiny kernel launch and one synchronisation cost, in microseconds.

The figure in which WSL2 loses most: every launch and every wait goes through the
paravirtualised driver, so a training step of many small kernels slows down there even where
big kernels run at native speed.

- launch: batches of back-to-back launches of a one-element add, each batch closed by one
  synchronisation; the batch's time divided by its launches (the host's cost of issuing a
  kernel, since a one-element kernel runs faster than the host can issue the next);
- sync: one such launch and a synchronisation, each round trip timed alone.

Host clock (perf_counter) for both: the cost is the host's. Each metric's sample is the median
of its measurements (one sample per repeat); `details` holds the median, 10th/90th percentile,
min and max of all of them. On the CPU only the launch figure exists (torch's dispatch of a
tiny op); there is no device queue to synchronise with.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from envbuilder.probe.common import CheckFailed, CheckResult, Context, spread, torch_device


def plan(ctx: Context) -> dict[str, int]:
    """Launches per batch, batches and round trips per sample, warm-up launches."""
    batches, round_trips = ctx.pick((20, 200), (50, 500), (100, 2000))
    return {"per_batch": 100, "batches": batches, "round_trips": round_trips, "warmup": 200}


def launch_times(op: Callable[[], Any], sync: Callable[[], None], p: dict[str, int]) -> list[float]:
    """Microseconds per launch, one value per batch."""
    clock = time.perf_counter
    out = []
    for _ in range(p["batches"]):
        sync()
        t0 = clock()
        for _ in range(p["per_batch"]):
            op()
        sync()
        out.append((clock() - t0) * 1e6 / p["per_batch"])
    return out


def sync_times(op: Callable[[], Any], sync: Callable[[], None], count: int) -> list[float]:
    """Microseconds of each launch-and-synchronise round trip."""
    clock = time.perf_counter
    out = []
    for _ in range(count):
        t0 = clock()
        op()
        sync()
        out.append((clock() - t0) * 1e6)
    return out


def run(ctx: Context) -> CheckResult:
    """Time tiny launches and synchronisations; the add must have added every time."""
    import torch

    device = torch_device(ctx)
    gpu = device.type == "cuda"
    p = plan(ctx)
    x = torch.zeros(1, dtype=torch.int64, device=device)  # counts every launch exactly

    def op() -> None:
        x.add_(1)

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize(device)

    for _ in range(p["warmup"]):
        op()
    launch_samples: list[float] = []
    sync_samples: list[float] = []
    all_launch: list[float] = []
    all_sync: list[float] = []
    for _ in range(ctx.repeat):
        per_launch = launch_times(op, sync, p)
        all_launch += per_launch
        launch_samples.append(statistics.median(per_launch))
        if gpu:
            round_trips = sync_times(op, sync, p["round_trips"])
            all_sync += round_trips
            sync_samples.append(statistics.median(round_trips))
    launches = p["warmup"] + ctx.repeat * (
        p["batches"] * p["per_batch"] + (p["round_trips"] if gpu else 0)
    )
    if int(x.item()) != launches:
        raise CheckFailed(f"{launches} one-element adds gave {int(x.item())}")
    result = CheckResult(
        details={"device": str(device), **p, "launch_us": spread(all_launch), "launches": launches}
    )
    result.add_metric("launch_latency", launch_samples, "us", higher_is_better=False)
    if gpu:
        result.details["sync_us"] = spread(all_sync)
        result.add_metric("sync_latency", sync_samples, "us", higher_is_better=False)
    else:
        result.details["sync_us"] = "not measured: the CPU has no device queue to wait for"
    return result

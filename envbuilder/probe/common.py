"""What every check shares: its context, its result, metrics, faults and timers.

This module (like all of `envbuilder.probe`) uses the standard library only at import time;
torch is imported inside the functions that need it, so the parent process never loads it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.core import records
from envbuilder.core.records import key
from envbuilder.probe.options import ProbeOptions

#: Test-only fault injection: a comma-separated list in this variable (see docs/probe.md).
FAULT_ENV = "ENVBUILDER_PROBE_FAULT"


class CheckFailed(Exception):
    """A check ran and found the environment wrong (status "fail").

    `result` carries what the check measured before it failed (details still go to the report).
    """

    def __init__(self, message: str, result: CheckResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class CheckSkipped(Exception):
    """A check does not apply here (status "skip"); the message is the reason."""


@dataclass(frozen=True, kw_only=True)
class Context(ProbeOptions):
    """What a check child knows about the run: the user's options (every key of ProbeOptions,
    so an option added there reaches the checks), as plain values, and what the parent found."""

    timeout_s: float = key(
        "the per-check timeout in seconds (--timeout, else the level's)", default=120.0
    )
    #: torch's facts as the device check found them (torch, hip, cuda, devices), for a check
    #: that runs in a process without torch (conformance beside the GPU checks); None: ask torch
    device_facts: dict[str, Any] | None = key(
        "torch's facts as the device check found them (torch, hip, cuda, devices); None: ask torch",
        default=None,
    )

    def to_json(self) -> dict[str, Any]:
        return records.to_json(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Context:
        return records.from_json(Context, data)

    def pick(self, quick: Any, standard: Any, long: Any, workload: Any = None) -> Any:
        """The value for this run's level; `workload` falls back to the standard level's."""
        if self.level == "workload":
            return standard if workload is None else workload
        return {"quick": quick, "standard": standard, "long": long}[self.level]


@dataclass
class CheckResult:
    """What a check returns. The runner adds the name, the duration and the status."""

    details: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    #: A note for a passing check (e.g. the part that was skipped, and why).
    reason: str | None = None

    def add_metric(
        self,
        name: str,
        samples: Sequence[float],
        unit: str,
        *,
        dtype: str | None = None,
        size: str | None = None,
        higher_is_better: bool = True,
    ) -> None:
        """Record a metric; its value is the median of `samples` (one sample per repeat)."""
        self.metrics.append(
            metric(name, samples, unit, dtype=dtype, size=size, higher_is_better=higher_is_better)
        )


#: The number formats a metric's dtype names.
DTYPES = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class Metric:
    """One metric of a check, as the report holds it: every key is written (None as null); its
    JSON form and the report schema's `metric` come from these declarations."""

    name: str = key("the metric's name", pattern=r".+", form="a name")
    value: float = key("the median of the samples")
    unit: str = key("the unit", pattern=r".+", form="a unit")
    dtype: str | None = key("the number format, where it matters", choices=DTYPES)
    size: str | None = key("the problem size (bytes, a shape), where there are several")
    samples: tuple[float, ...] = key(
        "one sample per repeat (the value is their median)",
        schema={"items": {"type": "number"}, "minItems": 1},
    )
    higher_is_better: bool = key("whether a higher value is better")


def metric(
    name: str,
    samples: Sequence[float],
    unit: str,
    *,
    dtype: str | None = None,
    size: str | None = None,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """A metric in the report's shape: `value` is the median of `samples`."""
    clean = tuple(float(s) for s in samples)
    if not clean:
        raise ValueError(f"metric {name} has no samples")
    value = statistics.median(clean)
    return records.to_json(Metric(name, value, unit, dtype, size, clean, higher_is_better))


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """Median, 10th and 90th percentile (nearest rank), min, max and count of `values`.

    For figures measured many times within one sample (a launch, a training step), whose
    tail says more than the median alone.
    """
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("spread of no values")

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {
        "median": statistics.median(ordered),
        "p10": rank(0.1),
        "p90": rank(0.9),
        "min": ordered[0],
        "max": ordered[-1],
        "n": len(ordered),
    }


def faults() -> frozenset[str]:
    """The faults injected by a test through ENVBUILDER_PROBE_FAULT (empty in real runs)."""
    raw = os.environ.get(FAULT_ENV, "")
    return frozenset(f.strip() for f in raw.split(",") if f.strip())


def has_fault(name: str) -> bool:
    return name in faults()


def in_wsl() -> bool:
    """True inside WSL (1 or 2): its kernel names itself "microsoft"."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return "microsoft" in Path("/proc/sys/kernel/osrelease").read_text().lower()
    except OSError:
        return False


def local_rank() -> int:
    """The GPU index this process should use: torchrun's LOCAL_RANK, else 0."""
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


def torch_device(ctx: Context) -> Any:
    """The torch device the compute checks use.

    `--expect cpu` runs on the CPU even where a GPU is visible (it tests what the environment
    promises); `--expect rocm|cuda` with no GPU visible is a failure, never a silent CPU run.
    """
    import torch

    if ctx.expect == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise CheckFailed(
            f"--expect {ctx.expect}, but torch sees no GPU "
            f"(torch {torch.__version__}, hip={torch.version.hip}, "
            f"cuda={torch.version.cuda})"
        )
    index = local_rank() % max(1, torch.cuda.device_count())
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def time_loop(fn: Callable[[], Any], device: Any, iters: int) -> float:
    """Seconds per call of `fn`, over `iters` back-to-back calls.

    On a GPU the time comes from device events around the loop (the queue stays full, so
    launch gaps do not count); on the CPU from a monotonic clock.
    """
    import torch

    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def calibrate(
    fn: Callable[[], Any],
    device: Any,
    target_s: float,
    *,
    warmup_s: float = 0.0,
    min_iters: int = 3,
    max_iters: int = 10_000,
) -> int:
    """Warm `fn` up (first calls load kernels and handles; then about `warmup_s` seconds of
    calls, so clocks settle) and return how many calls fill about `target_s` seconds."""
    fn()
    per_call = time_loop(fn, device, 2)
    if per_call <= 0:
        return max_iters
    if warmup_s > 0:
        time_loop(fn, device, max(1, min(max_iters, int(warmup_s / per_call))))
        per_call = time_loop(fn, device, max(2, min(max_iters, int(0.02 / per_call))))
    return max(min_iters, min(max_iters, int(target_s / per_call)))

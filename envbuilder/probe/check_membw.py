"""membw: device-to-device copy bandwidth, counting bytes read plus bytes written.

On GPUs also host-to-device and device-to-host copies from/to pinned memory (the path that WSL's
paravirtualized GPU makes slower, if anything), each way alone and both ways at once (two
streams, one copy each way in flight together: rocm-bandwidth-test's bidirectional figure, the
bytes moved both ways over the time). Each copy is checked for the right contents.
"""

from __future__ import annotations

from typing import Any

from envbuilder.probe.common import (
    CheckFailed,
    CheckResult,
    Context,
    calibrate,
    time_loop,
    torch_device,
)


def _buffer_bytes(ctx: Context, device: Any) -> int:
    import torch

    if device.type == "cuda":
        wanted: int = ctx.pick(256 << 20, 1 << 30, 4 << 30)
        free, _total = torch.cuda.mem_get_info(device)
        return int(min(wanted, free // 4))
    return int(ctx.pick(64 << 20, 256 << 20, 1 << 30))


def _verify(dst: Any, src: Any, what: str) -> None:
    import torch

    if not bool(torch.equal(dst.to(src.device), src)):
        raise CheckFailed(f"{what}: the copy's contents differ from the source")


def _bandwidth(copy: Any, device: Any, ctx: Context, moved_bytes: int) -> list[float]:
    """GB/s samples (one per repeat) of `copy`, counting `moved_bytes` per call."""
    gpu = device.type == "cuda"
    iters = calibrate(
        copy,
        device,
        ctx.pick(0.05, 0.1, 0.3) if gpu else 0.05,
        warmup_s=0.02 if gpu else 0.0,
        min_iters=2,
    )
    return [moved_bytes / time_loop(copy, device, iters) / 1e9 for _ in range(ctx.repeat)]


def _both_ways_seconds(h2d: Any, d2h: Any, device: Any, iters: int) -> float:
    """Seconds per pair of copies, one each way on its own stream, all in flight together."""
    import torch

    current = torch.cuda.current_stream(device)
    streams = [torch.cuda.Stream(device), torch.cuda.Stream(device)]
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record(current)
    for stream, copy in zip(streams, (h2d, d2h), strict=True):
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            for _ in range(iters):
                copy()
    for stream in streams:
        current.wait_stream(stream)
    end.record(current)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000.0 / iters


def _both_ways(h2d: Any, d2h: Any, device: Any, ctx: Context, nbytes: int) -> list[float]:
    """GB/s samples of both directions at once (2 x nbytes moved per pair of copies)."""
    _both_ways_seconds(h2d, d2h, device, 1)  # warm-up
    per_pair = _both_ways_seconds(h2d, d2h, device, 2)
    iters = max(2, min(10_000, int(ctx.pick(0.05, 0.1, 0.3) / per_pair))) if per_pair > 0 else 2
    return [
        2 * nbytes / _both_ways_seconds(h2d, d2h, device, iters) / 1e9 for _ in range(ctx.repeat)
    ]


def _host_link(result: CheckResult, src: Any, dst: Any, ctx: Context, nbytes: int) -> None:
    """Pinned host <-> device copies: each way alone, then both ways at once; checked."""
    import torch

    device = src.device
    host_bytes = min(nbytes, 256 << 20)
    host = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=True)
    back = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=True)
    part = src[:host_bytes]

    def h2d() -> None:
        dst[:host_bytes].copy_(host, non_blocking=True)

    def d2h() -> None:
        host.copy_(part, non_blocking=True)

    def d2h_back() -> None:
        back.copy_(part, non_blocking=True)

    # d2h first: afterwards `host` holds src's bytes, so h2d's result is checkable too.
    size = str(host_bytes)
    result.add_metric("d2h_bandwidth", _bandwidth(d2h, device, ctx, host_bytes), "GB/s", size=size)
    torch.cuda.synchronize(device)
    _verify(host, part, "device-to-host")
    result.add_metric("h2d_bandwidth", _bandwidth(h2d, device, ctx, host_bytes), "GB/s", size=size)
    torch.cuda.synchronize(device)
    _verify(dst[:host_bytes], part, "host-to-device")
    dst[:host_bytes].zero_()
    both = _both_ways(h2d, d2h_back, device, ctx, host_bytes)
    result.add_metric("bidir_bandwidth", both, "GB/s", size=size)
    torch.cuda.synchronize(device)
    _verify(dst[:host_bytes], part, "host-to-device (both ways at once)")
    _verify(back, part, "device-to-host (both ways at once)")


def run(ctx: Context) -> CheckResult:
    """Copy bandwidth on the device (and over the host link on GPUs)."""
    import torch

    device = torch_device(ctx)
    nbytes = _buffer_bytes(ctx, device)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    result = CheckResult(details={"device": str(device), "buffer_bytes": nbytes})

    def d2d() -> None:
        dst.copy_(src)

    samples = _bandwidth(d2d, device, ctx, 2 * nbytes)
    _verify(dst, src, "device-to-device")
    result.add_metric("copy_bandwidth", samples, "GB/s", size=str(nbytes))
    if device.type == "cuda":
        _host_link(result, src, dst, ctx, nbytes)
    return result

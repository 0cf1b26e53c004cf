"""matmul: correct against a float64 reference, then TFLOP/s by dtype and size.

Correctness: fresh random inputs (an odd shape, and a square one on GPUs), the output poisoned
with NaN before the product so an unwritten element fails, and the relative Frobenius error
||C - C_ref|| / ||C_ref|| against a float64 product of the same (rounded) inputs. NaN never
passes (every comparison with NaN is false).

Speed: for each dtype and size, warm-up, then back-to-back products timed with device events
(a monotonic clock on the CPU); one sample per repeat; 2*n^3 operations per product.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from envbuilder.probe.common import (
    CheckFailed,
    CheckResult,
    Context,
    calibrate,
    has_fault,
    time_loop,
    torch_device,
)

#: Largest acceptable relative Frobenius error per dtype (typical values: fp32 ~1e-7..1e-6,
#: tf32 ~3e-4, fp16 ~3e-4, bf16 ~2e-3; see docs/probe.md).
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2}
GPU_DTYPES = ("bf16", "fp16", "tf32", "fp32")
CPU_DTYPES = ("bf16", "fp32")


def _torch_dtype(name: str) -> Any:
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[name]


@contextmanager
def _precision(name: str) -> Iterator[None]:
    """TF32 on for "tf32", off for everything else (restored afterwards)."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if name == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref||_F / ||ref||_F in float64 (NaN if `out` holds a NaN)."""
    diff = out.double() - ref
    return float(diff.norm() / ref.norm())


def check_correct(dtype: str, shape: tuple[int, int, int], device: Any) -> float:
    """The relative error of one product of fresh random inputs; CheckFailed if too large."""
    import torch

    m, k, n = shape
    a = torch.randn(m, k, device=device).to(_torch_dtype(dtype))
    b = torch.randn(k, n, device=device).to(_torch_dtype(dtype))
    c = torch.full((m, n), float("nan"), device=device, dtype=_torch_dtype(dtype))
    with _precision(dtype):
        torch.matmul(a, b, out=c)
    if has_fault("matmul-wrong"):  # test hook: a kernel that gets an eighth of the rows wrong
        c[: max(1, m // 8)].neg_()
    ref = a.double() @ b.double()
    err = relative_error(c, ref)
    if not err <= TOLERANCE[dtype]:  # written so that NaN fails
        raise CheckFailed(
            f"{dtype} {m}x{k}x{n}: relative error {err:.3g} exceeds {TOLERANCE[dtype]:g}"
        )
    return err


def _sizes(ctx: Context, device: Any, elem_bytes: int) -> list[int]:
    """The square sizes to time at this level, dropping those that would not fit."""
    import torch

    if device.type == "cuda":
        # standard: two sizes (2048 also until probe 1.3's H100 run, whose standard level took
        # 10.9 s against its 10 s goal)
        sizes: list[int] = ctx.pick([4096], [4096, 8192], [2048, 4096, 8192, 16384])
        free, _total = torch.cuda.mem_get_info(device)
        budget = 0.4 * free
    else:
        sizes = ctx.pick([256], [512, 1024], [1024, 2048])
        budget = 1 << 30
    return [s for s in sizes if 3 * s * s * elem_bytes <= budget] or sizes[:1]


def time_matmul(dtype: str, size: int, ctx: Context, device: Any) -> tuple[list[float], int]:
    """TFLOP/s samples (one per repeat) of size^3 products, and the calls per sample."""
    import torch

    gpu = device.type == "cuda"
    a = torch.randn(size, size, device=device).to(_torch_dtype(dtype))
    b = torch.randn(size, size, device=device).to(_torch_dtype(dtype))
    c = torch.empty(size, size, device=device, dtype=_torch_dtype(dtype))

    def product() -> None:
        torch.matmul(a, b, out=c)

    samples: list[float] = []
    with _precision(dtype):
        iters = calibrate(
            product,
            device,
            # quick and standard: short windows (the levels' time goals; a 4096^3 product is
            # ~0.2 ms on an H200, an 8192^3 fp32 one ~20 ms on an H100: the standard level's 12
            # windows of 0.15 s and 0.05 s of warm-up each took 2.4 of its 18.7 s there)
            ctx.pick(0.03, 0.06, 0.5) if gpu else 0.05,
            warmup_s=ctx.pick(0.01, 0.02, 0.2) if gpu else 0.0,
        )
        for _ in range(ctx.repeat):
            seconds = time_loop(product, device, iters)
            samples.append(2.0 * size**3 / seconds / 1e12)
    if not bool(torch.isfinite(c).all()):
        raise CheckFailed(f"{dtype} {size}^3: the timed product holds NaN or Inf")
    return samples, iters


def run(ctx: Context) -> CheckResult:
    """Correctness for every dtype, then TFLOP/s per dtype and size."""
    import torch

    device = torch_device(ctx)
    gpu = device.type == "cuda"
    dtypes = GPU_DTYPES if gpu else CPU_DTYPES
    shapes = [(1031, 997, 515)] + ([(2048, 2048, 2048)] if gpu else [])
    result = CheckResult(
        details={"device": str(device), "tolerance": TOLERANCE, "errors": {}, "iters": {}}
    )
    if not gpu:
        result.details["not_run"] = {
            "tf32": "no TF32 on CPUs",
            "fp16": "slow and rarely used on CPUs",
        }
    for dtype in dtypes:
        for shape in shapes:
            err = check_correct(dtype, shape, device)
            result.details["errors"][f"{dtype} {'x'.join(map(str, shape))}"] = err
    for dtype in dtypes:
        for size in _sizes(ctx, device, torch.empty((), dtype=_torch_dtype(dtype)).element_size()):
            samples, iters = time_matmul(dtype, size, ctx, device)
            result.details["iters"][f"{dtype} {size}"] = iters
            result.add_metric("tflops", samples, "TFLOP/s", dtype=dtype, size=str(size))
    return result

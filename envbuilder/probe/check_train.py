"""train: ResNet-50 trained on synthetic data; images/s, the step time's spread, and a loss
that stays finite and falls.

The guide's training-throughput figure. The model is torchvision's `resnet50()` where
torchvision imports (at the long and workload levels) and the probe's own definition of the
same network otherwise (`envbuilder.probe.resnet`; the quick and standard levels always use it,
so they do not pay torchvision's import). One fixed random batch (channels-last) with random
labels of the 1000 classes; momentum SGD through torch's functional form (the optimizer class's
constructor imports torch._dynamo: seconds a quick probe would pay); on GPUs under fp16 autocast
with a GradScaler, on CPUs in fp32. The network memorises the batch, so the loss falls within a
few steps; every loss must be finite and the best of the second half below 90% of the first.

Levels: the input size and batch grow from quick (64x64, GPU; 32x32, CPU) to `workload`
(224x224, batch 256 on GPUs, halved until it fits; cuDNN/MIOpen autotuning on), which is timed
for seconds so that the figure is stable. `--find-batch` also searches the largest power-of-two
batch that trains at the level's input size, recovering from out-of-memory errors (GPUs only).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import itertools
import math
import time
from collections.abc import Iterator
from typing import Any

from envbuilder.probe.common import (
    CheckFailed,
    CheckResult,
    Context,
    has_fault,
    spread,
    torch_device,
)
from envbuilder.probe.resnet import resnet50

LEARNING_RATE = 0.01
MOMENTUM = 0.9
#: The largest batch --find-batch tries (a bound on the search, not on any real GPU).
MAX_FIND_BATCH = 1 << 16


def plan(ctx: Context, gpu: bool) -> dict[str, Any]:
    """Input size, batch, warm-up steps, and the timed steps (at least, at most, and the
    seconds they should fill) at this level."""
    if gpu:
        size, batch, warmup, timed_s = ctx.pick(
            (64, 32, 3, 0.0), (128, 64, 5, 0.5), (224, 128, 10, 5.0), (224, 256, 15, 10.0)
        )
        low, high = ctx.pick((4, 4), (5, 200), (10, 1000), (20, 2000))
    else:
        size, batch, warmup, timed_s = ctx.pick(
            (32, 2, 0, 0.0), (64, 4, 1, 1.0), (64, 8, 2, 3.0), (112, 8, 2, 5.0)
        )
        low, high = ctx.pick((2, 2), (3, 20), (3, 50), (3, 50))
    return {
        "size": size,
        "batch": batch,
        "warmup": warmup,
        "timed_s": timed_s,
        "min_steps": low,
        "max_steps": high,
    }


def uses_torchvision(ctx: Context) -> bool:
    """Whether this level trains torchvision's model (where it imports): long and workload.

    Building torchvision's model, its import included, took 6.4 s on an H100 machine (torch
    2.11, torchvision 0.26): three quarters of the standard level's train check. The probe's own
    definition is the same network (tested against torchvision's names, shapes and
    initialisation), so the levels with a time goal use it.
    """
    return ctx.level in ("long", "workload")


def build_model(device: Any, use_torchvision: bool) -> tuple[Any, str]:
    """A fresh ResNet-50 on `device` in channels-last, and where its definition came from.

    Built where it trains (the random initialisation runs there; on a GPU it costs nothing).
    Not on the meta device and moved: torch's meta kernels for `normal_` and `empty_like` go
    through torch._refs, whose first use imports torch._dynamo and sympy (seconds).
    """
    import torch

    if use_torchvision and importlib.util.find_spec("torchvision") is not None:
        models = importlib.import_module("torchvision.models")
        version = getattr(importlib.import_module("torchvision"), "__version__", "?")
        with torch.device(device):  # its constructor takes no device
            model = models.resnet50()
        source = f"torchvision {version}"
    else:
        model, source = resnet50(device=device), "envbuilder.probe.resnet"
    return model.to(memory_format=torch.channels_last).train(), source


class SGD:
    """Momentum SGD as `torch.optim.SGD(params, lr, momentum)` steps (its functional form),
    without the Optimizer class (whose constructor imports torch._dynamo). GradScaler drives
    it like the class: it reads `param_groups` and calls `step()`."""

    def __init__(self, params: Any, lr: float, momentum: float) -> None:
        self.params: list[Any] = list(params)
        self.param_groups = [{"params": self.params, "lr": lr}]
        self.lr, self.momentum = lr, momentum
        self.buffers: list[Any] = [None] * len(self.params)
        # One fused call per step over every tensor, on CPUs too (torch.optim.SGD loops over
        # tensors there): the same arithmetic, 161 tensors, fewer dispatches.
        self.foreach = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        sgd = importlib.import_module("torch.optim.sgd").sgd
        with torch.no_grad():
            sgd(
                self.params,
                [p.grad for p in self.params],
                self.buffers,
                foreach=self.foreach,
                weight_decay=0.0,
                momentum=self.momentum,
                lr=self.lr,
                dampening=0.0,
                nesterov=False,
                maximize=False,
            )


class Trainer:
    """ResNet-50 with its optimizer, one fixed synthetic batch, and one training step."""

    def __init__(self, device: Any, batch: int, size: int, use_torchvision: bool) -> None:
        import torch

        torch.manual_seed(0)
        self.device = device
        self.gpu = device.type == "cuda"
        self.model, self.source = build_model(device, use_torchvision)
        self.opt: Any = SGD(self.model.parameters(), LEARNING_RATE, MOMENTUM)  # GradScaler's duck
        self.scaler = torch.amp.GradScaler("cuda") if self.gpu else None
        self.amp_dtype = torch.float16 if self.gpu else None
        self.batch, self.size = batch, size
        self.x, self.y = synthetic_batch(device, batch, size)

    def step(self, x: Any | None = None) -> Any:
        """One optimizer step on the fixed batch (or on `x`); returns the loss tensor."""
        import torch

        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.gpu):
            out = self.model(self.x if x is None else x)
        loss = torch.nn.functional.cross_entropy(out.float(), self.y)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        return loss.detach()

    def resize(self, batch: int) -> None:
        """Train on a fresh batch of another size (the batch finder)."""
        self.x = self.y = None
        self.batch = batch
        self.x, self.y = synthetic_batch(self.device, batch, self.size)


def synthetic_batch(device: Any, batch: int, size: int) -> tuple[Any, Any]:
    """Random images (channels-last) and random labels of the 1000 classes."""
    import torch

    x = torch.randn(batch, 3, size, size, device=device).contiguous(
        memory_format=torch.channels_last
    )
    return x, torch.randint(0, 1000, (batch,), device=device)


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error of the GPU (torch.cuda.OutOfMemoryError, or the RuntimeError
    older torch raises), which the process survives."""
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_memory(trainer: Trainer | None = None) -> None:
    """Drop gradients and cached blocks after an out-of-memory error."""
    import torch

    if trainer is not None:
        trainer.opt.zero_grad(set_to_none=True)
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def fits(trainer: Trainer, batch: int) -> bool:
    """Whether two training steps at `batch` run without running out of memory (two: the
    second holds the optimizer's state as well as the activations)."""
    import torch

    try:
        trainer.resize(batch)
        for _ in range(2):
            trainer.step()
        torch.cuda.synchronize(trainer.device)
        return True
    except Exception as exc:
        if not is_oom(exc):
            raise
    trainer.x = trainer.y = None
    free_memory(trainer)
    return False


def largest_batch(
    trainer: Trainer, start: int, limit: int = MAX_FIND_BATCH
) -> tuple[int, list[list[Any]]]:
    """The largest power-of-two batch from `start` (up, or down when `start` does not fit)
    that trains, and the tries as [batch, fits]. 0 when not even a batch of 1 fits."""
    tries: list[list[Any]] = []
    batch = start
    while True:
        ok = fits(trainer, batch)
        tries.append([batch, ok])
        if ok and batch * 2 <= limit and (len(tries) == 1 or tries[-2][1]):
            batch *= 2
        elif ok:
            return batch, tries
        elif len(tries) > 1 and tries[-2][1]:
            return batch // 2, tries
        elif batch == 1:
            return 0, tries
        else:
            batch //= 2


def _losses_ok(losses: list[float]) -> None:
    """CheckFailed unless every loss is finite and the best of the second half is below 90% of
    the first."""
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            raise CheckFailed(f"loss is {loss} at step {i} (losses: {_short(losses)})")
    late = losses[len(losses) // 2 :]
    if not min(late) < 0.9 * losses[0]:
        raise CheckFailed(
            f"loss did not fall: first {losses[0]:.4g}, best of the second half "
            f"{min(late):.4g} (losses: {_short(losses)})"
        )


def _short(losses: list[float]) -> str:
    shown = [f"{v:.4g}" for v in losses[:12]]
    return ", ".join(shown) + (f", ... ({len(losses)} steps)" if len(losses) > 12 else "")


def warm_up(trainer: Trainer, steps: int) -> tuple[list[float], float]:
    """`steps` warm-up steps and one more, timed; their losses, and that step's seconds.

    Under the test hook train-nan the timed step's batch holds a NaN.
    """
    losses = [float(trainer.step().item()) for _ in range(steps)]
    x = None
    if has_fault("train-nan"):  # test hook: one poisoned batch
        x = trainer.x.clone()
        x[0, 0, 0, 0] = float("nan")
    t0 = time.perf_counter()
    losses.append(float(trainer.step(x).item()))
    return losses, time.perf_counter() - t0


def timed_steps(trainer: Trainer, steps: int) -> tuple[list[float], list[Any]]:
    """Seconds per step of `steps` back-to-back steps, and their loss tensors (read after).

    On GPUs, an event after every step (recording one costs microseconds beside a step of
    milliseconds) and one synchronisation at the end, as a training loop runs; on CPUs a clock.
    """
    import torch

    losses = []
    if not trainer.gpu:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            losses.append(trainer.step())
            times.append(time.perf_counter() - t0)
        return times, losses
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    events[0].record()
    for i in range(steps):
        losses.append(trainer.step())
        events[i + 1].record()
    events[-1].synchronize()
    return [a.elapsed_time(b) / 1000.0 for a, b in itertools.pairwise(events)], losses


@contextlib.contextmanager
def autotuning(on: bool) -> Iterator[None]:
    """cuDNN/MIOpen benchmark mode for the `workload` level (restored afterwards): the first
    step tries each convolution's algorithms, as throughput runs of the guide do."""
    import torch

    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def first_step(trainer: Trainer) -> float:
    """The first step's loss; on a GPU that runs out of memory, the batch is halved until
    one step fits (the batch that fits, for the workload level's 256 on smaller GPUs)."""
    while True:
        try:
            return float(trainer.step().item())
        except Exception as exc:
            if not (trainer.gpu and is_oom(exc) and trainer.batch > 1):
                raise
        trainer.x = trainer.y = None
        free_memory(trainer)
        trainer.resize(trainer.batch // 2)


def _timed_count(shape: dict[str, Any], step_s: float) -> int:
    """Timed steps per sample: enough to fill the level's seconds, within its bounds."""
    low, high = int(shape["min_steps"]), int(shape["max_steps"])
    wanted = int(shape["timed_s"] / step_s) if step_s > 0 else high
    return max(low, min(high, wanted))


def measure(trainer: Trainer, shape: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Warm up, then `repeat` samples of timed steps: images/s and the median step time per
    sample, every step's time, and every loss (CheckFailed when one is not finite or the
    loss does not fall)."""
    import torch

    t0 = time.perf_counter()
    losses = [first_step(trainer)]  # loads the convolution kernels: timed, details.first_step_s
    first_s = time.perf_counter() - t0
    warm, step_s = warm_up(trainer, shape["warmup"])
    losses += warm
    steps = _timed_count(shape, step_s)
    images, medians, all_times = [], [], []
    for _ in range(repeat):
        times, loss_tensors = timed_steps(trainer, steps)
        losses += torch.stack(loss_tensors).float().tolist()
        images.append(trainer.batch * steps / sum(times))
        medians.append(1000.0 * sorted(times)[len(times) // 2])
        all_times += times
    _losses_ok(losses)
    finite = torch.stack([p.detach().isfinite().all() for p in trainer.model.parameters()])
    if not bool(finite.all()):
        raise CheckFailed("non-finite parameters after training")
    return {
        "steps": steps,
        "images": images,
        "medians": medians,
        "times": all_times,
        "losses": losses,
        "first_step_s": first_s,
    }


def _details(trainer: Trainer, shape: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    step_ms = {k: (v * 1000.0 if k != "n" else v) for k, v in spread(run["times"]).items()}
    losses = run["losses"]
    return {
        "device": str(trainer.device),
        "model": f"ResNet-50 ({trainer.source})",
        "input": f"{trainer.size}x{trainer.size}",
        "batch": trainer.batch,
        "batch_wanted": shape["batch"],
        "amp_dtype": "fp16" if trainer.gpu else None,
        "grad_scaler": trainer.scaler is not None,
        "scale": float(trainer.scaler.get_scale()) if trainer.scaler is not None else None,
        "channels_last": True,
        "optimizer": f"SGD lr {LEARNING_RATE} momentum {MOMENTUM}",
        "warmup_steps": shape["warmup"] + 2,  # the first, the warm-up, the timed one
        "timed_steps": run["steps"],
        "step_ms": step_ms,
        "losses_first": losses[:8],
        "losses_last": losses[-4:],
        "first_step_s": round(run["first_step_s"], 3),
    }


def find_batch(trainer: Trainer, result: CheckResult) -> None:
    """--find-batch: the largest power-of-two batch that trains (GPUs; the search runs
    without autotuning, which would tune every batch size it tries)."""
    if not trainer.gpu:
        result.details["find_batch"] = (
            "not run: on the CPU, running out of host memory ends the process (the kernel's "
            "OOM killer), not an error the probe can recover from"
        )
        return
    with autotuning(False):
        best, tries = largest_batch(trainer, trainer.batch)
    result.details["find_batch"] = {"largest": best, "tries": tries}
    size = f"{trainer.size}x{trainer.size}"
    if best:
        result.add_metric("max_batch", [float(best)], "images", dtype="fp16", size=size)


def run(ctx: Context) -> CheckResult:
    """Train ResNet-50 (checked), time its steps; optionally find the largest batch."""
    device = torch_device(ctx)
    gpu = device.type == "cuda"
    shape = plan(ctx, gpu)
    with autotuning(gpu and ctx.level == "workload"):
        t0 = time.perf_counter()
        trainer = Trainer(device, shape["batch"], shape["size"], uses_torchvision(ctx))
        build_s = time.perf_counter() - t0
        run = measure(trainer, shape, ctx.repeat)
    dtype = "fp16" if gpu else "fp32"
    size = f"{trainer.size}x{trainer.size}"
    result = CheckResult(details=_details(trainer, shape, run))
    result.details["build_s"] = round(build_s, 3)
    result.add_metric("images_per_s", run["images"], "img/s", dtype=dtype, size=size)
    result.add_metric(
        "step_time", run["medians"], "ms", dtype=dtype, size=size, higher_is_better=False
    )
    if ctx.find_batch:
        find_batch(trainer, result)
    return result

"""amp: a small MLP trained under autocast; finite, learning, and how much faster than fp32.

GPUs: fp16 autocast with a GradScaler; CPUs: bf16 autocast (no scaler needed). The task is a
fixed random regression (a linear teacher) from He-initialized weights, so the loss falls
within a few Adam steps.
Passing needs: every loss finite, every parameter finite afterwards, the scaler's scale finite
and positive, and the best loss of the last quarter of steps under 90% of the first loss.
Then step times of fp32 and AMP training on the same model shape are timed.
"""

from __future__ import annotations

import math
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


def _shape(ctx: Context, gpu: bool) -> dict[str, int]:
    """width, depth, batch and the training steps for the correctness run, by level."""
    if gpu:
        return dict(
            ctx.pick(
                {"width": 2048, "depth": 4, "batch": 2048, "steps": 12},
                # standard: 4 layers (8 until probe 1.3's H100 run: an fp32 step took 67 ms
                # there, the check 1.1 s of the standard level's 10.9 s against its 10 s goal)
                {"width": 4096, "depth": 4, "batch": 4096, "steps": 20},
                {"width": 4096, "depth": 8, "batch": 8192, "steps": 50},
            )
        )
    return dict(
        ctx.pick(
            {"width": 256, "depth": 4, "batch": 256, "steps": 12},
            {"width": 512, "depth": 4, "batch": 512, "steps": 30},
            {"width": 1024, "depth": 6, "batch": 1024, "steps": 50},
        )
    )


def _task(shape: dict[str, int], device: Any, seed: int) -> tuple[Any, Any, Any]:
    """A fresh model and a fixed batch (inputs, targets from a linear teacher)."""
    import torch

    torch.manual_seed(seed)
    width, depth = shape["width"], shape["depth"]
    layers: list[Any] = []
    # Built on the device, where its random initialisation runs: built on the CPU and moved,
    # the standard level's 8x4096 MLP (134M parameters, twice) spent seconds in the CPU's RNG.
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width, device=device), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, width, device=device))
    for layer in layers[::2]:  # He init: the signal keeps its scale through the depth
        torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
        torch.nn.init.zeros_(layer.bias)
    model = torch.nn.Sequential(*layers)
    x = torch.randn(shape["batch"], width, device=device)
    teacher = torch.randn(width, width, device=device) / math.sqrt(width)
    return model, x, x @ teacher


class FunctionalAdam:
    """Adam exactly as `torch.optim.Adam(params, lr)` steps (its functional form,
    `torch.optim.adam.adam`, with the class's defaults: foreach on GPUs, per tensor on CPUs),
    without the Optimizer class, whose constructor imports torch._dynamo: seconds, once per
    process, which no training step pays but a quick probe would. GradScaler drives it like the
    class: it reads `param_groups` and calls `step()`.
    """

    def __init__(self, params: Any, lr: float) -> None:
        import torch

        self.params: list[Any] = list(params)
        self.param_groups = [{"params": self.params, "lr": lr}]
        self.lr = lr
        self.exp_avgs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
        ]
        self.exp_avg_sqs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
        ]
        self.state_steps = [torch.tensor(0.0, dtype=torch.float32) for _ in self.params]
        self.foreach = all(p.device.type == "cuda" for p in self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import importlib

        import torch

        adam = importlib.import_module("torch.optim.adam").adam
        with torch.no_grad():
            adam(
                self.params,
                [p.grad for p in self.params],
                self.exp_avgs,
                self.exp_avg_sqs,
                [],
                self.state_steps,
                foreach=self.foreach,
                capturable=False,
                differentiable=False,
                fused=None,
                grad_scale=None,
                found_inf=None,
                amsgrad=False,
                beta1=0.9,
                beta2=0.999,
                lr=self.lr,
                weight_decay=0.0,
                eps=1e-8,
                maximize=False,
            )


def adam_optimizer(params: Any, lr: float) -> Any:
    """FunctionalAdam where torch has the functional form, else torch.optim.Adam."""
    import importlib

    import torch

    # (torch.optim's __init__ deletes its `adam` submodule attribute: import it by name)
    if callable(getattr(importlib.import_module("torch.optim.adam"), "adam", None)):
        return FunctionalAdam(params, lr)
    return torch.optim.Adam(params, lr=lr)


class Trainer:
    """One training step, fp32 or under autocast (with a GradScaler for fp16)."""

    def __init__(
        self, shape: dict[str, int], device: Any, amp_dtype: Any | None, seed: int = 0
    ) -> None:
        import torch

        self.model, self.x, self.y = _task(shape, device, seed)
        self.device = device
        self.amp_dtype = amp_dtype
        self.opt = adam_optimizer(self.model.parameters(), lr=1e-3)
        use_scaler = amp_dtype is torch.float16
        self.scaler = torch.amp.GradScaler(device.type) if use_scaler else None
        self.last_loss: Any = None

    def step(self, x: Any | None = None) -> Any:
        """One optimizer step on the fixed batch (or on `x`); returns the loss tensor."""
        import torch

        inputs = self.x if x is None else x
        self.opt.zero_grad(set_to_none=True)
        if self.amp_dtype is None:
            loss = torch.nn.functional.mse_loss(self.model(inputs), self.y)
            loss.backward()
            self.opt.step()
        else:
            with torch.autocast(self.device.type, dtype=self.amp_dtype):
                out = self.model(inputs)
            loss = torch.nn.functional.mse_loss(out.float(), self.y)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                loss.backward()
                self.opt.step()
        self.last_loss = loss
        return loss


def check_training(trainer: Trainer, steps: int) -> dict[str, Any]:
    """Train `steps` steps; CheckFailed unless finite, learning and (fp16) scale finite."""
    import torch

    losses: list[float] = []
    for i in range(steps):
        x = None
        if has_fault("amp-nan") and i == steps // 2:  # test hook: one poisoned batch
            x = trainer.x.clone()
            x[0, 0] = float("nan")
        loss = float(trainer.step(x).item())
        losses.append(loss)
        if not math.isfinite(loss):
            raise CheckFailed(f"loss is {loss} at step {i} (losses so far: {losses})")
    bad = [n for n, p in trainer.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise CheckFailed(f"non-finite parameters after training: {bad}")
    scale = float(trainer.scaler.get_scale()) if trainer.scaler is not None else None
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise CheckFailed(f"GradScaler scale is {scale}")
    tail = losses[-max(1, steps // 4) :]
    if not min(tail) < 0.9 * losses[0]:
        raise CheckFailed(
            f"loss did not fall: first {losses[0]:.4g}, last quarter's best "
            f"{min(tail):.4g} (losses: {losses})"
        )
    return {"losses": losses, "scale": scale}


def time_steps(trainer: Trainer, ctx: Context) -> list[float]:
    """Milliseconds per training step, one sample per repeat."""
    gpu = trainer.device.type == "cuda"
    iters = calibrate(
        trainer.step,
        trainer.device,
        ctx.pick(0.05, 0.1, 1.0) if gpu else 0.05,  # standard: 0.3 s until its 10 s goal
        warmup_s=0.02 if gpu else 0.0,
        min_iters=2,
    )
    samples = [1000.0 * time_loop(trainer.step, trainer.device, iters) for _ in range(ctx.repeat)]
    if not math.isfinite(float(trainer.last_loss.item())):
        raise CheckFailed("loss became non-finite during the timed steps")
    return samples


def run(ctx: Context) -> CheckResult:
    """Train under autocast (checked), then time fp32 vs AMP steps."""
    import torch

    device = torch_device(ctx)
    gpu = device.type == "cuda"
    amp_dtype, amp_name = (torch.float16, "fp16") if gpu else (torch.bfloat16, "bf16")
    shape = _shape(ctx, gpu)
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32, not TF32
    amp = Trainer(shape, device, amp_dtype)
    trained = check_training(amp, shape["steps"])
    result = CheckResult(
        details={
            "device": str(device),
            "amp_dtype": amp_name,
            "grad_scaler": amp.scaler is not None,
            **shape,
            **trained,
        }
    )
    fp32_ms = time_steps(Trainer(shape, device, None, seed=1), ctx)
    amp_ms = time_steps(amp, ctx)
    result.add_metric("step_time", fp32_ms, "ms", dtype="fp32", higher_is_better=False)
    result.add_metric("step_time", amp_ms, "ms", dtype=amp_name, higher_is_better=False)
    result.add_metric(
        "amp_speedup", [f / a for f, a in zip(fp32_ms, amp_ms, strict=True)], "x", dtype=amp_name
    )
    return result

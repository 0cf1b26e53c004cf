"""The amp check's Adam: the same numbers as torch.optim.Adam, without importing torch._dynamo.

torch.optim.Adam's constructor imports torch._dynamo (seconds, once per process); the probe's
quick level cannot afford that, so the check steps Adam through torch's functional form. These
tests hold it to the class, bit for bit, on real torch.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from envbuilder.probe.check_amp import FunctionalAdam  # noqa: E402


def _train(make_opt: Any, *, foreach: bool, scaler: bool, steps: int = 6) -> list[Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    opt = make_opt(list(model.parameters()), foreach)
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if scaler else None
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        if grad_scaler is not None:
            grad_scaler.scale(loss).backward()
            grad_scaler.step(opt)
            grad_scaler.update()
        else:
            loss.backward()
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _functional(params: list[Any], foreach: bool) -> FunctionalAdam:
    opt = FunctionalAdam(params, lr=1e-3)
    opt.foreach = foreach  # the GPU path (foreach) is tested on the CPU too
    return opt


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("scaler", [False, True])
def test_functional_adam_equals_torch_optim_adam(foreach: bool, scaler: bool) -> None:
    ours = _train(_functional, foreach=foreach, scaler=scaler)
    theirs = _train(
        lambda ps, fe: torch.optim.Adam(ps, lr=1e-3, foreach=fe), foreach=foreach, scaler=scaler
    )
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


def test_amp_check_does_not_import_dynamo() -> None:
    """In a fresh interpreter: the amp check runs, passes, and torch._dynamo stays unloaded."""
    code = (
        "import sys\n"
        "from envbuilder.probe.child import run_child\n"
        "from envbuilder.probe.common import Context\n"
        "r = run_child('amp', Context(level='quick', expect='cpu', repeat=1))\n"
        "print(r['status'], 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split()[-2:] == ["pass", "False"], out.stdout + out.stderr

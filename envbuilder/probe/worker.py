"""The shared check worker: one process that imports torch once and runs the checks in turn.

Starting Python, importing torch and initialising the GPU cost seconds; a process per check
paid that six times. The worker pays it once. The parent (runner.CheckWorker) is its
watchdog: it kills the worker's process group when a check outlives its timeout or the
worker dies (a segfault in a kernel, a driver abort), reports that check as an error, and
starts a new worker for the checks after it. Collective ranks are still processes of their
own, started by the collectives check (`--_child`), never forked from here: a process that
holds a CUDA context must not fork.

Protocol: the parent writes one JSON object a line to the worker's stdin,
`{"check": NAME, "out": PATH}`; the worker runs the check, writes its result (child.run_child's
JSON) to PATH atomically, and reads the next line. End of input ends the worker. Its stdout
and stderr go to a log from which the parent cuts each check's output tail.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from envbuilder.probe.child import run_child, write_result
from envbuilder.probe.common import Context

#: Whether gc.freeze() ran in this worker (a list: module state without `global`).
_FROZEN: list[bool] = []


def _matmul_precision() -> str | None:
    torch = sys.modules.get("torch")
    return str(torch.get_float32_matmul_precision()) if torch is not None else None


def _settle(data: dict[str, Any]) -> dict[str, Any]:
    """Finish the check's GPU work and free its memory, so the next check starts clean.

    A kernel error surfaces at the next synchronisation: here, so it counts against the check
    that caused it (as an error, which makes the parent replace this worker). Cached GPU
    memory is returned, so the next check sizes its buffers from the same free memory as in a
    process of its own.
    """
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and not _FROZEN:
        # torch's own objects (hundreds of thousands) live as long as the process: kept out of
        # later collections, which then scan only what the checks made (a full collection with
        # torch loaded took 70-100 ms on the 2-core test machine, once per check)
        gc.freeze()
        _FROZEN.append(True)
    if torch is None or not torch.cuda.is_initialized():
        return data
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception as exc:  # a sticky CUDA/HIP error: this process's context is spent
        details = dict(data["details"], after_check=f"{type(exc).__name__}: {exc}")
        return {
            **data,
            "status": "error",
            "details": details,
            "reason": f"GPU error after the check: {type(exc).__name__}: {exc}",
        }
    return data


def _restore(environ: dict[str, str], precision: str | None) -> None:
    """Undo what a check changed in process-wide state (e.g. MASTER_PORT, TF32)."""
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)
    torch = sys.modules.get("torch")
    if torch is not None and precision is not None:
        torch.set_float32_matmul_precision(precision)


def serve(ctx: Context, requests: TextIO) -> int:
    """Run the checks named on `requests`, one a line, until it ends; return 0."""
    while True:
        line = requests.readline()
        if not line:
            return 0
        request = json.loads(line)
        environ, precision = dict(os.environ), _matmul_precision()
        data = _settle(run_child(str(request["check"]), ctx))
        _restore(environ, precision)
        write_result(Path(request["out"]), data)


def main(ctx_path: str) -> int:
    """Entry of `python -m envbuilder.probe --_worker --_ctx F` (requests on stdin)."""
    ctx = Context.from_json(json.loads(Path(ctx_path).read_text(encoding="utf-8")))
    return serve(ctx, sys.stdin)

"""Running one check and writing its result as JSON (stdlib here; torch in the checks).

`run_child` is what the shared worker (worker.py) calls for each check; `main` is a one-shot
child process (`--_child`), which the collectives check starts for each of its ranks.

Outcomes: the check returns -> "pass"; raises CheckFailed -> "fail"; CheckSkipped -> "skip";
anything else -> "error" with the traceback. A crash or a hang leaves no result file, and the
runner reports that as an error with the tail of this process's output.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from envbuilder.probe.common import (
    CheckFailed,
    CheckResult,
    CheckSkipped,
    Context,
    has_fault,
)
from envbuilder.probe.options import CHECK_NAMES


def _inject_faults(name: str) -> None:
    """Test hooks (ENVBUILDER_PROBE_FAULT): hang:NAME sleeps forever, crash:NAME segfaults.

    (error:NAME, a check that raises, is in run_child.)
    """
    if has_fault(f"hang:{name}"):
        print(f"fault injection: {name} hangs", flush=True)
        while True:
            time.sleep(3600)
    if has_fault(f"crash:{name}"):
        print(f"fault injection: {name} crashes", flush=True)
        if hasattr(signal, "SIGSEGV") and sys.platform != "win32":
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(139)


def _as_json(
    status: str, reason: str | None, result: CheckResult | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    details = dict(result.details) if result else {}
    details.update(extra or {})
    return {
        "status": status,
        "reason": reason,
        "details": details,
        "metrics": list(result.metrics) if result else [],
    }


def run_child(name: str, ctx: Context) -> dict[str, Any]:
    """Run check `name` in this process; never raises for a check's own failure."""
    if name not in CHECK_NAMES:
        raise ValueError(f"unknown check {name!r}")
    _inject_faults(name)
    module = importlib.import_module(f"envbuilder.probe.check_{name}")
    try:
        if has_fault(f"error:{name}"):  # test hook: a check that raises (a bug, a driver error)
            raise RuntimeError(f"fault injection: {name} raises")
        result: CheckResult = module.run(ctx)
    except CheckFailed as exc:
        return _as_json("fail", str(exc), exc.result)
    except CheckSkipped as exc:
        return _as_json("skip", str(exc), None)
    except Exception as exc:  # a driver error, an OOM, a bug: the check errs, the run goes on
        return _as_json(
            "error",
            f"{type(exc).__name__}: {exc}",
            None,
            {"traceback": traceback.format_exc()[-4000:]},
        )
    return _as_json("pass", result.reason, result)


def main(name: str, ctx_path: str, out_path: str) -> int:
    """Entry of `python -m envbuilder.probe --_child NAME --_ctx F --_out F`."""
    ctx = Context.from_json(json.loads(Path(ctx_path).read_text(encoding="utf-8")))
    write_result(Path(out_path), run_child(name, ctx))
    return 0


def write_result(out: Path, data: dict[str, Any]) -> None:
    """Write a check's result atomically: the parent takes the file's presence as "done"."""
    sys.stdout.flush()
    sys.stderr.flush()
    # mkstemp: created exclusively (O_EXCL|O_NOFOLLOW) under an unpredictable name
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, allow_nan=True))
    Path(name).replace(out)

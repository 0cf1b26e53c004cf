"""The shared check worker: one process runs the checks in turn; a watchdog replaces it.

Real processes and real signals: the fault hook (ENVBUILDER_PROBE_FAULT) makes a check hang,
segfault or raise inside the worker; the run must report that check alone and the others must
pass in a new worker. `worker_pid` in each check's details says which process ran it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_probe_run import by_name, make_lock, probe
from test_probe_unit import validate


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe-worker")


def pids(report: dict[str, Any]) -> dict[str, int]:
    """Which worker process ran each check (skipped checks ran nowhere)."""
    return {
        c["name"]: c["details"]["worker_pid"]
        for c in report["checks"]
        if "worker_pid" in c["details"]
    }


def gone(pid: int) -> bool:
    """True when no process `pid` is left (the watchdog killed and reaped it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def test_checks_share_one_worker(workdir: Path) -> None:
    """Without faults every check runs in the same worker process (torch imported once)."""
    code, report, output = probe(
        "--expect", "cpu", "--only", "device", "--only", "matmul", "--only", "membw", tmp=workdir
    )
    assert code == 0, output
    ran = pids(report)
    assert set(ran) == {"device", "matmul", "membw"}
    assert len(set(ran.values())) == 1, ran


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSEGV is a POSIX signal")
def test_hang_and_segfault_in_the_shared_worker_fail_alone(workdir: Path) -> None:
    """The whole quick level with matmul hanging and amp segfaulting in the worker: those two
    are errors with their reasons and output; device ran in the first worker, amp in a
    second, the rest pass in a third; the killed workers are gone.

    Without train: the 20 s timeout that bounds the hang bounds every check, and ResNet-50's
    steps on a CPU shared with other work can take longer (a clean-clone CI run beside the
    issue-30 loop, load average 8 on 2 cores: train timed out). Train's own run is
    tests/probe/test_probe_run.py's quick CPU run (test_quick_cpu_run_passes_every_check)."""
    lock = make_lock(workdir / "self.pylock.toml")
    start = time.monotonic()
    code, report, output = probe(
        *("--level", "quick", "--expect", "cpu", "--lock", str(lock), "--timeout", "20"),
        *("--skip", "train"),
        tmp=workdir,
        fault="hang:matmul,crash:amp",
    )
    assert code == 1, output
    validate(report)
    checks = by_name(report)
    assert {n: c["status"] for n, c in checks.items()} == {
        "device": "pass",
        "topology": "skip",
        "latency": "pass",
        "matmul": "error",
        "amp": "error",
        "train": "skip",
        "collectives": "pass",
        "membw": "pass",
        "conformance": "pass",
    }
    assert checks["matmul"]["reason"] == "timed out after 20 s"
    assert checks["matmul"]["details"]["output_tail"].strip() == "fault injection: matmul hangs"
    assert checks["amp"]["reason"] == f"killed by {signal.SIGSEGV.name}"
    # Each tail is that check's own output: matmul's lines are not repeated under amp.
    assert checks["amp"]["details"]["output_tail"].strip() == "fault injection: amp crashes"
    ran = pids(report)
    assert ran["device"] == ran["latency"] == ran["matmul"], "they share the first worker"
    assert ran["amp"] != ran["matmul"], "a new worker after the hang"
    assert ran["collectives"] == ran["membw"] == ran["conformance"], ran
    assert ran["collectives"] != ran["amp"], ran
    assert gone(ran["matmul"]) and gone(ran["amp"]) and gone(ran["membw"])
    assert checks["matmul"]["duration_s"] == pytest.approx(20, abs=2)
    assert time.monotonic() - start < 150


def test_a_check_that_raises_gets_a_fresh_worker_after_it(workdir: Path) -> None:
    """An exception may leave the process broken (a sticky GPU error): the check errs with
    the exception and the next check runs in a new worker, which passes."""
    code, report, output = probe(
        "--expect",
        "cpu",
        "--only",
        "device",
        "--only",
        "matmul",
        "--only",
        "membw",
        tmp=workdir,
        fault="error:matmul",
    )
    assert code == 1, output
    checks = by_name(report)
    assert checks["matmul"]["status"] == "error"
    assert checks["matmul"]["reason"] == "RuntimeError: fault injection: matmul raises"
    assert checks["membw"]["status"] == "pass"
    ran = pids(report)
    assert ran["device"] == ran["matmul"] != ran["membw"], ran


def test_restore_undoes_a_checks_environment_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a check adds, removes or changes in os.environ (collectives' single-rank path on
    one GPU sets MASTER_ADDR/MASTER_PORT) is undone before the worker runs the next check."""
    from envbuilder.probe.worker import _restore

    monkeypatch.delenv("MASTER_PORT", raising=False)  # put back afterwards whatever happens
    monkeypatch.setenv("PROBE_TEST_KEPT", "1")
    monkeypatch.setenv("PROBE_TEST_CHANGED", "before")
    before = dict(os.environ)
    os.environ["MASTER_PORT"] = "12345"
    os.environ["PROBE_TEST_CHANGED"] = "after"
    del os.environ["PROBE_TEST_KEPT"]
    _restore(before, None)
    assert dict(os.environ) == before

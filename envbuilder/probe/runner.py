"""The parent side: run the checks in a shared worker process under a watchdog; the report.

The parent never imports torch. The checks run in turn in one worker process (worker.py),
which imports torch and initialises the GPU once. A check that hangs past its timeout, crashes
the interpreter or wedges the driver gets the worker killed (its whole process group, so
collective ranks go too) and is reported as an error with its output's tail; a new worker
runs the next check. Ctrl-C kills the worker's process group and propagates as
KeyboardInterrupt.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.core import records
from envbuilder.probe.common import Context, in_wsl
from envbuilder.probe.cpus import cgroup_cpu_quota, cpu_warnings, cpus_allowed, load_average
from envbuilder.probe.options import CHECK_NAMES, ProbeOptions

PROBE_VERSION = "1.3.1"
SCHEMA_VERSION = 1
TAIL_CHARS = 3000

ProgressFn = Callable[[str], None]


def probe_root() -> Path:
    """The sys.path entry holding the `envbuilder` package (a directory or the zipapp)."""
    return Path(__file__).resolve().parents[2]


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a check child: the parent's, output unbuffered."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def child_command(name: str, ctx_file: Path, out_file: Path) -> list[str]:
    """The command line of a one-shot check child (a collective rank)."""
    return _probe_command(["--_child", name, "--_ctx", str(ctx_file), "--_out", str(out_file)])


def _probe_command(args: list[str]) -> list[str]:
    """This very probe with `args`, never one found elsewhere.

    A zipapp runs itself (the zip is sys.path[0]); a source tree is put first on sys.path in
    place of the current directory, which `-m` would add (an `envbuilder` or a stray
    .dist-info in the working directory must neither shadow the probe nor count as installed).
    """
    root = probe_root()
    if root.is_file():
        return [sys.executable, str(root), *args]
    boot = (
        f"import sys; sys.path[0] = {str(root)!r}; "
        "from envbuilder.probe.cli import main; sys.exit(main())"
    )
    return [sys.executable, "-c", boot, *args]


def output_tail(log: Path, chars: int = TAIL_CHARS, offset: int = 0) -> str:
    """The last `chars` characters of a child's output written after byte `offset`."""
    try:
        with log.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(offset, size - chars))
            data = fh.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child and everything it started (its process group / job tree)."""
    if proc.poll() is not None and sys.platform == "win32":
        return
    if sys.platform == "win32":
        subprocess.run(
            ["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, check=False
        )
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} without a result"


def _finite(value: Any) -> Any:
    """JSON-safe copy: NaN/Inf become None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _clean_metrics(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in metrics:
        samples = [s for s in m["samples"] if math.isfinite(s)]
        if samples:
            out.append({**m, "samples": samples})
    return out


def _session_kwargs() -> dict[str, Any]:
    """Popen arguments that put a child in its own process group (session on POSIX)."""
    if sys.platform == "win32":
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    return {"start_new_session": True}


def worker_command(ctx_file: Path) -> list[str]:
    """The command line of the shared check worker (see worker.py), this very probe's."""
    return _probe_command(["--_worker", "--_ctx", str(ctx_file)])


class CheckWorker:
    """The parent's end of the shared worker, and its watchdog.

    `run(name, timeout)` hands one check to the worker (starting one if none is alive) and
    waits for its result file. A check that outlives its timeout, or a worker that dies (a
    signal, an exit without a result), ends that worker's whole process group (collective
    ranks included); that check is an error with its output's tail, and the next check gets a
    new worker. A worker whose check erred is replaced too: an exception may have left it
    broken (a sticky GPU error, a half-initialised library), and the next check must not pay
    for it. Use as a context manager: leaving it ends the worker, Ctrl-C included.
    """

    POLL_S = 0.005

    def __init__(self, ctx_file: Path, workdir: Path) -> None:
        self.ctx_file = ctx_file
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "worker0.log"
        self.started = 0  # workers started so far
        self.runs = 0  # checks handed out so far (names the result files)

    def __enter__(self) -> CheckWorker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        self.log = self.workdir / f"worker{self.started}.log"
        with self.log.open("wb") as fh:
            self.proc = subprocess.Popen(
                worker_command(self.ctx_file),
                env=child_env(),
                stdin=subprocess.PIPE,
                stdout=fh,
                stderr=subprocess.STDOUT,
                **_session_kwargs(),
            )
        return self.proc

    def close(self) -> None:
        """End the worker and whatever it left running in its group.

        Killed, not asked to exit: it has nothing left to write, and an interpreter holding
        torch and a GPU context can take a second to tear itself down.
        """
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        finally:
            kill_tree(proc)

    def _send(self, proc: subprocess.Popen[bytes], name: str, out: Path) -> None:
        line = json.dumps({"check": name, "out": str(out)}) + "\n"
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # a dead worker: _wait sees it exit
            proc.stdin.write(line.encode("utf-8"))
            proc.stdin.flush()

    def _wait(self, proc: subprocess.Popen[bytes], out: Path, deadline: float) -> str:
        """ "done" (result written), "died" or "timeout"."""
        while True:
            if out.is_file():
                return "done"
            if proc.poll() is not None:
                return "done" if out.is_file() else "died"
            if time.monotonic() >= deadline:
                return "timeout"
            time.sleep(self.POLL_S)

    def run(self, name: str, timeout_s: float) -> dict[str, Any]:
        """Run one check in the worker; its report entry (never raises for the check's fate)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.close()
        start = time.monotonic()
        proc = self.proc or self._start()
        self.runs += 1
        out = self.workdir / f"{self.runs:02d}-{name}.json"
        offset = self.log.stat().st_size
        self._send(proc, name, out)
        outcome = self._wait(proc, out, start + timeout_s)
        entry: dict[str, Any] = {"name": name, "duration_s": round(time.monotonic() - start, 3)}
        if outcome == "timeout":
            self.close()
            entry.update(
                status="error", reason=f"timed out after {timeout_s:g} s", details={}, metrics=[]
            )
        elif outcome == "died":
            self.close()
            entry.update(
                status="error", reason=_exit_description(proc.returncode), details={}, metrics=[]
            )
        else:
            data = json.loads(out.read_text(encoding="utf-8"))
            entry.update(
                status=data["status"],
                reason=data["reason"],
                details=_finite(data["details"]),
                metrics=_clean_metrics(data["metrics"]),
            )
            if entry["status"] == "error":
                self.close()
        entry["details"]["worker_pid"] = proc.pid
        if entry["status"] in ("fail", "error"):
            entry["details"]["output_tail"] = output_tail(self.log, offset=offset)
        return entry


#: The device check's facts that conformance's release check reads (expectation._found).
_FACT_KEYS = ("torch", "hip", "cuda", "devices")


class BesideRun:
    """The conformance check in a worker of its own, beside the GPU checks.

    Conformance reads package metadata and compares versions: CPU work, ~0.3-0.4 s on the GPU
    machine (197 distributions), which the GPU checks need not wait for. Given torch's facts
    as the device check found them, its worker never imports torch nor touches the GPU, so it
    runs while the main worker measures. Only under a GPU expectation: on a CPU run it would
    compete for the cores the CPU figures are measured on. It has its own watchdog (a
    CheckWorker of its own, in its own folder); `close()` ends it, Ctrl-C included.
    """

    def __init__(self, workdir: Path, ctx: Context, facts: dict[str, Any], timeout_s: float):
        folder = workdir / "beside"
        folder.mkdir()
        ctx_file = folder / "ctx.json"
        beside_ctx = dataclasses.replace(ctx, device_facts={k: facts.get(k) for k in _FACT_KEYS})
        ctx_file.write_text(json.dumps(beside_ctx.to_json()), encoding="utf-8")
        self.worker = CheckWorker(ctx_file, folder)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.future = self.pool.submit(self.worker.run, "conformance", timeout_s)

    def result(self) -> dict[str, Any]:
        """The check's report entry (waits for it; the watchdog bounds the wait)."""
        return self.future.result()

    def close(self) -> None:
        self.worker.close()  # a check still running ends now: its run() sees the worker die
        self.pool.shutdown(wait=True)


def beside_run(
    opts: ProbeOptions, ctx: Context, workdir: Path, device_entry: dict[str, Any] | None
) -> BesideRun | None:
    """Conformance beside the GPU checks, when that applies (see BesideRun): a GPU expectation,
    conformance selected, and torch's facts from the device check (it errs without them)."""
    details = (device_entry or {}).get("details") or {}
    if opts.expect == "cpu" or "conformance" not in opts.selected() or "torch" not in details:
        return None
    return BesideRun(workdir, ctx, details, opts.check_timeout_s)


def _host_os() -> str:
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
                if line.startswith("PRETTY_NAME="):
                    return "Linux " + line.split("=", 1)[1].strip().strip('"')
        except OSError:
            pass
    return platform.platform()


def cpu_facts(load: list[float] | None, torch_threads: int | None) -> dict[str, Any]:
    """The fingerprint's CPU part: what the run could use, and how busy the machine was."""
    allowed, quota = cpus_allowed(), cgroup_cpu_quota()
    return {
        "torch_threads": torch_threads,
        "cpus_allowed": allowed,
        "cpu_quota": quota,
        "load_avg": load,
        "cpu_warnings": cpu_warnings(load, os.cpu_count(), torch_threads, allowed, quota),
    }


def fingerprint(
    device_entry: dict[str, Any] | None,
    opts: ProbeOptions,
    load: list[float] | None = None,
    packages: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """What was tested: interpreter, torch build, devices, host, CPUs, lock (see the schema).

    `load` is the load average taken before the first check started; `packages` the
    installed-packages digest if already computed (else it is computed here).
    """
    from envbuilder.probe.check_conformance import installed_packages_digest
    from envbuilder.probe.check_device import relevant_env

    facts = (device_entry or {}).get("details", {})
    devices = _fingerprint_devices(facts)
    lock_sha = hashlib.sha256(Path(opts.lock).read_bytes()).hexdigest() if opts.lock else None
    # In the parent, whose interpreter is the env's: it sees what the checks import.
    packages_sha, packages_count = packages or installed_packages_digest()
    threads = facts.get("threads")
    return {
        "python": platform.python_version(),
        "torch": facts.get("torch"),
        "hip": facts.get("hip"),
        "cuda": facts.get("cuda"),
        "driver": facts.get("driver"),
        "nccl": facts.get("nccl"),
        "devices": devices,
        "host_os": _host_os(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "wsl": in_wsl(),
        "cpu_count": os.cpu_count(),
        **cpu_facts(load, threads if isinstance(threads, int) else None),
        "lock_sha256": lock_sha,
        "packages_sha256": packages_sha,
        "packages_count": packages_count,
        "env_vars": relevant_env(),
    }


def _fingerprint_devices(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The device check's devices, less what does not identify one (capability, SMs)."""
    return [
        {
            "index": d["index"],
            "name": d["name"],
            "gfx": d.get("gfx"),
            "memory_bytes": d["memory_bytes"],
        }
        for d in facts.get("devices", [])
    ]


def _skipped(name: str, opts: ProbeOptions) -> dict[str, Any]:
    why = "not in --only" if opts.only and name not in opts.only else "--skip"
    return {
        "name": name,
        "status": "skip",
        "reason": why,
        "duration_s": 0.0,
        "details": {},
        "metrics": [],
    }


def options_json(opts: ProbeOptions) -> dict[str, Any]:
    """The report's `options`: what the probe was asked, every key of ProbeOptions but its
    labels (the report's own `labels`), the timeout as the checks ran with it."""
    options = records.to_json(opts)
    del options["labels"]
    return {**options, "timeout_s": opts.check_timeout_s}


def run_probe(opts: ProbeOptions, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run the selected checks in the shared worker; return the report (schema v1)."""
    say = progress or (lambda _msg: None)
    started = dt.datetime.now(dt.timezone.utc)  # noqa: UP017 (datetime.UTC is 3.11+)
    load = load_average()  # before any check adds to it
    for warning in cpu_warnings(load, os.cpu_count(), None, None, None):
        say(f"warning: {warning}")
    t0 = time.monotonic()
    ctx = _context(opts)
    from envbuilder.probe.check_conformance import installed_packages_digest

    # The parent idles while the first check starts the worker: hash the packages meanwhile.
    with (
        concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool,
        tempfile.TemporaryDirectory(prefix="envbuilder-probe-") as tmp,
    ):
        packages = pool.submit(installed_packages_digest)
        workdir = Path(tmp)
        ctx_file = workdir / "ctx.json"
        ctx_file.write_text(json.dumps(ctx.to_json()), encoding="utf-8")
        with CheckWorker(ctx_file, workdir) as worker:
            checks, device_entry = _run_checks(Workers(worker, opts, ctx, workdir), say)
        digest = packages.result()
    failed = any(c["status"] in ("fail", "error") for c in checks)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "envbuilder-probe",
        "probe_version": PROBE_VERSION,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - t0, 3),
        "status": "fail" if failed else "pass",
        "options": options_json(opts),
        "labels": dict(opts.labels),
        "fingerprint": fingerprint(device_entry, opts, load, digest),
        "checks": checks,
    }


def _context(opts: ProbeOptions) -> Context:
    """What every check is told (written to the worker as ctx.json): every option, the
    timeout as the checks run with it."""
    values = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
    return Context(**{**values, "timeout_s": opts.check_timeout_s})


@dataclass
class Workers:
    """The main worker, what the run was asked, and conformance's worker beside it once the
    device check has given torch's facts (BesideRun; None until then, or when it does not
    apply)."""

    main: CheckWorker
    opts: ProbeOptions
    ctx: Context
    workdir: Path
    beside: BesideRun | None = None

    def run(self, name: str) -> dict[str, Any]:
        """One check's entry: conformance from the worker beside when there is one."""
        if name == "conformance" and self.beside is not None:
            return self.beside.result()
        return self.main.run(name, self.opts.check_timeout_s)

    def device_done(self, entry: dict[str, Any]) -> None:
        self.beside = beside_run(self.opts, self.ctx, self.workdir, entry)


def _run_checks(
    workers: Workers, say: ProgressFn
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Every check's entry in their fixed order (unselected ones skipped), and the device
    check's entry for the fingerprint (run for it when not selected)."""
    opts = workers.opts
    selected = opts.selected()
    checks: list[dict[str, Any]] = []
    device_entry: dict[str, Any] | None = None
    try:
        if "device" not in selected:  # the fingerprint still needs torch's facts
            device_entry = workers.run("device")
            workers.device_done(device_entry)
        for i, name in enumerate(CHECK_NAMES):
            if name not in selected:
                checks.append(_skipped(name, opts))
                continue
            step = f"[{i + 1}/{len(CHECK_NAMES)}] {name}"
            say(f"{step} ...")
            entry = workers.run(name)
            say(
                f"{step}: {entry['status']} ({entry['duration_s']:.1f} s)"
                f"{': ' + entry['reason'] if entry['reason'] else ''}"
            )
            checks.append(entry)
            if name == "device":
                device_entry = entry
                workers.device_done(entry)
    finally:
        if workers.beside is not None:
            workers.beside.close()
    return checks, device_entry


def exit_code(report: dict[str, Any]) -> int:
    """0 when nothing failed or erred, else 1."""
    return 0 if report["status"] == "pass" else 1

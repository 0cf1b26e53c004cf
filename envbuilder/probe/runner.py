"""The parent side: run each check in its own process with a timeout, and build the report.

The parent never imports torch: a check that hangs, crashes the interpreter or wedges the
driver is killed (its whole process group, so collective ranks go too) and reported as an
error with its output's tail; the next check runs. Ctrl-C kills the running check's process
group and propagates as KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuilder.probe.common import CHECK_NAMES, Context, in_wsl

PROBE_VERSION = "1.0.0"
SCHEMA_VERSION = 1
#: Default per-check timeout by level (seconds); --timeout overrides.
DEFAULT_TIMEOUT_S = {"quick": 120.0, "standard": 300.0, "long": 1800.0}
TAIL_CHARS = 3000

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class ProbeOptions:
    """The probe's command-line options as values."""

    level: str
    expect: str
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    lock: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    repeat: int = 1
    timeout_s: float | None = None

    @property
    def check_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else DEFAULT_TIMEOUT_S[self.level]

    def selected(self) -> list[str]:
        """The checks to run, in their fixed order."""
        return [c for c in CHECK_NAMES
                if (not self.only or c in self.only) and c not in self.skip]


def probe_root() -> Path:
    """The sys.path entry holding the `envbuilder` package (a directory or the zipapp)."""
    return Path(__file__).resolve().parents[2]


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a check child: the parent's, output unbuffered."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def child_command(name: str, ctx_file: Path, out_file: Path) -> list[str]:
    """The command line of one check child: this very probe, never one found elsewhere.

    A zipapp runs itself (the zip is sys.path[0]); a source tree is put first on sys.path in
    place of the current directory, which `-m` would add (an `envbuilder` or a stray
    .dist-info in the working directory must neither shadow the probe nor count as installed).
    """
    root = probe_root()
    args = ["--_child", name, "--_ctx", str(ctx_file), "--_out", str(out_file)]
    if root.is_file():
        return [sys.executable, str(root), *args]
    boot = (f"import sys; sys.path[0] = {str(root)!r}; "
            "from envbuilder.probe.cli import main; sys.exit(main())")
    return [sys.executable, "-c", boot, *args]


def output_tail(log: Path, chars: int = TAIL_CHARS) -> str:
    """The last `chars` characters of a child's output."""
    try:
        data = log.read_bytes()
    except OSError:
        return ""
    return data[-chars:].decode("utf-8", "replace")


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child and everything it started (its process group / job tree)."""
    if proc.poll() is not None and sys.platform == "win32":
        return
    if sys.platform == "win32":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)],
                       capture_output=True, check=False)
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


def run_check(name: str, ctx_file: Path, workdir: Path, timeout_s: float) -> dict[str, Any]:
    """Run one check child; return its report entry (never raises for the check's fate)."""
    out, log = workdir / f"{name}.json", workdir / f"{name}.log"
    new_group = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)  # Windows only
    kwargs: dict[str, Any] = ({"creationflags": new_group} if sys.platform == "win32"
                              else {"start_new_session": True})
    start = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(child_command(name, ctx_file, out), env=child_env(),
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                **kwargs)
    try:
        proc.wait(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Ctrl-C lands here too: the child is in its own session and must be ended by us.
        kill_tree(proc)
    entry: dict[str, Any] = {"name": name, "duration_s": round(time.monotonic() - start, 3)}
    if timed_out:
        entry.update(status="error", reason=f"timed out after {timeout_s:g} s", details={},
                     metrics=[])
    elif out.is_file():
        data = json.loads(out.read_text(encoding="utf-8"))
        entry.update(status=data["status"], reason=data["reason"],
                     details=_finite(data["details"]), metrics=_clean_metrics(data["metrics"]))
    else:
        entry.update(status="error", reason=_exit_description(proc.returncode), details={},
                     metrics=[])
    if entry["status"] in ("fail", "error"):
        entry["details"]["output_tail"] = output_tail(log)
    return entry


def _host_os() -> str:
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
                if line.startswith("PRETTY_NAME="):
                    return "Linux " + line.split("=", 1)[1].strip().strip('"')
        except OSError:
            pass
    return platform.platform()


def fingerprint(device_entry: dict[str, Any] | None, opts: ProbeOptions) -> dict[str, Any]:
    """What was tested: interpreter, torch build, devices, host, lock (see the schema)."""
    from envbuilder.probe.check_conformance import installed_packages_digest
    from envbuilder.probe.check_device import relevant_env

    facts = (device_entry or {}).get("details", {})
    devices = [{"index": d["index"], "name": d["name"], "gfx": d.get("gfx"),
                "memory_bytes": d["memory_bytes"]} for d in facts.get("devices", [])]
    lock_sha = (hashlib.sha256(Path(opts.lock).read_bytes()).hexdigest()
                if opts.lock else None)
    # In the parent, whose interpreter is the env's: it sees what the checks import.
    packages_sha, packages_count = installed_packages_digest()
    return {
        "python": platform.python_version(), "torch": facts.get("torch"),
        "hip": facts.get("hip"), "cuda": facts.get("cuda"), "driver": facts.get("driver"),
        "nccl": facts.get("nccl"), "devices": devices, "host_os": _host_os(),
        "kernel": platform.release(), "machine": platform.machine(), "wsl": in_wsl(),
        "cpu_count": os.cpu_count(), "lock_sha256": lock_sha,
        "packages_sha256": packages_sha, "packages_count": packages_count,
        "env_vars": relevant_env(),
    }


def run_probe(opts: ProbeOptions, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run the selected checks, each in its own process; return the report (schema v1)."""
    say = progress or (lambda _msg: None)
    started = dt.datetime.now(dt.timezone.utc)  # noqa: UP017 (datetime.UTC is 3.11+)
    t0 = time.monotonic()
    ctx = Context(level=opts.level, expect=opts.expect, repeat=opts.repeat, lock=opts.lock,
                  timeout_s=opts.check_timeout_s)
    selected = opts.selected()
    checks: list[dict[str, Any]] = []
    device_entry: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="envbuilder-probe-") as tmp:
        workdir = Path(tmp)
        ctx_file = workdir / "ctx.json"
        ctx_file.write_text(json.dumps(ctx.to_json()), encoding="utf-8")
        if "device" not in selected:  # the fingerprint still needs torch's facts
            device_entry = run_check("device", ctx_file, workdir, opts.check_timeout_s)
        for i, name in enumerate(CHECK_NAMES):
            if name not in selected:
                why = "not in --only" if opts.only and name not in opts.only else "--skip"
                checks.append({"name": name, "status": "skip", "reason": why,
                               "duration_s": 0.0, "details": {}, "metrics": []})
                continue
            say(f"[{i + 1}/{len(CHECK_NAMES)}] {name} ...")
            entry = run_check(name, ctx_file, workdir, opts.check_timeout_s)
            say(f"[{i + 1}/{len(CHECK_NAMES)}] {name}: {entry['status']} "
                f"({entry['duration_s']:.1f} s){': ' + entry['reason'] if entry['reason'] else ''}")
            checks.append(entry)
            if name == "device":
                device_entry = entry
    failed = any(c["status"] in ("fail", "error") for c in checks)
    return {
        "schema_version": SCHEMA_VERSION, "tool": "envbuilder-probe",
        "probe_version": PROBE_VERSION, "started_at": started.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - t0, 3), "status": "fail" if failed else "pass",
        "options": {"level": opts.level, "expect": opts.expect, "repeat": opts.repeat,
                    "only": list(opts.only), "skip": list(opts.skip), "lock": opts.lock,
                    "timeout_s": opts.check_timeout_s},
        "labels": dict(opts.labels), "fingerprint": fingerprint(device_entry, opts),
        "checks": checks,
    }


def exit_code(report: dict[str, Any]) -> int:
    """0 when nothing failed or erred, else 1."""
    return 0 if report["status"] == "pass" else 1

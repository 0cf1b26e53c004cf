"""The probe end to end on this CPU machine: real torch, real processes, real gloo ranks.

Failures are provoked with the test-only fault hook ENVBUILDER_PROBE_FAULT (docs/probe.md)
and with real pylocks that the environment does not match.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_probe_unit import DATA, validate

MAKE_PYLOCK = DATA / "make_pylock.py"


def probe(
    *args: str,
    tmp: Path,
    fault: str | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], str]:
    """Run `python -m envbuilder.probe ARGS --json`; (exit code, report, stdout+stderr)."""
    out = tmp / f"report-{uuid.uuid4().hex[:8]}.json"
    full_env = {**os.environ, **(env or {})}
    full_env.pop("ENVBUILDER_PROBE_FAULT", None)
    if fault:
        full_env["ENVBUILDER_PROBE_FAULT"] = fault
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder.probe", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )
    report = json.loads(out.read_text()) if out.is_file() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def make_lock(path: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, str(MAKE_PYLOCK), str(path), *extra], check=True)
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe")


@pytest.fixture(scope="module")
def self_lock(workdir: Path) -> Path:
    """A pylock of exactly what this interpreter has installed."""
    return make_lock(workdir / "self.pylock.toml")


@pytest.fixture(scope="module")
def quick(workdir: Path, self_lock: Path) -> tuple[int, dict[str, Any], str]:
    return probe(
        "--level",
        "quick",
        "--expect",
        "cpu",
        "--lock",
        str(self_lock),
        "--label",
        "env=cpu",
        "--label",
        "target=test",
        tmp=workdir,
    )


def test_quick_cpu_run_passes_every_check(quick: tuple[int, dict[str, Any], str]) -> None:
    code, report, output = quick
    assert code == 0, output
    validate(report)
    checks = by_name(report)
    assert {n: c["status"] for n, c in checks.items()} == {
        "device": "pass",
        "topology": "skip",
        "latency": "pass",
        "matmul": "pass",
        "amp": "pass",
        "train": "pass",
        "collectives": "pass",
        "membw": "pass",
        "conformance": "pass",
    }
    assert checks["topology"]["reason"] == "--expect cpu: no GPU is used, nothing is linked"
    coll = checks["collectives"]["details"]
    assert (coll["backend"], coll["world_size"], coll["mode"]) == ("gloo", 2, "spawned")
    assert coll["ranks"] == ["pass", "pass"]
    assert report["labels"] == {"env": "cpu", "target": "test"}
    assert report["fingerprint"]["lock_sha256"] == checks["conformance"]["details"]["lock_sha256"]
    assert "result: PASS" in output


def test_fingerprint_hashes_installed_packages(quick: tuple[int, dict[str, Any], str]) -> None:
    """packages_sha256 is over this interpreter's sorted name==version lines, computed here
    independently (PEP 503 names, the bootstrap packages left out)."""
    import importlib.metadata
    import re

    seen: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        seen.setdefault(name, dist.version)
    lines = sorted(
        f"{n}=={v}\n" for n, v in seen.items() if n not in ("pip", "setuptools", "wheel")
    )
    fp = quick[1]["fingerprint"]
    assert "torch==2.13.0+cpu\n" in lines
    assert fp["packages_count"] == len(lines)
    assert fp["packages_sha256"] == hashlib.sha256("".join(lines).encode()).hexdigest()


def test_quick_cpu_metrics(quick: tuple[int, dict[str, Any], str]) -> None:
    checks = by_name(quick[1])
    keys = {(c, m["name"], m["dtype"]) for c, check in checks.items() for m in check["metrics"]}
    assert {
        ("matmul", "tflops", "fp32"),
        ("matmul", "tflops", "bf16"),
        ("amp", "step_time", "fp32"),
        ("amp", "step_time", "bf16"),
        ("amp", "amp_speedup", "bf16"),
        ("collectives", "busbw", "fp32"),
        ("membw", "copy_bandwidth", None),
        ("latency", "launch_latency", None),
        ("train", "images_per_s", "fp32"),
        ("train", "step_time", "fp32"),
    } <= keys
    for check in checks.values():
        for m in check["metrics"]:
            assert m["value"] > 0 and len(m["samples"]) == 1


def test_quick_cpu_train_and_latency(quick: tuple[int, dict[str, Any], str]) -> None:
    """ResNet-50 at the CPU's quick shape: images/s is the batch over the timed steps' median
    time only if every step took the median; it lies within the steps' range; the loss fell.
    The launch latency's median lies within its spread; no sync latency on the CPU."""
    checks = by_name(quick[1])
    train = checks["train"]
    details = train["details"]
    assert (details["input"], details["batch"], details["amp_dtype"]) == ("32x32", 2, None)
    assert details["model"] == "ResNet-50 (envbuilder.probe.resnet)"
    metrics = {m["name"]: m for m in train["metrics"]}
    step = details["step_ms"]
    assert step["min"] <= metrics["step_time"]["value"] <= step["max"]
    images = metrics["images_per_s"]["value"]
    assert 1000 * 2 / step["max"] <= images <= 1000 * 2 / step["min"]
    assert min(details["losses_last"][-2:]) < 0.9 * details["losses_first"][0]
    latency = checks["latency"]
    (launch,) = latency["metrics"]
    spread = latency["details"]["launch_us"]
    assert spread["min"] <= launch["value"] <= spread["max"]
    assert spread["n"] == latency["details"]["batches"]
    assert "not measured" in latency["details"]["sync_us"]


def test_repeat_gives_one_sample_per_repeat_and_median(workdir: Path) -> None:
    code, report, output = probe("--expect", "cpu", "--only", "membw", "--repeat", "3", tmp=workdir)
    assert code == 0, output
    validate(report)
    (m,) = by_name(report)["membw"]["metrics"]
    assert len(m["samples"]) == 3
    assert m["value"] == sorted(m["samples"])[1]


def test_wrong_results_fail(workdir: Path) -> None:
    """matmul-wrong, amp-nan, train-nan and allreduce-wrong: each check fails, the run
    completes."""
    code, report, output = probe(
        "--expect",
        "cpu",
        "--only",
        "matmul",
        "--only",
        "amp",
        "--only",
        "train",
        "--only",
        "collectives",
        tmp=workdir,
        fault="matmul-wrong,amp-nan,train-nan,allreduce-wrong",
    )
    assert code == 1, output
    validate(report)
    checks = by_name(report)
    assert checks["matmul"]["status"] == "fail"
    assert "relative error" in checks["matmul"]["reason"]
    assert checks["amp"]["status"] == "fail"
    assert "loss is nan" in checks["amp"]["reason"]
    assert checks["train"]["status"] == "fail"
    assert "loss is nan at step 1" in checks["train"]["reason"]
    assert checks["collectives"]["status"] == "fail"
    assert "wrong sums on 2 of 2 rank(s)" in checks["collectives"]["reason"]
    assert report["status"] == "fail"


def test_hang_and_crash_are_errors_and_the_run_goes_on(workdir: Path, self_lock: Path) -> None:
    start = time.monotonic()
    code, report, output = probe(
        "--expect",
        "cpu",
        "--only",
        "matmul",
        "--only",
        "membw",
        "--only",
        "conformance",
        "--lock",
        str(self_lock),
        "--timeout",
        "8",
        tmp=workdir,
        fault="hang:matmul,crash:membw",
    )
    assert code == 1, output
    validate(report)
    checks = by_name(report)
    assert checks["matmul"]["status"] == "error"
    assert checks["matmul"]["reason"] == "timed out after 8 s"
    assert "matmul hangs" in checks["matmul"]["details"]["output_tail"]
    assert checks["membw"]["status"] == "error"
    if sys.platform != "win32":
        assert checks["membw"]["reason"] == "killed by SIGSEGV"
    assert "membw crashes" in checks["membw"]["details"]["output_tail"]
    assert checks["conformance"]["status"] == "pass"
    assert time.monotonic() - start < 120


def test_conformance_findings(workdir: Path) -> None:
    """Real locks the environment does not match: a package missing from the lock, one
    missing from the environment, one at another version."""
    lock = make_lock(
        workdir / "off.pylock.toml",
        "--drop",
        "jinja2",
        "--add",
        "not-installed-pkg==1.0",
        "--set",
        "Rich==0.0.1",
    )
    code, report, output = probe(
        "--expect", "cpu", "--only", "conformance", "--lock", str(lock), tmp=workdir
    )
    assert code == 1, output
    details = by_name(report)["conformance"]["details"]
    assert details["extra"] == ["jinja2"]
    assert details["missing"] == ["not-installed-pkg"]
    assert [w["name"] for w in details["wrong_version"]] == ["rich"]


def test_conformance_bootstrap_rule(workdir: Path) -> None:
    """pip/setuptools/wheel not in the lock are ignored; named in the lock, they are checked."""
    lock = make_lock(
        workdir / "noboot.pylock.toml", "--drop", "pip", "--drop", "setuptools", "--drop", "wheel"
    )
    code, report, output = probe(
        "--expect", "cpu", "--only", "conformance", "--lock", str(lock), tmp=workdir
    )
    assert code == 0, output
    assert "pip" in by_name(report)["conformance"]["details"]["ignored_bootstrap"]
    lock = make_lock(workdir / "badpip.pylock.toml", "--set", "pip==0.1")
    code, report, _ = probe(
        "--expect", "cpu", "--only", "conformance", "--lock", str(lock), tmp=workdir
    )
    assert code == 1
    assert by_name(report)["conformance"]["details"]["wrong_version"][0]["name"] == "pip"


def test_expect_gpu_without_gpu_fails(workdir: Path) -> None:
    """A ROCm environment with no GPU visible is a failure, not a skip."""
    code, report, output = probe(
        "--expect", "rocm", "--only", "device", "--only", "matmul", tmp=workdir
    )
    assert code == 1, output
    checks = by_name(report)
    assert checks["device"]["status"] == "fail"
    assert "not a ROCm build" in checks["device"]["reason"]
    assert checks["matmul"]["status"] == "fail"
    assert "sees no GPU" in checks["matmul"]["reason"]


def test_conformance_runs_beside_the_gpu_checks(workdir: Path, self_lock: Path) -> None:
    """Under a GPU expectation conformance runs in a worker of its own, beside the others,
    with torch's facts from the device check (here: a CPU build where CUDA was promised, so
    the release check fails, on the facts the device check found)."""
    code, report, output = probe(
        "--expect",
        "cuda",
        "--only",
        "device",
        "--only",
        "conformance",
        "--lock",
        str(self_lock),
        tmp=workdir,
    )
    assert code == 1, output
    validate(report)
    checks = by_name(report)
    device, conformance = checks["device"], checks["conformance"]
    assert device["status"] == "fail" and "not a CUDA build" in device["reason"]
    assert conformance["status"] == "fail"
    assert conformance["reason"].startswith("release: torch 2.13.0+cpu is not a CUDA build")
    assert conformance["details"]["release"]["found"]["torch"] == device["details"]["torch"]
    assert conformance["details"]["missing"] == conformance["details"]["extra"] == []
    assert conformance["details"]["worker_pid"] != device["details"]["worker_pid"]


def test_usage_errors(workdir: Path) -> None:
    code, _, output = probe("--expect", "cpu", "--lock", str(workdir / "nope.toml"), tmp=workdir)
    assert code == 2 and "no such file" in output
    code, _, output = probe("--expect", "gpu", tmp=workdir)
    assert code == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find children")
def test_ctrl_c_stops_cleanly_and_kills_children(workdir: Path) -> None:
    token = uuid.uuid4().hex
    env = {**os.environ, "ENVBUILDER_PROBE_FAULT": "hang:matmul", "PROBE_TEST_TOKEN": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "envbuilder.probe", "--expect", "cpu", "--only", "matmul"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _with_token(token, exclude=proc.pid):
        time.sleep(0.2)
    assert _with_token(token, exclude=proc.pid), "the check worker never started"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    time.sleep(0.5)
    assert _with_token(token, exclude=proc.pid) == []


def _with_token(token: str, exclude: int) -> list[int]:
    """PIDs (other than `exclude`) whose environment holds PROBE_TEST_TOKEN=token."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if f"PROBE_TEST_TOKEN={token}".encode() in (entry / "environ").read_bytes() and (
                b"--_worker" in cmdline or b"--_child" in cmdline
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_collectives_under_torchrun(workdir: Path) -> None:
    """torchrun sets RANK/WORLD_SIZE: each probe is one rank; ranks > 0 write PATH.rankN."""
    out = workdir / "torchrun" / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "envbuilder.probe",
            "--expect",
            "cpu",
            "--only",
            "collectives",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in (out, out.with_name("r.rank1.json")):
        report = json.loads(path.read_text())
        validate(report)
        details = by_name(report)["collectives"]["details"]
        assert (details["mode"], details["world_size"]) == ("torchrun", 2)
    assert {
        by_name(json.loads(p.read_text()))["collectives"]["details"]["rank"]
        for p in (out, out.with_name("r.rank1.json"))
    } == {0, 1}

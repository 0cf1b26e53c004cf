"""Honest CPU figures: the fingerprint's CPU facts, the probe's warnings, compare's fairness.

cgroup files are real files in a temporary tree laid out as the kernel lays them out (v2's
`cpu.max`, v1's `cpu.cfs_quota_us`/`cpu.cfs_period_us`); the affinity run restricts a real
probe process to one CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_probe_run import by_name
from test_probe_unit import DATA, validate

from envbuilder.probe.cpus import cgroup_cpu_quota, cpu_warnings, usable_cpus
from envbuilder.probe.report import render_table
from envbuilder.report import fingerprints, reading


def cgroup_tree(tmp_path: Path, proc_line: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup with `proc_line` and a cgroup mount holding `files`."""
    root = tmp_path / "sys-fs-cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(proc_line + "\n")
    return proc, root


@pytest.mark.parametrize(
    ("proc_line", "files", "quota"),
    [
        # cgroup v2, `docker run --cpus=1.5`: the container's cgroup at the mount's root
        ("0::/", {"cpu.max": "150000 100000"}, 1.5),
        # cgroup v2, no limit
        ("0::/", {"cpu.max": "max 100000"}, None),
        # cgroup v2 on a host: nested limits, the tighter (the parent's) counts
        (
            "0::/user.slice/job.scope",
            {
                "user.slice/cpu.max": "200000 100000",
                "user.slice/job.scope/cpu.max": "400000 100000",
            },
            2.0,
        ),
        # cgroup v2 in a container whose /proc path is the host's: only the root exists there
        ("0::/system.slice/docker-abc.scope", {"cpu.max": "50000 100000"}, 0.5),
        # cgroup v1, combined cpu,cpuacct controller, Kubernetes-style limit of 3 CPUs
        (
            "4:cpu,cpuacct:/kubepods/pod1",
            {
                "cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us": "300000",
                "cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us": "100000",
            },
            3.0,
        ),
        # cgroup v1, unlimited (-1), as on this test machine
        ("1:cpu:/", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        # no cgroup files at all (not Linux, or nothing mounted)
        ("0::/", {}, None),
    ],
)
def test_cgroup_cpu_quota(
    tmp_path: Path, proc_line: str, files: dict[str, str], quota: float | None
) -> None:
    proc, root = cgroup_tree(tmp_path, proc_line, files)
    assert cgroup_cpu_quota(proc, root) == quota


def test_cpu_warnings() -> None:
    assert cpu_warnings([1.5, 1.0, 1.0], 2, 2, 2, None) == []
    (loaded,) = cpu_warnings([4.37, 3.0, 2.0], 2, 2, 2, None)
    assert "load average 4.37 on 2 cores" in loaded
    (quota,) = cpu_warnings([0.1, 0.1, 0.1], 16, 16, 16, 2.0)
    assert "16 threads on a CPU quota of 2 CPUs" in quota and "OMP_NUM_THREADS=2" in quota
    (affinity,) = cpu_warnings(None, 16, 16, 4, None)
    assert "16 threads on 4 allowed CPUs" in affinity
    assert usable_cpus(16, 1.5) == 2 and usable_cpus(1, 4.0) == 1 and usable_cpus(8, None) == 8


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_fingerprint_records_affinity_threads_and_load(tmp_path: Path) -> None:
    """A real probe process pinned to one CPU: the fingerprint says 1 CPU allowed and torch
    used 1 thread (OpenMP follows the affinity mask); the load average was taken."""
    out = tmp_path / "r.json"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ENVBUILDER_PROBE_FAULT")
    }
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "envbuilder.probe",
            "--expect",
            "cpu",
            "--only",
            "device",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    validate(report)
    fp = report["fingerprint"]
    assert (fp["cpus_allowed"], fp["torch_threads"]) == (1, 1)
    assert by_name(report)["device"]["details"]["threads"] == 1
    assert fp["cpu_quota"] == cgroup_cpu_quota()
    assert len(fp["load_avg"]) == 3 and all(x >= 0 for x in fp["load_avg"])
    assert fp["cpu_count"] == os.cpu_count()
    assert "cpus: 1 allowed of" in proc.stdout and "torch threads 1" in proc.stdout
    expected_warning = fp["load_avg"][0] > (os.cpu_count() or 0)
    assert ("loaded beyond its cores" in proc.stderr) is expected_warning
    assert ("WARNING: the machine was loaded" in proc.stdout) is expected_warning


def report_with(**fp: Any) -> dict[str, Any]:
    """The recorded H200 report, its fingerprint updated with `fp` (None: key removed)."""
    report: dict[str, Any] = json.loads((DATA / "h200-standard.json").read_text())
    for key, value in fp.items():
        if value is None:
            report["fingerprint"].pop(key, None)
        else:
            report["fingerprint"][key] = value
    return report


def diffs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, bool]:
    reports = [
        reading.parse_report(a, Path("a.json")),
        reading.parse_report(b, Path("b.json")),
    ]
    return {d.field: d.unfair for d in fingerprints.fingerprint_diffs(reports)}


def test_compare_flags_differing_threads_and_cpus_as_unfair() -> None:
    base = {"torch_threads": 16, "cpus_allowed": 16, "cpu_quota": None, "load_avg": [0.5] * 3}
    same = diffs(report_with(**base), report_with(**{**base, "load_avg": [3.0] * 3}))
    assert same == {}, "the load average alone is recorded, not a fairness difference"
    # (cpu_quota None means "no quota": report_with drops keys set to None, so set it after)
    a, b = report_with(**base), report_with(**{**base, "torch_threads": 2})
    a["fingerprint"]["cpu_quota"] = b["fingerprint"]["cpu_quota"] = None
    assert diffs(a, b) == {"torch_threads": True}
    b = report_with(**{**base, "cpus_allowed": 4})
    b["fingerprint"]["cpu_quota"] = None
    assert diffs(a, b) == {"cpus_allowed": True}
    b = report_with(**{**base, "cpu_quota": 2.0})
    assert diffs(a, b) == {"cpu_quota": True}
    assert diffs(a, report_with(**{**base, "python": "3.11.9"})) == {"python": True}


def test_compare_does_not_blame_an_older_report_for_missing_cpu_facts() -> None:
    """A report of probe 1.0 has no CPU facts: unknown is not different."""
    old = report_with()
    assert "torch_threads" not in old["fingerprint"]
    new = report_with(torch_threads=2, cpus_allowed=2, load_avg=[0.1, 0.1, 0.1])
    new["fingerprint"]["cpu_quota"] = None
    assert diffs(old, new) == {}


def test_table_shows_cpu_facts_and_warnings() -> None:
    report = report_with(
        torch_threads=16,
        cpus_allowed=16,
        cpu_quota=2.0,
        load_avg=[9.0, 5.0, 1.0],
        cpu_warnings=["loaded", "threads"],
    )
    validate(report)
    table = render_table(report)
    assert (
        "cpus: 16 allowed of 16, quota 2 CPUs; torch threads 16; load average at start 9" in table
    )
    assert "WARNING: loaded\nWARNING: threads" in table
    assert "cpus:" not in render_table(report_with())

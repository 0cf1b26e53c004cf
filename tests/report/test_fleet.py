"""The fleet report (envbuilder/report/fleet.py) over job folders laid out as validate.sbatch writes
them.

The node reports are probe reports made here with chosen samples (checked against the probe's
JSON schema, so they are what a probe could write); the outlier rule is compare's noise rule.
The real cluster's folders are covered by tests/slurm/test_slurm_validate.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.commands._cli import main
from envbuilder.core.errors import CompareError
from envbuilder.report import fleet, fleet_output

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "envbuilder/data/schemas/probe-report.schema.json").read_text())
SIZES = ("65536", "4194304")


def metric(
    name: str, samples: Sequence[float], unit: str, dtype: str | None, size: str | None
) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "name": name,
        "value": ordered[len(ordered) // 2],
        "unit": unit,
        "dtype": dtype,
        "size": size,
        "samples": list(samples),
        "higher_is_better": True,
    }


def check(
    name: str,
    status: str = "pass",
    reason: str | None = None,
    metrics: Sequence[dict[str, Any]] = (),
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "duration_s": 1.0,
        "status": status,
        "reason": reason,
        "details": details or {},
        "metrics": list(metrics),
    }


def report(
    node: str,
    matmul: Sequence[float] = (1.0, 1.01, 0.99),
    busbw: Sequence[float] = (2.0, 2.02, 1.98),
    status: str = "pass",
    failed: tuple[str, str] | None = None,
    driver: str | None = None,
    labels: dict[str, str] | None = None,
    extra: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    checks = [
        check("device"),
        check("matmul", metrics=[metric("tflops", matmul, "TFLOP/s", "bf16", "256")]),
        check(
            "collectives",
            metrics=[
                metric("busbw", [b * (i + 1) for b in busbw], "GB/s", "fp32", size)
                for i, size in enumerate(SIZES)
            ],
        ),
    ]
    checks += extra
    if failed:
        checks.append(check(failed[0], "fail", failed[1]))
    data = {
        "schema_version": 1,
        "tool": "envbuilder-probe",
        "probe_version": "1.1.0",
        "started_at": "2026-12-03T08:00:00+00:00",
        "duration_s": 10.0,
        "status": "fail" if failed else status,
        "options": {
            "level": "quick",
            "expect": "cpu",
            "repeat": len(matmul),
            "only": [],
            "skip": [],
            "lock": None,
            "timeout_s": 120.0,
        },
        "labels": labels or {"env": "cpu", "target": "docker", "node": node, "slurm_job": "7"},
        "fingerprint": {
            "python": "3.11.2",
            "torch": "2.13.0+cpu",
            "hip": None,
            "cuda": None,
            "driver": driver,
            "nccl": None,
            "devices": [],
            "host_os": "Linux",
            "kernel": "6.1",
            "machine": "x86_64",
            "wsl": False,
            "cpu_count": 2,
            "lock_sha256": None,
            "env_vars": {},
        },
        "checks": checks,
    }
    jsonschema.validate(data, SCHEMA)
    return data


def rank_report(
    rank: int,
    node: str,
    world: int,
    busbw: float = 1.0,
    status: str = "pass",
    reason: str | None = None,
) -> dict[str, Any]:
    data = report(node, labels={"env": "cpu", "target": "docker", "node": node, "slurm_job": "7"})
    metrics = [
        metric("busbw", [busbw * (i + 1)], "GB/s", "fp32", size) for i, size in enumerate(SIZES)
    ]
    data["checks"] = [
        check(
            "collectives",
            status,
            reason,
            metrics,
            {"world_size": world, "rank": rank, "mode": "torchrun"},
        )
    ]
    data["status"] = "pass" if status == "pass" else "fail"
    jsonschema.validate(data, SCHEMA)
    return data


def job_folder(
    tmp_path: Path,
    nodes: Mapping[str, dict[str, Any] | None],
    ranks: Sequence[dict[str, Any]] = (),
    phase: str = "done",
    exits: dict[str, str] | None = None,
    logs: dict[str, str] | None = None,
) -> Path:
    """A job folder as validate.sbatch leaves it: hosts, phase, nodes/, collectives/."""
    job = tmp_path / "job-7"
    (job / "nodes").mkdir(parents=True)
    (job / "collectives").mkdir()
    (job / "hosts").write_text("".join(f"{n} 127.0.0.1\n" for n in nodes))
    (job / "phase").write_text(phase + "\n")
    for node, data in nodes.items():
        if data is not None:
            (job / "nodes" / f"{node}.json").write_text(json.dumps(data))
            (job / "nodes" / f"{node}.exit").write_text(
                "0\n" if data["status"] == "pass" else "1\n"
            )
    for node, code in (exits or {}).items():
        (job / "nodes" / f"{node}.exit").write_text(code + "\n")
    for node, text in (logs or {}).items():
        (job / "nodes" / f"{node}.log").write_text(text)
    for i, data in enumerate(ranks):
        name = "all.json" if i == 0 else f"all.rank{i}.json"
        (job / "collectives" / name).write_text(json.dumps(data))
    for node in {r["labels"]["node"] for r in ranks}:
        (job / "collectives" / f"{node}.exit").write_text("0\n")
    return job


def four_ranks(**kwargs: Any) -> list[dict[str, Any]]:
    return [rank_report(r, "n1" if r < 2 else "n2", 4, **kwargs) for r in range(4)]


def test_all_pass(tmp_path: Path) -> None:
    job = job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, four_ranks())
    result = fleet.read_job_dir(job)
    assert result.ok
    assert [r.node for r in result.nodes] == ["n1", "n2"]
    assert (result.env, result.target) == ("cpu", "docker")
    assert result.cross.status == "pass"
    assert result.cross.world_size == 4
    assert [(r.rank, r.node) for r in result.cross.ranks] == [
        (0, "n1"),
        (1, "n1"),
        (2, "n2"),
        (3, "n2"),
    ]
    # busbw across nodes (rank 0: 1.0, 2.0) against one node (median of 2.0 and 4.0 medians)
    assert [(s.size, s.all_nodes, s.one_node) for s in result.cross.sizes] == [
        ("65536", 1.0, 2.0),
        ("4194304", 2.0, 4.0),
    ]
    assert [s.ratio for s in result.cross.sizes] == [0.5, 0.5]
    assert result.failures() == []


def test_an_outlier_among_three_nodes_is_flagged_and_listed_before_the_others(
    tmp_path: Path,
) -> None:
    nodes = {
        "n1": report("n1"),
        "n2": report("n2", matmul=(0.70, 0.71, 0.69)),
        "n3": report("n3", matmul=(1.02, 1.0, 1.03)),
    }
    result = fleet.read_job_dir(job_folder(tmp_path, nodes, phase="probe"))
    assert [r.node for r in result.nodes] == ["n2", "n1", "n3"]
    (outlier,) = result.nodes[0].outliers
    assert outlier.metric == "matmul: tflops bf16 256"
    assert outlier.verdict == "slower"
    assert outlier.value == pytest.approx(0.70)
    assert result.nodes[1].outliers == () and result.nodes[2].outliers == ()
    # an outlier is a finding, not a failure
    assert result.failed_nodes == ()
    assert (
        "slower" in fleet_output.table_rows(result)[0][fleet_output.TABLE_HEADER.index("outlier")]
    )


def train_and_latency(images: Sequence[float], launch_us: Sequence[float]) -> list[dict[str, Any]]:
    """The train and latency checks of probe 1.3 with these samples."""
    launch = {**metric("launch_latency", launch_us, "us", None, None), "higher_is_better": False}
    return [
        check("train", metrics=[metric("images_per_s", images, "img/s", "fp16", "224x224")]),
        check("latency", metrics=[launch]),
    ]


def test_resnet_images_and_launch_latency_per_node(tmp_path: Path) -> None:
    """Each node's ResNet-50 images/s and launch latency in the table; a node that trains
    slower than the others' spread, or launches slower, is an outlier."""
    nodes = {
        "n1": report("n1", extra=train_and_latency((3000, 3010, 2990), (4.8, 4.9, 5.0))),
        "n2": report("n2", extra=train_and_latency((2400, 2410, 2390), (9.8, 9.9, 10.1))),
        "n3": report("n3", extra=train_and_latency((3005, 2995, 3012), (4.9, 5.0, 4.8))),
    }
    result = fleet.read_job_dir(job_folder(tmp_path, nodes, phase="probe"))
    assert [r.node for r in result.nodes] == ["n2", "n1", "n3"]
    assert sorted((o.metric, o.verdict) for o in result.nodes[0].outliers) == [
        ("latency: launch_latency", "slower"),
        ("train: images_per_s fp16 224x224", "slower"),
    ]
    rows = {
        row[0]: dict(zip(fleet_output.TABLE_HEADER, row, strict=True))
        for row in fleet_output.table_rows(result)
    }
    assert rows["n1"]["ResNet-50"] == "3000 img/s (fp16 224x224)"
    assert rows["n2"]["launch latency"] == "9.9 us"
    assert "| ResNet-50 | launch latency |" in fleet_output.to_markdown(result)
    judged = {m["name"] for m in fleet_output.to_json(result)["nodes"][0]["metrics"]}
    assert {"images_per_s", "launch_latency"} <= judged


def test_overlapping_ranges_are_within_noise(tmp_path: Path) -> None:
    nodes = {
        "n1": report("n1", matmul=(0.9, 1.0, 1.1)),
        "n2": report("n2", matmul=(0.95, 1.05, 1.12)),
        "n3": report("n3", matmul=(0.92, 1.0, 1.08)),
    }
    result = fleet.read_job_dir(job_folder(tmp_path, nodes))
    assert all(r.outliers == () for r in result.nodes)


def test_one_sample_per_node_judges_nothing_and_says_why(tmp_path: Path) -> None:
    nodes = {
        n: report(n, matmul=(m,), busbw=(2.0,)) for n, m in (("n1", 1.0), ("n2", 0.5), ("n3", 1.0))
    }
    result = fleet.read_job_dir(job_folder(tmp_path, nodes))
    assert all(r.outliers == () for r in result.nodes)
    assert any("noise unknown" in n and "--repeat 3" in n for n in result.notes)


def test_two_nodes_that_differ_are_a_note_not_an_outlier(tmp_path: Path) -> None:
    nodes = {"n1": report("n1"), "n2": report("n2", matmul=(0.5, 0.51, 0.49))}
    result = fleet.read_job_dir(job_folder(tmp_path, nodes))
    assert all(r.outliers == () for r in result.nodes)
    assert any(n.startswith("n1 and n2 differ in matmul: tflops bf16 256") for n in result.notes)


def test_failed_node_first_with_its_check_and_reason(tmp_path: Path) -> None:
    nodes = {"n1": report("n1"), "n2": report("n2", failed=("matmul", "relative error 0.7"))}
    result = fleet.read_job_dir(job_folder(tmp_path, nodes, four_ranks()))
    assert not result.ok
    assert result.failed_nodes == ("n2",)
    assert result.nodes[0].node == "n2"
    assert result.failures() == ["n2: matmul: relative error 0.7"]


def test_node_without_report_says_why(tmp_path: Path) -> None:
    job = job_folder(
        tmp_path,
        {"n1": report("n1"), "n2": None, "n3": None},
        exits={"n2": "3"},
        logs={"n2": "validate.sbatch: cannot pull reg/cpu@sha256:ab\nmore\n"},
    )
    info = fleet.JobInfo("7", "TIMEOUT", "TimeLimit", "00:01:30")
    result = fleet.read_job_dir(job, info)
    assert result.failed_nodes == ("n2", "n3")
    n2, n3 = result.nodes[0], result.nodes[1]
    assert n2.problems[0].startswith("no report: the image is not usable on this node")
    assert "cannot pull reg/cpu@sha256:ab" in n2.problems[0]
    assert n3.problems == ("no report: did not finish (job TIMEOUT: TimeLimit)",)


def test_a_corrupt_report_is_a_failed_node(tmp_path: Path) -> None:
    job = job_folder(tmp_path, {"n1": report("n1"), "n2": None})
    (job / "nodes" / "n2.json").write_text("{not json")
    result = fleet.read_job_dir(job)
    assert result.failed_nodes == ("n2",)
    assert "unreadable report" in result.nodes[0].problems[0]


def test_collectives_failure_on_a_rank_fails_the_fleet(tmp_path: Path) -> None:
    ranks = four_ranks()
    ranks[0] = rank_report(
        0, "n1", 4, status="fail", reason="all_reduce gave wrong sums on 1 of 4 rank(s)"
    )
    result = fleet.read_job_dir(
        job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, ranks)
    )
    assert result.failed_nodes == ()
    assert result.cross.failed
    assert not result.ok
    assert result.failures() == [
        "collectives across n1,n2: 1 of 4 rank(s) did not pass; rank 0 on n1: all_reduce gave "
        "wrong sums on 1 of 4 rank(s)"
    ]


def test_a_missing_rank_report_is_named(tmp_path: Path) -> None:
    ranks = four_ranks()[:3]
    result = fleet.read_job_dir(
        job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, ranks)
    )
    assert result.cross.failed
    assert [(r.rank, r.status) for r in result.cross.ranks][-1] == (3, "no report")


def test_job_that_ended_before_the_collectives(tmp_path: Path) -> None:
    job = job_folder(tmp_path, {"n1": None, "n2": None}, phase="probe")
    result = fleet.read_job_dir(job, fleet.JobInfo("7", "CANCELLED"))
    assert result.cross.status == "not run"
    assert "ended before the collectives" in result.cross.problems[0]
    assert result.failed_nodes == ("n1", "n2")


def test_collectives_not_requested(tmp_path: Path) -> None:
    result = fleet.read_job_dir(job_folder(tmp_path, {"n1": report("n1")}))
    assert result.cross.status == "not run"
    assert result.cross.problems == ("not requested",)
    assert result.ok


def test_fingerprint_differences_between_nodes_are_noted(tmp_path: Path) -> None:
    nodes = {"n1": report("n1", driver="6.10.5"), "n2": report("n2", driver="6.8.0")}
    result = fleet.read_job_dir(job_folder(tmp_path, nodes))
    assert any("driver differs" in n and "6.8.0" in n for n in result.notes)


def test_outputs_json_markdown_html(tmp_path: Path) -> None:
    evil = "n<script>1"
    job = job_folder(
        tmp_path, {evil: report(evil), "n2": report("n2", failed=("amp", "a|b"))}, four_ranks()
    )
    result = fleet.read_job_dir(job)
    files = fleet_output.write_reports(result, tmp_path / "out")
    data = json.loads(files["json"].read_text())
    assert data["tool"] == "envbuilder-fleet" and data["status"] == "fail"
    assert data["failed_nodes"] == ["n2"]
    assert [n["node"] for n in data["nodes"]] == ["n2", evil]
    assert data["collectives_across_nodes"]["world_size"] == 4
    assert {m["name"] for m in data["nodes"][1]["metrics"]} == {"tflops", "busbw"}
    markdown = files["markdown"].read_text()
    assert "| n2 | fail |" in markdown and "amp: a\\|b" in markdown
    page = files["html"].read_text()
    assert "<script>" not in page and "n&lt;script&gt;1" in page


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="no such job folder"):
        fleet.read_job_dir(tmp_path / "job-9")


def test_fleet_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2", failed=("matmul", "x"))})
    assert main(["fleet", str(job), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["failed_nodes"] == ["n2"]
    assert main(["fleet", str(job), "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr()
    assert "n2" in out.out and "error: n2: matmul: x" in out.err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "fleet.html",
        "fleet.json",
        "fleet.md",
    ]
    assert main(["fleet", str(tmp_path / "nope")]) == 1
    assert "no such job folder" in capsys.readouterr().err
    # --json: the same document, stdout holding nothing else; an error is the error object
    assert main(["fleet", str(job), "--json", "--out", str(tmp_path / "o2")]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["failed_nodes"] == ["n2"] and "error: n2: matmul: x" in out.err
    assert main(["fleet", str(tmp_path / "nope"), "--json"]) == 1
    error = json.loads(capsys.readouterr().out)
    assert (error["command"], error["ok"]) == ("fleet", False)
    assert "no such job folder" in error["error"]["message"]

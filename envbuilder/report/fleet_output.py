"""The fleet report written out: its tables (one row per node, the collectives across nodes), its
JSON, markdown and HTML, and the files write_reports puts beside the job folder."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuilder.core.errors import CompareError
from envbuilder.core.fsutil import default_mode, same_file, write_together
from envbuilder.report.fleet import (
    FORMAT_VERSION,
    MATMUL_DTYPES,
    TOOL,
    CrossNode,
    Fleet,
    JobInfo,
    NodeRow,
    Outlier,
    busbw_metrics,
    is_judged,
    size_key,
)
from envbuilder.report.reading import printable
from envbuilder.report.records import Metric, MetricKey
from envbuilder.report.tables import fmt_num

TABLE_HEADER = [
    "node",
    "status",
    "matmul",
    "busbw (1 node)",
    "ResNet-50",
    "launch latency",
    "outlier",
    "problems",
]
CROSS_HEADER = ["size", "busbw all nodes", "busbw 1 node", "all / 1 node"]


def headline_matmul(metrics: Mapping[MetricKey, Metric]) -> Metric | None:
    """The matmul metric the table shows: the training dtype first, the largest size."""
    found = [m for k, m in metrics.items() if k[0] == "matmul" and m.value is not None]
    if not found:
        return None

    def rank(m: Metric) -> tuple[int, tuple[int, str]]:
        order = MATMUL_DTYPES.index(m.dtype) if m.dtype in MATMUL_DTYPES else len(MATMUL_DTYPES)
        return (order, (-size_key(m.size or "0")[0], m.size or ""))

    return min(found, key=rank)


def headline_busbw(metrics: Mapping[MetricKey, Metric]) -> Metric | None:
    """The single-node busbw at the largest size."""
    found = busbw_metrics(metrics)
    return found[max(found, key=size_key)] if found else None


def headline(metrics: Mapping[MetricKey, Metric], check: str, name: str) -> Metric | None:
    """The node's `check`/`name` metric (ResNet-50 images/s, the launch latency): the one at
    the largest size where the level measured several."""
    found = [m for k, m in metrics.items() if k[:2] == (check, name) and m.value is not None]
    return max(found, key=lambda m: size_key(m.size or "0")) if found else None


def _metric_text(m: Metric | None) -> str:
    if m is None or m.value is None:
        return "-"
    what = " ".join(p for p in (m.dtype, m.size) if p)
    return f"{fmt_num(m.value)} {m.unit}" + (f" ({what})" if what else "")


def _outlier_text(o: Outlier) -> str:
    return f"{o.metric} {o.verdict} ({fmt_num(o.value)} vs {fmt_num(o.others_median)} {o.unit})"


def table_rows(fleet: Fleet) -> list[list[str]]:
    return [
        [
            r.node,
            r.status,
            _metric_text(headline_matmul(r.metrics)),
            _metric_text(headline_busbw(r.metrics)),
            _metric_text(headline(r.metrics, "train", "images_per_s")),
            _metric_text(headline(r.metrics, "latency", "launch_latency")),
            "; ".join(_outlier_text(o) for o in r.outliers) or "-",
            "; ".join(r.problems) or "-",
        ]
        for r in fleet.nodes
    ]


def cross_rows(fleet: Fleet) -> list[list[str]]:
    return [
        [
            row.size,
            f"{fmt_num(row.all_nodes)} {row.unit}",
            f"{fmt_num(row.one_node)} {row.unit}",
            fmt_num(row.ratio, 3),
        ]
        for row in fleet.cross.sizes
    ]


def summary_line(fleet: Fleet) -> str:
    failed = fleet.failed_nodes
    text = f"{len(fleet.nodes)} node(s), {len(failed)} failed" + (
        f" ({', '.join(failed)})" if failed else ""
    )
    return text + f"; collectives across nodes: {fleet.cross.status}"


def to_json(fleet: Fleet) -> dict[str, Any]:
    return {
        "tool": TOOL,
        "format_version": FORMAT_VERSION,
        "status": "pass" if fleet.ok else "fail",
        "env": fleet.env,
        "target": fleet.target,
        "job_dir": str(fleet.job_dir),
        "job": _job_json(fleet.job),
        "failed_nodes": list(fleet.failed_nodes),
        "noise_rule": fleet.noise_rule,
        "noise_floor_pct": fleet.noise_floor_pct,
        "nodes": [_node_json(r) for r in fleet.nodes],
        "collectives_across_nodes": _cross_json(fleet.cross),
        "notes": list(fleet.notes),
    }


def _job_json(job: JobInfo) -> dict[str, Any]:
    return {
        "id": job.job_id,
        "state": job.state,
        "reason": job.reason,
        "run_time": job.run_time,
        "note": job.note,
    }


def _node_json(r: NodeRow) -> dict[str, Any]:
    return {
        "node": r.node,
        "status": r.status,
        "report": str(r.report) if r.report else None,
        "problems": list(r.problems),
        "outliers": [
            {
                "metric": o.metric,
                "verdict": o.verdict,
                "value": o.value,
                "others_median": o.others_median,
                "unit": o.unit,
            }
            for o in r.outliers
        ],
        "metrics": [_metric_json(m) for k, m in r.metrics.items() if is_judged(k)],
    }


def _metric_json(m: Metric) -> dict[str, Any]:
    return {
        "check": m.check,
        "name": m.name,
        "dtype": m.dtype,
        "size": m.size,
        "value": m.value,
        "unit": m.unit,
        "samples": list(m.samples),
    }


def _cross_json(cross: CrossNode) -> dict[str, Any]:
    return {
        "status": cross.status,
        "world_size": cross.world_size,
        "nodes": list(cross.nodes),
        "problems": list(cross.problems),
        "ranks": [
            {"rank": r.rank, "node": r.node, "status": r.status, "reason": r.reason}
            for r in cross.ranks
        ],
        "busbw": [
            {
                "size": s.size,
                "all_nodes": s.all_nodes,
                "one_node": s.one_node,
                "ratio": s.ratio,
                "unit": s.unit,
            }
            for s in cross.sizes
        ],
    }


def dumps_json(fleet: Fleet) -> str:
    return json.dumps(to_json(fleet), indent=2, allow_nan=False) + "\n"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(text: str) -> str:
        return printable(text).replace("|", "\\|")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(cell(c) for c in row) + " |" for row in rows
    ]


def _title(fleet: Fleet) -> str:
    what = "/".join(x for x in (fleet.env, fleet.target) if x) or "fleet"
    return f"envbuilder fleet: {what}, Slurm job {fleet.job.job_id}"


def to_markdown(fleet: Fleet) -> str:
    job = fleet.job
    lines = [
        f"# {_title(fleet)}",
        "",
        f"Result: **{'pass' if fleet.ok else 'FAIL'}**: {summary_line(fleet)}.",
        "",
        f"Job {job.job_id}: {job.state or 'state unknown'}"
        + (f" ({job.reason})" if job.reason and job.reason != "None" else "")
        + (f", ran {job.run_time}" if job.run_time else "")
        + f"; folder `{fleet.job_dir}`.",
        "",
        "## Nodes",
        "",
        f"Noise rule: {fleet.noise_rule}",
        "",
    ]
    lines += _md_table(TABLE_HEADER, table_rows(fleet))
    cross = fleet.cross
    lines += [
        "",
        "## Collectives across nodes",
        "",
        f"Status: **{cross.status}**"
        + (f", world size {cross.world_size}" if cross.world_size else "")
        + (f", nodes {', '.join(cross.nodes)}" if cross.nodes else "")
        + ".",
    ]
    lines += [f"- {p}" for p in cross.problems]
    if cross.sizes:
        lines += ["", *_md_table(CROSS_HEADER, cross_rows(fleet))]
    if fleet.notes:
        lines += ["", "## Notes", ""] + [f"- {printable(n)}" for n in fleet.notes]
    return "\n".join(lines) + "\n"


def to_html(fleet: Fleet) -> str:
    """One self-contained page (no scripts, no network)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("envbuilder", "data/templates/fleet"),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("index.html.j2").render(
        title=_title(fleet),
        fleet=fleet,
        ok=fleet.ok,
        summary=summary_line(fleet),
        header=TABLE_HEADER,
        rows=table_rows(fleet),
        failed=[r.failed for r in fleet.nodes],
        cross_header=CROSS_HEADER,
        cross_rows=cross_rows(fleet),
    )


def write_reports(fleet: Fleet, folder: Path) -> dict[str, Path]:
    """fleet.json, fleet.md and fleet.html in `folder`, written together (an error writes none),
    readable by no one the folder keeps out (report_mode).
    Refuses (CompareError) a folder where one of them would replace a report that was read,
    e.g. --out JOB/nodes with a node named "fleet"."""
    paths = {
        "json": folder / "fleet.json",
        "markdown": folder / "fleet.md",
        "html": folder / "fleet.html",
    }
    for out in paths.values():
        for report in fleet.inputs:
            if same_file(out, report):
                raise CompareError(
                    f"{out} is the report {report} that the fleet report is made of; "
                    "writing it would overwrite that report: name another folder"
                )
    write_together(
        {
            paths["json"]: dumps_json(fleet).encode("utf-8"),
            paths["markdown"]: to_markdown(fleet).encode("utf-8"),
            paths["html"]: to_html(fleet).encode("utf-8"),
        },
        report_mode(fleet.job_dir, folder),
    )
    return paths


def report_mode(*folders: Path) -> int:
    """The mode of fleet reports: 0666 less the umask, and readable by no class of users (owner,
    group, others) that one of `folders` (the job folder, the one written into) keeps out: a
    job folder of mode 0750 gets 0640 reports, one of 0700 gets 0600. What the reports hold
    came from the job folder; a run folder on a shared file system may be open to few."""
    readable = 0o666
    for folder in folders:
        try:
            allowed = folder.stat().st_mode & 0o777
        except OSError:
            continue
        for shift in (6, 3, 0):  # a class that cannot both list (r) and enter (x) it: no bits
            if (allowed >> shift) & 0o5 != 0o5:
                readable &= ~(0o7 << shift)
    return default_mode() & readable

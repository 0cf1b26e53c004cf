"""The fleet report: one row per node of a cluster validation, and the collectives across nodes.

    read_job_dir(job_dir, job=None, noise_floor_pct=2.0) -> Fleet

The job folder is read safely by envbuilder.report.jobfolder (`read_text_small(path)`,
`tail_lines(path)`: its small files and logs); envbuilder.report.fleet_output writes the report:

    table_rows(fleet), TABLE_HEADER, cross_rows(fleet), CROSS_HEADER   the tables
    to_json(fleet) / dumps_json(fleet) / to_markdown(fleet) / to_html(fleet)
    write_reports(fleet, folder) -> {"json": path, "markdown": path, "html": path}

The job folder is what slurm/<env>/validate.sbatch writes (docs/cluster.md): `hosts` ("NODE
ADDRESS" lines), `phase`, nodes/NODE.json|.exit|.log, collectives/all.json, all.rankN.json and
NODE.exit|.log.

Outliers use the noise rule of envbuilder.report.comparison, with the node as the "other" report and
the pooled samples of every other node as the baseline: a node is an outlier for a metric when its
range over the repeats does not overlap the others' range and its median differs from theirs by
more than the floor. Judged for every matmul metric, every single-node busbw size, ResNet-50
images/s and the kernel launch latency, when 3 or more nodes have the metric. With 2 nodes the
rule can say that they differ, not which one is off (a note); with 1 sample per node
(--repeat 1) the noise is unknown and no node is flagged.

Rows: failed nodes first (failed checks, or no report: why), then outliers, then the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envbuilder.core.errors import CompareError
from envbuilder.report.comparison import (
    DEFAULT_NOISE_FLOOR_PCT,
    check_noise_floor,
    compare_cell,
    noise_rule_text,
)
from envbuilder.report.fingerprints import fingerprint_diffs
from envbuilder.report.jobfolder import (
    MAX_NODE_NAME_BYTES,
    TAIL_LINE_CHARS,
    JobFolder,
    file_name_ok,
)
from envbuilder.report.reading import MAX_REPORT_BYTES, printable
from envbuilder.report.records import Cell, Comparison, Metric, MetricKey, Report
from envbuilder.report.tables import fingerprint_lines, fmt_num

TOOL = "envbuilder-fleet"
FORMAT_VERSION = 1
#: The metrics whose spread over the nodes is judged (check, metric name); None: every name.
JUDGED: tuple[tuple[str, str | None], ...] = (
    ("matmul", None),
    ("collectives", "busbw"),
    ("train", "images_per_s"),
    ("latency", "launch_latency"),
)
#: The matmul dtype the table shows first (what training runs), when a report has it.
MATMUL_DTYPES = ("bf16", "fp16", "fp32")
#: torchrun's world size in a rank report; a larger figure is a damaged report, not a job (one
#: "no report" row is made per missing rank, so an absurd figure would cost memory and time).
MAX_WORLD_SIZE = 1 << 16
_RANK_FILE = re.compile(r"all\.rank(\d+)\.json\Z")


@dataclass(frozen=True)
class JobInfo:
    """What Slurm said about the job (absent when a folder is read without asking Slurm)."""

    job_id: str
    state: str = ""
    reason: str = ""
    run_time: str = ""
    nodes: tuple[str, ...] = ()
    note: str | None = None  # e.g. "cancelled by envbuilder after 30 s"


@dataclass(frozen=True)
class Outlier:
    """A node's metric outside the others' spread (compare's noise rule)."""

    metric: str  # "matmul: tflops bf16 4096"
    verdict: str  # "faster" | "slower"
    value: float
    others_median: float
    unit: str


@dataclass(frozen=True)
class NodeRow:
    node: str
    status: str  # "pass" | "fail" | "no report"
    report: Path | None
    problems: tuple[str, ...] = ()
    metrics: Mapping[MetricKey, Metric] = field(default_factory=dict)
    outliers: tuple[Outlier, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status != "pass"


@dataclass(frozen=True)
class RankRow:
    rank: int
    node: str
    status: str  # a probe status, or "no report"
    reason: str | None


@dataclass(frozen=True)
class SizeRow:
    """busbw at one message size: across all nodes (rank 0) and on one node (median over the
    nodes' own collectives checks); ratio = all / one."""

    size: str
    all_nodes: float | None
    one_node: float | None
    unit: str

    @property
    def ratio(self) -> float | None:
        if self.all_nodes is None or not self.one_node:
            return None
        return self.all_nodes / self.one_node


@dataclass(frozen=True)
class CrossNode:
    status: str  # "pass" | "fail" | "not run"
    world_size: int | None = None
    nodes: tuple[str, ...] = ()
    ranks: tuple[RankRow, ...] = ()
    sizes: tuple[SizeRow, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status == "fail"


@dataclass(frozen=True)
class Fleet:
    job_dir: Path
    job: JobInfo
    env: str | None
    target: str | None
    nodes: tuple[NodeRow, ...]
    cross: CrossNode
    notes: tuple[str, ...]
    noise_floor_pct: float
    noise_rule: str
    #: the report files that were read (node and rank reports): --out must not replace them
    inputs: tuple[Path, ...] = ()

    @property
    def failed_nodes(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes if n.failed)

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and not self.failed_nodes and not self.cross.failed

    def failures(self) -> list[str]:
        """One line per failed node, and one for the collectives across nodes."""
        lines = [f"{n.node}: {'; '.join(n.problems) or n.status}" for n in self.nodes if n.failed]
        if self.cross.failed:
            lines.append(
                f"collectives across {','.join(self.cross.nodes) or 'the nodes'}: "
                f"{'; '.join(self.cross.problems) or 'failed'}"
            )
        if not self.nodes:
            lines.append(
                f"no node ran (job {self.job.job_id} {self.job.state or 'unknown'}"
                f"{': ' + self.job.reason if self.job.reason else ''})"
            )
        return lines


# --------------------------------------------------------------------------- reading


def _job_nodes(job: JobFolder, info: JobInfo) -> tuple[list[str], str]:
    """The job's nodes and where the names came from: the script's `hosts` file, else what
    Slurm said, else the reports."""
    hosts = job.text("hosts")
    if hosts:
        # a node named twice (a hand-edited file) is one row
        names = [line.split()[0] for line in hosts.splitlines() if line.strip()]
        return list(dict.fromkeys(names)), str(job.path / "hosts")
    if info.nodes:
        return list(info.nodes), "Slurm's node list of the job"
    stems = [n.removesuffix(".json") for n in job.names("nodes") if n.endswith(".json")]
    return sorted(stems), str(job.path / "nodes")


def _why_no_report(job: JobFolder, folder: str, node: str, info: JobInfo) -> str:
    code = (job.text(folder, f"{node}.exit") or "").strip()
    tail = job.tail(folder, f"{node}.log")
    if not code:
        state = info.state or "unknown"
        what = f"did not finish (job {state}{': ' + info.reason if info.reason else ''})"
    elif code == "3":
        what = "the image is not usable on this node"
    else:
        what = f"exited with {printable(code)[:40]} without a report"
    return f"no report: {what}" + (f"; output: {tail}" if tail else "")


def _node_row(
    job: JobFolder, node: str, source: str, info: JobInfo
) -> tuple[NodeRow, Report | None]:
    if not file_name_ok(node):
        # e.g. "../x", "/etc/passwd" or 300 bytes in a damaged hosts file: not read as a path
        shown = printable(node)[:TAIL_LINE_CHARS]
        why = (
            f"{source}: {shown!r} is not a node name (a path, a name over "
            f"{MAX_NODE_NAME_BYTES} bytes or with control characters; not a host name)"
        )
        return NodeRow(shown, "no report", None, (why,)), None
    path = job.path / "nodes" / f"{node}.json"
    if not job.has("nodes", f"{node}.json"):
        why = _why_no_report(job, "nodes", node, info)
        return NodeRow(node, "no report", None, (why,)), None
    try:
        report = job.report("nodes", f"{node}.json")
    except CompareError as exc:
        return NodeRow(node, "no report", path, (f"unreadable report: {exc}",)), None
    problems = tuple(
        f"{check}: {reason}" if reason else f"{check} failed"
        for check, reason in report.failed_checks
    )
    status = "pass" if report.status == "pass" else "fail"
    if status == "fail" and not problems:
        problems = (f"the probe says {report.status}",)
    return NodeRow(node, status, path, problems, dict(report.metrics)), report


def is_judged(key: MetricKey) -> bool:
    return any(key[0] == check and (name is None or key[1] == name) for check, name in JUDGED)


def _label(key: MetricKey) -> str:
    check, name, dtype, size = key
    return f"{check}: " + " ".join(p for p in (name, dtype, size) if p)


def _pooled(others: Sequence[Metric]) -> Metric:
    """The other nodes as one baseline: every sample of theirs, the median of their values."""
    samples = tuple(
        s for m in others for s in (m.samples or ((m.value,) if m.value is not None else ()))
    )
    return replace(
        others[0],
        value=_median([m.value for m in others]),
        samples=samples,
        check_status="pass",
        problem=None,
    )


def _median(values: Sequence[float | None]) -> float | None:
    """The median of the values that are there; None when none is."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else ordered[mid - 1] / 2 + ordered[mid] / 2


def _judge(rows: Sequence[NodeRow], floor_pct: float) -> tuple[dict[str, list[Outlier]], list[str]]:
    """Outliers per node, and notes (two nodes that differ; noise unknown)."""
    outliers: dict[str, list[Outlier]] = {}
    notes: list[str] = []
    unknown: list[str] = []
    keys = dict.fromkeys(k for r in rows for k in r.metrics if is_judged(k))
    for key in keys:
        have = {
            r.node: r.metrics[key]
            for r in rows
            if key in r.metrics and r.metrics[key].value is not None
        }
        if len(have) < 2:
            continue
        cells = _node_cells(have, floor_pct)
        beyond = {n: c for n, c in cells.items() if c.verdict in ("faster", "slower")}
        if all(c.verdict == "noise unknown" for c in cells.values()):
            unknown.append(_label(key))
        elif len(have) == 2 and beyond:
            notes.append(_two_nodes_differ(key, have))
        elif len(have) >= 3:
            for node, cell in beyond.items():
                outliers.setdefault(node, []).append(_outlier(key, have, node, cell.verdict))
    if unknown:
        notes.append(
            f"outliers not judged for {len(unknown)} metric(s): noise unknown with one "
            "sample per node; validate with --repeat 3 to judge them"
        )
    return outliers, notes


def _others(have: Mapping[str, Metric], node: str) -> Metric:
    return _pooled([m for n, m in have.items() if n != node])


def _node_cells(have: Mapping[str, Metric], floor_pct: float) -> dict[str, Cell]:
    """Each node's metric judged against the other nodes' pooled samples."""
    return {
        node: compare_cell(  # compare's noise rule, node vs the others
            _others(have, node), metric, node, floor_pct
        )
        for node, metric in have.items()
    }


def _two_nodes_differ(key: MetricKey, have: Mapping[str, Metric]) -> str:
    a, b = sorted(have)
    return (
        f"{a} and {b} differ in {_label(key)} ({fmt_num(have[a].value)}"
        f" vs {fmt_num(have[b].value)} {have[a].unit}), beyond noise; "
        "with two nodes neither is called the outlier"
    )


def _outlier(key: MetricKey, have: Mapping[str, Metric], node: str, verdict: str) -> Outlier:
    return Outlier(
        _label(key),
        verdict,
        float(have[node].value or 0.0),
        float(_others(have, node).value or 0.0),
        have[node].unit,
    )


def _rank_reports(job: JobFolder) -> dict[int, str]:
    """The rank reports in collectives/: rank -> file name."""
    found: dict[int, str] = {}
    for name in job.names("collectives"):
        if name == "all.json":
            found[0] = name
        elif match := _RANK_FILE.match(name):
            found[int(match.group(1))] = name
    return dict(sorted(found.items()))


def _collectives_entry(
    report: Report, job: JobFolder, name: str
) -> tuple[str, str | None, dict[str, Any]]:
    """(status, reason, details) of the collectives check in a rank's report."""
    try:
        data = json.loads(job.read("collectives", name, limit=MAX_REPORT_BYTES) or b"")
        entry = next(c for c in data["checks"] if c.get("name") == "collectives")
        return str(entry["status"]), entry.get("reason"), dict(entry.get("details") or {})
    except (OSError, ValueError, KeyError, TypeError, StopIteration, AttributeError):
        return report.status, None, {}


def _cross(
    job: JobFolder, nodes: Sequence[str], rows: Sequence[NodeRow], info: JobInfo
) -> CrossNode:
    phase = (job.text("phase") or "").strip()
    reports = _rank_reports(job)
    named = [n for n in nodes if file_name_ok(n)]  # the others are not read as paths
    shown = tuple(printable(n)[:TAIL_LINE_CHARS] for n in nodes)  # a damaged hosts
    ran = [
        n
        for n in named
        if job.has("collectives", f"{n}.exit") or job.has("collectives", f"{n}.log")
    ]
    if not reports and not ran:
        return _cross_not_run(phase, shown, info)
    found = _read_ranks(job, reports)
    problems = [
        *_rank_problems(found.rows, reports),
        *found.problems,
        *_torchrun_problems(job, named, ran, info),
    ]
    status = "fail" if problems else "pass"
    sizes = _sizes(found.rank0, rows)
    return CrossNode(status, found.world, shown, tuple(found.rows), sizes, tuple(problems))


def _cross_not_run(phase: str, shown: tuple[str, ...], info: JobInfo) -> CrossNode:
    """No rank wrote a report and no node started torchrun: why, from the job's phase."""
    if phase in ("probe", "collectives") or not phase:
        return CrossNode(
            "fail" if phase == "collectives" else "not run",
            nodes=shown,
            problems=(
                f"the job ended before the collectives across nodes ran "
                f"(job {info.state or 'unknown'})",
            ),
        )
    return CrossNode("not run", nodes=shown, problems=("not requested",))


@dataclass
class _Ranks:
    """What the rank reports say: a row per rank, the world size, rank 0's report."""

    rows: list[RankRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    world: int | None = None
    rank0: Report | None = None


def _read_ranks(job: JobFolder, reports: Mapping[int, str]) -> _Ranks:
    """A row per rank report, and one per rank of the world size that wrote none."""
    found = _Ranks()
    for rank, name in reports.items():
        try:
            report = job.report("collectives", name)
        except CompareError as exc:
            found.rows.append(RankRow(rank, "?", "no report", str(exc)))
            continue
        status, reason, details = _collectives_entry(report, job, name)
        if "world_size" in details and found.world is None:
            path = job.path / "collectives" / name
            found.world, problems = _world_size(details["world_size"], path)
            found.problems += problems
        found.rows.append(RankRow(rank, report.labels.get("node", "?"), status, reason))
        if rank == 0:
            found.rank0 = report
    if found.world is not None:
        for rank in range(found.world):
            if rank not in reports:
                found.rows.append(RankRow(rank, "?", "no report", None))
        found.rows.sort(key=lambda r: r.rank)
    return found


def _world_size(size: object, path: Path) -> tuple[int | None, list[str]]:
    """The world size a rank report gives, or the problem with it."""
    if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= MAX_WORLD_SIZE:
        return size, []
    return None, [
        f"{path}: details.world_size of the collectives check is {size!r}; "
        f"expected a rank count from 1 to {MAX_WORLD_SIZE}"
    ]


def _rank_problems(ranks: Sequence[RankRow], reports: Mapping[int, str]) -> list[str]:
    """The summary problems, shown first: no rank report at all; ranks that did not pass."""
    problems = [] if reports else ["no rank wrote a report"]
    bad = [r for r in ranks if r.status != "pass"]
    if bad:
        first = next((r for r in bad if r.reason), bad[0])
        problems.append(
            f"{len(bad)} of {len(ranks)} rank(s) did not pass; rank {first.rank} "
            f"on {first.node}: {first.reason or first.status}"
        )
    return problems


def _torchrun_problems(
    job: JobFolder, named: Sequence[str], ran: Sequence[str], info: JobInfo
) -> list[str]:
    """Nodes whose torchrun failed (its exit code and output) or did not finish."""
    problems = []
    for node in named:
        code = printable((job.text("collectives", f"{node}.exit") or "").strip())[:40]
        if code not in ("", "0"):
            output = job.tail("collectives", f"{node}.log")
            problems.append(f"{node}: torchrun exited with {code}; output: {output}")
        elif not code and node in ran:
            problems.append(f"{node}: did not finish (job {info.state or 'unknown'})")
    return problems


def busbw_metrics(metrics: Mapping[MetricKey, Metric]) -> dict[str, Metric]:
    return {
        k[3]: m
        for k, m in metrics.items()
        if k[0] == "collectives" and k[1] == "busbw" and k[3] and m.value is not None
    }


def _sizes(rank0: Report | None, rows: Sequence[NodeRow]) -> tuple[SizeRow, ...]:
    across = busbw_metrics(rank0.metrics) if rank0 else {}
    per_node = [busbw_metrics(r.metrics) for r in rows if r.status == "pass"]
    out = []
    for size in sorted(set(across) | {s for m in per_node for s in m}, key=size_key):
        one = _median([m[size].value for m in per_node if size in m])
        unit = (across.get(size) or next(m[size] for m in per_node if size in m)).unit
        out.append(SizeRow(size, across[size].value if size in across else None, one, unit))
    return tuple(out)


def size_key(size: str) -> tuple[int, str]:
    return (int(size), size) if size.isdigit() else (1 << 62, size)


def _env_target(reports: Sequence[Report]) -> tuple[str | None, str | None]:
    for report in reports:
        if "env" in report.labels:
            return report.labels.get("env"), report.labels.get("target")
    return None, None


def read_job_dir(
    job_dir: Path,
    job: JobInfo | None = None,
    noise_floor_pct: float = DEFAULT_NOISE_FLOOR_PCT,
) -> Fleet:
    """The fleet report of one job folder. A node without a report is a failed row saying why
    (its exit code and output, or the job's state); reports that are not probe reports too."""
    check_noise_floor(noise_floor_pct)
    folder = JobFolder(job_dir)
    try:
        return _read_fleet(folder, job, noise_floor_pct)
    finally:
        folder.close()


def _fingerprint_notes(reports: Sequence[Report], noise_floor_pct: float) -> list[str]:
    """What differs between the nodes' fingerprints (driver, torch, ...), as notes."""
    if len(reports) < 2:
        return []
    comparison = Comparison(
        tuple(reports), (), tuple(fingerprint_diffs(reports)), (), noise_floor_pct
    )
    return [f"nodes: {line}" for line in fingerprint_lines(comparison)]


def _read_fleet(job: JobFolder, given: JobInfo | None, noise_floor_pct: float) -> Fleet:
    if given is None and not any(job.has(name) for name in ("hosts", "nodes", "collectives")):
        raise CompareError(
            f"{job.path}: not a job folder (no hosts file, no nodes/ or collectives/); "
            "validate.sbatch writes RUN_DIR/job-<id>/ with them"
        )
    info = given or JobInfo(job.path.name.removeprefix("job-"))
    nodes, source = _job_nodes(job, info)
    read = [_node_row(job, node, source, info) for node in nodes]
    rows = [row for row, _ in read]
    reports = [report for _, report in read if report is not None]
    outliers, notes = _judge([r for r in rows if r.status != "no report"], noise_floor_pct)
    rows = [replace(r, outliers=tuple(outliers.get(r.node, ()))) for r in rows]
    rows.sort(key=lambda r: (0 if r.failed else 1 if r.outliers else 2, r.node))
    notes += _fingerprint_notes(reports, noise_floor_pct)
    env, target = _env_target(reports)
    if info.note:
        notes.insert(0, info.note)
    inputs = [r.report for r in rows if r.report is not None]
    ranks = [job.path / "collectives" / name for name in _rank_reports(job).values()]
    return Fleet(
        job.path,
        info,
        env,
        target,
        tuple(rows),
        _cross(job, nodes, rows, info),
        tuple(notes),
        noise_floor_pct,
        noise_rule_text(noise_floor_pct),
        (*inputs, *ranks),
    )

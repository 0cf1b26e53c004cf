"""The guides' table: the few figures a setup guide ends with, one column per environment.

The ROCm setup guides close their benchmarks with a table per configuration: memory bandwidth
(GB/s), ResNet-50 training speed (images/s) and latency. `guide_rows` picks those figures out of
a comparison (the probe's membw, train and latency checks, with the host link each way and both
ways at once, where WSL2 pays) and keeps each one's cells as `compare` judged them: the value,
the loss against the baseline and the noise verdict. The terminal, markdown, HTML and JSON
outputs all render these rows, so they show the same numbers.

Library code only: values in, rows out. It reads a comparison's records and formats its cells
with `report.tables`, as the metrics table does; `report.documents` puts it into the markdown
and JSON documents, `report.html` into the page, the command onto the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envbuilder.report.records import Cell, Comparison, Row
from envbuilder.report.tables import cell_verdict, fmt_num, fmt_pct


@dataclass(frozen=True)
class Figure:
    """One line of the guide's table: its title, and the probe metric that measures it."""

    title: str
    check: str
    name: str


#: The guide's figures in the guide's order: memory bandwidth, training speed, latency.
FIGURES: tuple[Figure, ...] = (
    Figure("memory bandwidth (device copy)", "membw", "copy_bandwidth"),
    Figure("host to device (pinned)", "membw", "h2d_bandwidth"),
    Figure("device to host (pinned)", "membw", "d2h_bandwidth"),
    Figure("host-device, both ways at once", "membw", "bidir_bandwidth"),
    Figure("ResNet-50 training", "train", "images_per_s"),
    Figure("ResNet-50 step time", "train", "step_time"),
    Figure("kernel launch latency", "latency", "launch_latency"),
    Figure("launch + synchronise latency", "latency", "sync_latency"),
)
#: Sizes of these checks are bytes; shown as KiB/MiB/GiB.
BYTE_SIZED = ("membw",)


@dataclass(frozen=True)
class GuideRow:
    """A figure and the comparison's row for it (cells[0] is the baseline)."""

    figure: Figure
    row: Row

    @property
    def title(self) -> str:
        """The figure's title, and what it was measured on (dtype, size) where the metric says."""
        detail = [p for p in (self.row.dtype, _size_text(self.row)) if p]
        return f"{self.figure.title} ({', '.join(detail)})" if detail else self.figure.title


def _size_text(row: Row) -> str | None:
    if row.size is None or row.check not in BYTE_SIZED or not row.size.isdigit():
        return row.size
    n = int(row.size)
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _values(row: Row) -> int:
    return sum(c.value is not None for c in row.cells)


def guide_rows(comp: Comparison) -> list[GuideRow]:
    """The guide's figures found in `comp`, in the guide's order. Where a figure was measured
    at several sizes or dtypes, the row with the most reports holding a value (the first of
    equals, which is the baseline's order)."""
    out = []
    for figure in FIGURES:
        rows = [r for r in comp.rows if (r.check, r.name) == (figure.check, figure.name)]
        if rows:
            out.append(GuideRow(figure, max(rows, key=_values)))
    return out


def guide_header(comp: Comparison) -> list[str]:
    """figure, unit, the baseline's label, then each other report's label, loss and verdict."""
    header = ["figure", "unit", comp.baseline.label]
    for report in comp.reports[1:]:
        header += [report.label, "loss", "verdict"]
    return header


def guide_table(comp: Comparison) -> list[list[str]]:
    """One line per figure: the baseline's value, then each other report's value, its loss
    against the baseline (positive: worse) and the noise verdict."""
    lines = []
    for g in guide_rows(comp):
        base, *others = g.row.cells
        line = [g.title, g.row.unit, fmt_num(base.value)]
        for cell in others:
            line += [fmt_num(cell.value), fmt_pct(cell.loss_pct), _verdict(cell)]
        lines.append(line)
    return lines


def _verdict(cell: Cell) -> str:
    return cell_verdict(cell) if cell.value is not None else "-"


def guide_markdown(comp: Comparison) -> list[str]:
    """The guide's table as markdown lines (a note when no report holds its figures)."""
    table = guide_table(comp)
    if not table:
        return ["No guide figure in these reports (the membw, train and latency checks)."]
    header = guide_header(comp)
    return [_md_line(header), "|" + "---|" * len(header), *map(_md_line, table)]


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def guide_json(comp: Comparison) -> list[dict[str, Any]]:
    """The guide's table for machines: per figure, the metric it is, and each report's value,
    loss and verdict."""
    return [
        {
            "figure": g.figure.title,
            "check": g.row.check,
            "name": g.row.name,
            "dtype": g.row.dtype,
            "size": g.row.size,
            "unit": g.row.unit,
            "higher_is_better": g.row.higher_is_better,
            "results": [
                {
                    "report": c.report,
                    "value": c.value,
                    "loss_pct": c.loss_pct,
                    "verdict": c.verdict if c.value is not None else None,
                }
                for c in g.row.cells
            ],
        }
        for g in guide_rows(comp)
    ]

"""The `compare --html` page: one PNG chart per check and `index.html` holding every table.

Apart from `envbuilder.report.comparison` (which matches and judges; this module only draws
what it computed) so that matplotlib is an optional extra: `pip install 'dl-envbuilder[html]'`.
matplotlib is imported inside the functions that draw, never at import time, so importing this
module, and `envbuilder compare` without --html, work without it; `require_matplotlib` turns
its absence into a `CompareError` that says what to install, before anything is written.
"""

from __future__ import annotations

import importlib
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.core.errors import CompareError
from envbuilder.report import guide
from envbuilder.report.records import Comparison, Row
from envbuilder.report.tables import (
    TABLE_HEADER,
    VERDICT_COLUMN,
    cell_verdict,
    fingerprint_lines,
    table_rows,
)

#: What to run when matplotlib is missing (pyproject.toml's optional dependency `html`).
INSTALL_HINT = "pip install 'dl-envbuilder[html]'"


def require_matplotlib() -> None:
    """Raise CompareError saying how to install matplotlib when it cannot be imported.

    `write_html` calls it first; the command calls it before reading or writing anything, so a
    missing extra never leaves the markdown and JSON written and the page not."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as exc:
        raise CompareError(
            f"--html draws its charts with matplotlib, which cannot be imported here ({exc}); "
            f"install the html extra: {INSTALL_HINT}"
        ) from exc


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "metrics"


#: Charts draw `relative` values in this range (a log axis spans it); a value outside it is
#: in the tables only.
CHART_RANGE = (1e-6, 1e6)
#: At most this many metrics per chart (a figure grows with its rows, and past a few dozen
#: nobody reads it): the ones that differ most from the baseline; the table lists all.
CHART_MAX_ROWS = 40


def _plottable(x: float | None) -> bool:
    return x is not None and CHART_RANGE[0] <= x <= CHART_RANGE[1]


def _largest_difference(row: Row) -> float:
    return max(
        abs(math.log(c.relative))
        for c in row.cells[1:]
        if c.relative is not None and _plottable(c.relative)
    )


def chart_groups(comp: Comparison) -> dict[str, tuple[list[Row], int]]:
    """Per check (one chart each): the rows to draw, and how many rows had a value to chart.
    Only rows with a plottable ratio count; past CHART_MAX_ROWS, the rows that differ most
    from the baseline are drawn, in table order."""
    groups: dict[str, list[Row]] = {}
    for row in comp.rows:
        if any(_plottable(c.relative) for c in row.cells[1:]):
            groups.setdefault(row.check, []).append(row)
    out: dict[str, tuple[list[Row], int]] = {}
    for check, rows in groups.items():
        shown = rows
        if len(rows) > CHART_MAX_ROWS:
            keep = set(
                map(id, sorted(rows, key=_largest_difference, reverse=True)[:CHART_MAX_ROWS])
            )
            shown = [r for r in rows if id(r) in keep]
        out[check] = (shown, len(rows))
    return out


def draw_chart(comp: Comparison, check: str, rows: Sequence[Row], dest: Path) -> None:
    """One PNG: a dot per (metric, report) at the performance relative to the baseline (> 1 is
    better), a whisker over the worst..best case of the two sample ranges, a grey band for the
    noise floor and a line at 1."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must come before pyplot
    # Labels come from the reports: "$...$" in one must print as it is, not as mathtext (which
    # fails on bad TeX) nor through a LaTeX a user's matplotlibrc may ask for.
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        _draw_chart(comp, check, rows, dest)


#: One colour per compared report, in order (repeating past six).
_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


@dataclass(frozen=True)
class _Dot:
    """One (metric, report) of a chart: where it is drawn, its whisker and its label."""

    y: float
    x: float  # the relative performance
    low: float
    high: float
    text: str


def _draw_chart(comp: Comparison, check: str, rows: Sequence[Row], dest: Path) -> None:
    import matplotlib.pyplot as plt

    others = [r.label for r in comp.reports[1:]]
    n_rep = max(len(others), 1)
    fig_h = max(2.4, 1.3 + len(rows) * (0.35 + 0.3 * n_rep))
    fig, ax = plt.subplots(figsize=(9, fig_h), dpi=100)
    _draw_noise_floor(ax, comp.noise_floor_pct)
    dots: list[_Dot] = []
    for j, label in enumerate(others):
        report_dots = _report_dots(rows, j, n_rep)
        _plot_dots(ax, report_dots, label, _COLORS[j % len(_COLORS)])
        dots += report_dots
    log = _label_dots_and_scale(ax, dots, comp.noise_floor_pct / 100.0)
    _draw_metric_axis(ax, rows)
    ax.set_xlabel(
        f"performance relative to {comp.baseline.label}  (> 1 is better; whiskers: "
        f"worst..best over the repeats{'; log scale' if log else ''})"
    )
    ax.set_title(f"{check}: compared with {comp.baseline.label}")
    # The legend sits in a strip of fixed height under the axes, whatever the figure's height.
    fig.tight_layout(rect=(0, 0.32 / fig_h, 1, 1))
    fig.legend(loc="lower center", ncol=min(len(others) + 1, 3), fontsize=8, frameon=False)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # No timestamp or software tag in the PNG, so the same comparison gives the same bytes.
    fig.savefig(dest, format="png", metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)


def _draw_noise_floor(ax: Any, floor_pct: float) -> None:
    floor = floor_pct / 100.0
    ax.axvspan(1 - floor, 1 + floor, color="0.88", zorder=0, label=f"noise floor ±{floor_pct:g}%")
    ax.axvline(1.0, color="0.3", linewidth=1, zorder=1)


def _report_dots(rows: Sequence[Row], j: int, n_rep: int) -> list[_Dot]:
    """The dots of the j-th compared report, one per row with a plottable value; a report's
    dots sit side by side around their row's line."""
    step = 0.7 / n_rep
    dots = []
    for i, row in enumerate(rows):
        c = row.cells[j + 1]
        if c.relative is None or not _plottable(c.relative):
            continue
        y = (len(rows) - 1 - i) + ((n_rep - 1) / 2 - j) * step
        low = c.relative_low if _plottable(c.relative_low) else c.relative
        high = c.relative_high if _plottable(c.relative_high) else c.relative
        assert low is not None and high is not None
        text = f"{-(c.loss_pct or 0.0):+.1f}%  {cell_verdict(c)}"
        dots.append(_Dot(y, c.relative, low, high, text))
    return dots


def _plot_dots(ax: Any, dots: Sequence[_Dot], label: str, color: str) -> None:
    ax.errorbar(
        [d.x for d in dots],
        [d.y for d in dots],
        xerr=[[max(d.x - d.low, 0.0) for d in dots], [max(d.high - d.x, 0.0) for d in dots]],
        fmt="o",
        color=color,
        label=label,
        capsize=4,
        markersize=7,
        elinewidth=1.5,
        zorder=3,
    )


def _label_dots_and_scale(ax: Any, dots: Sequence[_Dot], floor: float) -> bool:
    """Write each dot's label right of its whisker and fit the x axis to them all, the noise
    floor's band twice over at least. Returns whether the axis is logarithmic."""
    lo_x = min([1 - 2 * floor, *(d.low for d in dots)])
    hi_x = max([1 + 2 * floor, *(d.high for d in dots)])
    # Ratios are multiplicative: when they span more than 3x, a log axis keeps 0.5 and 2 the
    # same distance from 1.
    log = lo_x > 0 and hi_x / lo_x > 3
    span = hi_x - lo_x
    for d in dots:
        x = d.high * 1.06 if log else d.high + span * 0.02
        ax.text(x, d.y, d.text, va="center", fontsize=8, zorder=4)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(lo_x / 1.3, hi_x * 4)
    else:
        ax.set_xlim(lo_x - span * 0.08, hi_x + span * 0.6)
    return log


def _draw_metric_axis(ax: Any, rows: Sequence[Row]) -> None:
    """One tick per metric, the first row at the top, a faint line between rows."""
    n_rows = len(rows)
    ax.set_ylim(-0.6, n_rows - 0.4)
    ax.set_yticks(range(n_rows))
    ax.set_yticklabels([f"{r.label} [{r.unit}]" if r.unit else r.label for r in reversed(rows)])
    for k in range(1, n_rows):
        ax.axhline(k - 0.5, color="0.9", linewidth=0.8, zorder=0)


def is_html_output(name: str) -> bool:
    """Whether `write_html` may write a file of this name into its folder (the page, a chart,
    a chart's temp file): an input there would be overwritten."""
    return name == "index.html" or (
        name.startswith(("chart-", ".chart-")) and name.endswith((".png", ".png.tmp"))
    )


def write_html(comp: Comparison, out_dir: Path) -> Path:
    """Write `out_dir/index.html` and one `chart-<check>.png` per metric group (relative paths,
    no network: the page opens offline). Returns the page's path. Raises CompareError, with
    nothing written, when matplotlib is missing."""
    require_matplotlib()
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    from envbuilder.core.fsutil import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    charts: list[dict[str, Any]] = []
    for check, (rows, total) in chart_groups(comp).items():
        name = f"chart-{_slug(check)}.png"
        if any(c["file"] == name for c in charts):  # "a.b" and "a-b" slug alike
            name = f"chart-{_slug(check)}-{len(charts) + 1}.png"
        # mkstemp: created exclusively (O_EXCL|O_NOFOLLOW) under an unpredictable name; the
        # ".chart-" prefix and ".png.tmp" suffix let a later run remove one an interrupt left
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name[:-4]}.", suffix=".png.tmp")
        os.close(fd)
        draw_chart(comp, check, rows, Path(tmp))
        Path(tmp).replace(out_dir / name)
        charts.append({"check": check, "file": name, "shown": len(rows), "total": total})
    env = Environment(
        loader=PackageLoader("envbuilder", "data/templates/compare"),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    page = env.get_template("index.html.j2").render(
        comp=comp,
        charts=charts,
        header=TABLE_HEADER,
        rows=table_rows(comp),
        fingerprint=fingerprint_lines(comp),
        verdict_column=VERDICT_COLUMN,
        guide_header=guide.guide_header(comp),
        guide_rows=guide.guide_table(comp),
    )
    path = out_dir / "index.html"
    atomic_write_text(path, page)
    return path

"""The comparison as table text: numbers, percentages and verdicts as cells, the metrics table
and the fingerprint warnings. The terminal, markdown, HTML and the guide's table all use these,
so every output shows the same text for the same value.
"""

from __future__ import annotations

from envbuilder.report.records import Cell, Comparison, Spread


def fmt_num(x: float | None, digits: int = 4) -> str:
    """A number for tables: 4 significant digits, '-' for none."""
    if x is None:
        return "-"
    return f"{x:.{digits}g}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def cell_verdict(cell: Cell) -> str:
    """Verdict text; for 'noise unknown' the direction it leans is added."""
    if cell.verdict == "noise unknown" and cell.direction == "same":
        return "noise unknown (no difference)"
    if cell.verdict == "noise unknown" and cell.direction:
        return f"noise unknown (looks {cell.direction})"
    return cell.verdict


def spread_text(s: Spread | None) -> str:
    """'min .. max (n=3)'; the median is its own column."""
    if s is None:
        return "-"
    return f"{fmt_num(s.min)} .. {fmt_num(s.max)} (n={s.n})"


def table_rows(comp: Comparison) -> list[list[str]]:
    """Rows for the terminal, markdown and HTML tables: one line per metric and report; the
    metric's name only on its first (the baseline's) line."""
    out = []
    for row in comp.rows:
        for i, c in enumerate(row.cells):
            out.append(
                [
                    f"{row.check}: {row.label}" if i == 0 else "",
                    c.report,
                    f"{fmt_num(c.value)} {row.unit}".strip() if c.value is not None else "-",
                    spread_text(c.spread),
                    fmt_num(c.ratio, 3),
                    fmt_pct(c.loss_pct),
                    cell_verdict(c),
                    c.note or "",
                ]
            )
    return out


TABLE_HEADER = ["metric", "report", "median", "min .. max", "ratio", "loss", "verdict", "note"]
VERDICT_COLUMN = TABLE_HEADER.index("verdict")


def _short(value: str) -> str:
    """Long hex digests are shortened to 12 characters for reading."""
    if len(value) > 16 and all(ch in "0123456789abcdef" for ch in value.lower()):
        return value[:12]
    return value


def fingerprint_lines(comp: Comparison) -> list[str]:
    """Warnings about fingerprint differences, unfair first; empty when all match."""
    labels = [r.label for r in comp.reports]
    lines = []
    for d in comp.fingerprint_diffs:
        vals = ", ".join(f"{lab}: {_short(v)}" for lab, v in zip(labels, d.values, strict=True))
        kind = "UNFAIR" if d.unfair else "note"
        lines.append(f"{kind}: {d.field} differs ({d.why}): {vals}")
    return lines

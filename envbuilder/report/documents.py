"""The comparison as documents: markdown (`to_markdown`) and JSON (`to_json`, `dumps_json`).
Each holds the guide's table (`report.guide`) between the fingerprint and the metrics: this
module composes the comparison's tables and the guide's, which both read the comparison.
"""

from __future__ import annotations

import json
from typing import Any

from envbuilder.report.guide import guide_json, guide_markdown
from envbuilder.report.records import Cell, Comparison
from envbuilder.report.tables import TABLE_HEADER, fingerprint_lines, table_rows


def to_markdown(comp: Comparison) -> str:
    """The comparison as a markdown document."""
    lines = [f"# envbuilder compare: baseline {comp.baseline.label}", ""]
    lines += ["Reports:", ""]
    lines += [f"- `{r.label}`: `{r.path}` (status {r.status})" for r in comp.reports]
    lines += ["", "## Fingerprint", ""]
    fp = fingerprint_lines(comp)
    lines += [f"- {line}" for line in fp] if fp else ["- all compared fields match"]
    lines += ["", "## The guide's table", "", *guide_markdown(comp)]
    lines += ["", "## Metrics", "", f"Noise rule: {comp.noise_rule}", ""]
    lines.append("| " + " | ".join(TABLE_HEADER) + " |")
    lines.append("|" + "---|" * len(TABLE_HEADER))
    for r in table_rows(comp):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    if comp.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in comp.notes]
    return "\n".join(lines) + "\n"


def _cell_json(c: Cell) -> dict[str, Any]:
    return {
        "report": c.report,
        "value": c.value,
        "min": c.spread.min if c.spread else None,
        "median": c.spread.median if c.spread else None,
        "max": c.spread.max if c.spread else None,
        "n": c.spread.n if c.spread else 0,
        "ratio": c.ratio,
        "relative": c.relative,
        "relative_low": c.relative_low,
        "relative_high": c.relative_high,
        "loss_pct": c.loss_pct,
        "verdict": c.verdict,
        "direction": c.direction,
        "noise": c.noise,
        "note": c.note,
    }


def to_json(comp: Comparison) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (no NaN: missing numbers are null)."""
    return {
        "schema_version": 1,
        "tool": "envbuilder-compare",
        "baseline": comp.baseline.label,
        "noise_floor_pct": comp.noise_floor_pct,
        "noise_rule": comp.noise_rule,
        "reports": [
            {"label": r.label, "path": str(r.path), "status": r.status, "labels": dict(r.labels)}
            for r in comp.reports
        ],
        "fingerprint_differences": [
            {"field": d.field, "values": list(d.values), "unfair": d.unfair, "why": d.why}
            for d in comp.fingerprint_diffs
        ],
        "guide": guide_json(comp),
        "metrics": [
            {
                "check": row.check,
                "name": row.name,
                "dtype": row.dtype,
                "size": row.size,
                "unit": row.unit,
                "higher_is_better": row.higher_is_better,
                "results": [_cell_json(c) for c in row.cells],
            }
            for row in comp.rows
        ],
        "notes": list(comp.notes),
    }


def dumps_json(comp: Comparison) -> str:
    """`to_json` serialised, one metric per line; allow_nan=False proves no NaN slipped through.

    The metrics are encoded compactly by the C encoder: `indent` makes json use its pure-Python
    encoder, 5 s for 50,000 metrics."""
    data = to_json(comp)
    metrics = data.pop("metrics")
    compact = json.JSONEncoder(allow_nan=False)
    head = json.dumps(data, indent=2, allow_nan=False)
    if not metrics:
        return head[:-2] + ',\n  "metrics": []\n}\n'
    body = ",\n    ".join(map(compact.encode, metrics))
    return head[:-2] + ',\n  "metrics": [\n    ' + body + "\n  ]\n}\n"

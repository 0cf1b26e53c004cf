"""Compare probe reports: match metrics, ratios to a baseline, spread over repeats, noise verdicts.

Metrics are matched by (check, name, dtype, size); the values of a cell (ratio, relative,
loss_pct) are described in `envbuilder.report.records`.

How a difference is judged (the *noise rule*, also printed with every comparison):

    the two runs' sample ranges [min, max] overlap      -> "within noise"
    |median other - median baseline| <= floor% x |baseline|  -> "within noise"
    otherwise                                     -> "faster" / "slower" (by `higher_is_better`)
    fewer than 2 samples in either report -> "noise unknown" (the direction is still shown)

Samples are the repeats (`--repeat N`). Separated ranges are a permutation test: if both runs
came from the same distribution, all n samples of one landing beyond all m of the other happens
with probability 2 / C(n+m, n) (10 % for 3 and 3, 1 % for 5 and 5), printed with the rule. The
rule depends only on the order of the samples, so a bandwidth and the time it was derived from
get the same verdict. The floor keeps a tiny but clean separation from calling a 0.5 % wobble a
win.

Library code only: values in, values out; printing and writing are the command's job. The
modules of `compare`, each importing only modules listed before it: `records` (the values),
`reading` (`load_report`), `fingerprints`, `tables` (the text of cells and tables), this module
(`compare_reports`), `guide` (the guide's table), `documents` (`to_markdown`, `to_json`), `html`
(the page and its charts; needs matplotlib, the optional extra `dl-envbuilder[html]`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import replace

from envbuilder.core.errors import CompareError
from envbuilder.report.fingerprints import fingerprint_diffs
from envbuilder.report.records import (
    Cell,
    Comparison,
    Direction,
    Metric,
    MetricKey,
    Report,
    Row,
    Spread,
    Verdict,
)

DEFAULT_NOISE_FLOOR_PCT = 2.0


def _median(values: Sequence[float]) -> float:
    """The median without overflow: statistics.median adds the middle two, and 1e308 + 1e308
    is inf."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return ordered[mid - 1] / 2 + ordered[mid] / 2


def _spread(m: Metric) -> Spread | None:
    if m.value is None:
        return None
    samples = m.samples or (m.value,)
    return Spread(min(samples), _median(samples), max(samples), len(m.samples) or 1)


def _relative(ratio: float, higher_is_better: bool) -> float | None:
    if higher_is_better:
        return ratio
    return None if ratio == 0 else 1.0 / ratio


def compare_cell(base: Metric, other: Metric, label: str, floor_pct: float) -> Cell:
    spread = _spread(other)
    if other.value is None:
        return Cell(label, None, None, note=other.problem)
    if base.value is None:
        return Cell(label, other.value, spread, note=f"baseline {base.problem}; no ratio")
    if base.value == 0:
        return Cell(label, other.value, spread, note="baseline value is 0; no ratio")
    ratio = other.value / base.value
    if not _representable(ratio) or (ratio == 0 and other.value != 0):
        return Cell(label, other.value, spread, note=_out_of_range(other.value, base.value))
    relative = _relative(ratio, base.higher_is_better)
    if relative is None:
        return Cell(label, other.value, spread, ratio=ratio, note=_ZERO_WHERE_LOWER_IS_BETTER)
    if not _representable(relative) or not _representable((1.0 - relative) * 100.0):
        return Cell(label, other.value, spread, note=_out_of_range(other.value, base.value))
    bs = _spread(base)
    assert bs is not None and spread is not None
    low, high = _range_ratio(bs, spread, base.higher_is_better)
    diff = other.value - base.value
    noise = abs(base.value) * (floor_pct / 100.0)  # in this order: 1e308 * 2 is inf
    verdict, direction = _verdict(bs, spread, diff, noise, base.higher_is_better)
    return Cell(
        label,
        other.value,
        spread,
        ratio=ratio,
        relative=relative,
        relative_low=low,
        relative_high=high,
        loss_pct=(1.0 - relative) * 100.0,
        verdict=verdict,
        direction=direction,
        noise=noise,
        note=_compared_note(base, other),
    )


_ZERO_WHERE_LOWER_IS_BETTER = "value is 0 where lower is better; no ratio"


def _verdict(
    base: Spread, other: Spread, diff: float, noise: float, higher_is_better: bool
) -> tuple[Verdict, Direction]:
    """The noise rule (see the module's docstring) for other - base = diff."""
    better = diff > 0 if higher_is_better else diff < 0
    direction: Direction = "same" if diff == 0 else ("faster" if better else "slower")
    if base.n < 2 or other.n < 2:
        return "noise unknown", direction
    separated = other.min > base.max or other.max < base.min
    if not separated or abs(diff) <= noise:
        return "within noise", direction
    return ("faster" if better else "slower"), direction


def _compared_note(base: Metric, other: Metric) -> str | None:
    notes = [n for n in (other.problem, base.problem and f"baseline: {base.problem}") if n]
    if other.check_status in ("fail", "error"):
        notes.append(f"check {other.check} {other.check_status}ed here")
    return "; ".join(notes) or None


def _representable(x: float) -> bool:
    """Finite and not a subnormal that lost its digits: safe to divide by and to print."""
    return math.isfinite(x) and (x == 0 or abs(x) >= sys.float_info.min)


def _out_of_range(value: float, base: float) -> str:
    return (
        f"{value:.4g} / {base:.4g} is beyond floating-point range "
        f"({sys.float_info.min:.3g} .. {sys.float_info.max:.3g}); no ratio"
    )


def _range_ratio(
    base: Spread, other: Spread, higher_is_better: bool
) -> tuple[float, float] | tuple[None, None]:
    """Worst and best `relative` over the sample ranges (for error bars); none when a bound is
    0, negative, or beyond floating-point range."""
    if min(base.min, base.max, other.min, other.max) <= 0:
        return None, None
    if higher_is_better:
        low, high = other.min / base.max, other.max / base.min
    else:
        low, high = base.min / other.max, base.max / other.min
    if not (_representable(low) and _representable(high)) or low == 0:
        return None, None
    return low, high


def _baseline_cell(m: Metric | None, label: str) -> Cell:
    if m is None:
        return Cell(label, None, None, verdict="no comparison", note="not in the baseline")
    note = m.problem
    if m.check_status in ("fail", "error"):
        note = "; ".join(n for n in (note, f"check {m.check} {m.check_status}ed here") if n)
    return Cell(
        label,
        m.value,
        _spread(m),
        ratio=1.0 if m.value else None,
        relative=1.0 if m.value else None,
        verdict="baseline",
        note=note,
    )


def noise_rule_text(floor_pct: float) -> str:
    """The noise rule in words (printed above every table and in the docs)."""
    return (
        "A difference counts only when the two runs' ranges over the repeats (min..max) do not "
        f"overlap and the medians differ by more than {floor_pct:g}% of the baseline; otherwise "
        "it is 'within noise'. Non-overlapping ranges arise by chance with probability "
        "2/C(n+m, n) for n and m repeats (10% for 3 and 3, 1% for 5 and 5). With fewer than 2 "
        "samples in either run the noise is unknown."
    )


def check_noise_floor(noise_floor_pct: float) -> None:
    """--noise-floor must be a percentage: CompareError otherwise (NaN and inf included)."""
    if not 0 <= noise_floor_pct < 100 or math.isnan(noise_floor_pct):
        raise CompareError(
            f"--noise-floor {noise_floor_pct:g}: the noise floor must be a percentage from 0 "
            f"up to 100 (default {DEFAULT_NOISE_FLOOR_PCT:g})"
        )


def compare_reports(
    reports: Sequence[Report], baseline: int = 0, noise_floor_pct: float = DEFAULT_NOISE_FLOOR_PCT
) -> Comparison:
    """Match the reports' metrics against `reports[baseline]`. The returned comparison lists the
    baseline first. Raises CompareError when there is nothing to compare."""
    if len(reports) < 2:
        raise CompareError("compare needs at least two reports")
    check_noise_floor(noise_floor_pct)
    ordered = [reports[baseline]] + [r for i, r in enumerate(reports) if i != baseline]
    ordered = _unique_labels(ordered)
    rows, shared = _rows(ordered, noise_floor_pct)
    _check_comparable(ordered[0], rows, shared)
    return Comparison(
        reports=tuple(ordered),
        rows=tuple(rows),
        fingerprint_diffs=tuple(fingerprint_diffs(ordered)),
        notes=tuple(_comparison_notes(ordered)),
        noise_floor_pct=noise_floor_pct,
        noise_rule=noise_rule_text(noise_floor_pct),
    )


def _metric_keys(ordered: Sequence[Report]) -> dict[MetricKey, None]:
    """Every report's metric keys, the baseline's first, in first-seen order."""
    # A dict keeps first-seen order with O(1) membership (a list made this quadratic: 4 min
    # for 50,000 metrics).
    keys = dict.fromkeys(ordered[0].metrics)
    for r in ordered[1:]:
        keys.update(dict.fromkeys(r.metrics))
    return keys


def _rows(ordered: Sequence[Report], floor_pct: float) -> tuple[list[Row], bool]:
    """One row per metric, and whether any metric of the baseline (ordered[0]) is in another
    report."""
    base = ordered[0]
    rows: list[Row] = []
    shared = False
    for key in _metric_keys(ordered):
        bm = base.metrics.get(key)
        first = bm or next(r.metrics[key] for r in ordered if key in r.metrics)
        cells = [_baseline_cell(bm, base.label)]
        for r in ordered[1:]:
            om = r.metrics.get(key)
            shared = shared or (bm is not None and om is not None)
            cells.append(_other_cell(bm, om, r.label, floor_pct))
        rows.append(
            Row(
                first.check,
                first.name,
                first.dtype,
                first.size,
                first.unit,
                first.higher_is_better,
                tuple(cells),
            )
        )
    return rows, shared


def _other_cell(bm: Metric | None, om: Metric | None, label: str, floor_pct: float) -> Cell:
    """The cell of a report that is not the baseline."""
    if om is None:
        return Cell(label, None, None, note=f"missing in {label}")
    if bm is None:
        return Cell(label, om.value, _spread(om), note="not in the baseline; no ratio")
    return compare_cell(bm, om, label, floor_pct)


def _check_comparable(base: Report, rows: Sequence[Row], shared: bool) -> None:
    """CompareError when the rows hold nothing to compare with the baseline."""
    if not rows:
        raise CompareError(
            "none of the reports holds a metric; run `envbuilder validate` with a "
            "level that measures (e.g. --level quick or standard)"
        )
    if not base.metrics:
        only = base.options.get("only") or []
        raise CompareError(
            f"the baseline {base.label} ({base.path}) holds no metric"
            + (f" (it ran only {', '.join(map(str, only))})" if only else "")
            + "; validate it with the timed checks (matmul, amp, membw, collectives) and "
            "--repeat 3"
        )
    if not shared:
        raise CompareError(
            f"no metric of the baseline {base.label} appears in the other reports; were they made "
            "with the same --level and --only/--skip?"
        )


def _comparison_notes(ordered: Sequence[Report]) -> list[str]:
    """The reports' own notes, then per report its failed checks and missing metrics."""
    base = ordered[0]
    notes = [n for r in ordered for n in r.notes]
    for r in ordered:
        for check, reason in r.failed_checks:
            notes.append(
                f"{r.label}: check {check} failed: {reason or 'no reason given'}"
                + _explain_hint(reason)
            )
        missing = [k for k in base.metrics if k not in r.metrics]
        if r is not base and missing:
            notes.append(f"{r.label}: {len(missing)} metric(s) of the baseline are missing")
    return notes


def _explain_hint(reason: str | None) -> str:
    """' -- envbuilder explain: <title>' when the reason is a known error message."""
    if not reason:
        return ""
    from envbuilder.host.explain import match  # local: explain loads its data file lazily

    found = match(reason)
    return f" -- known problem: {found.title} (see `envbuilder explain`)" if found else ""


def _unique_labels(reports: list[Report]) -> list[Report]:
    seen: dict[str, int] = {}
    out = []
    for r in reports:
        n = seen.get(r.label, 0)
        seen[r.label] = n + 1
        if n:
            r = replace(r, label=f"{r.label} ({r.path.name})")
        out.append(r)
    return out

"""The records of a comparison: a probe report as read (`Report`, its `Metric`s), and what
comparing makes of it (`Comparison`: one `Row` per matched metric, one `Cell` per report, its
`Spread` over the repeats; `FingerprintDiff`s). Values only: `report.reading` makes the reports,
`report.comparison` the rest.

Metrics are matched by (check, name, dtype, size), their `key`. A cell's values are relative to
the baseline: `ratio` = other / baseline (raw values); `relative` is the performance relative
to the baseline (> 1 is better: the ratio, or its inverse when lower is better); `loss_pct` =
(1 - relative) x 100 (negative means a gain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Verdict = Literal["baseline", "faster", "slower", "within noise", "noise unknown", "no comparison"]
MetricKey = tuple[str, str, str | None, str | None]  # (check, name, dtype, size)
Direction = Literal["faster", "slower", "same"]


@dataclass(frozen=True)
class Metric:
    """One metric of one report, with the samples its median came from."""

    check: str
    name: str
    dtype: str | None
    size: str | None
    value: float | None  # None: missing or not a finite number (see `problem`)
    unit: str
    samples: tuple[float, ...]
    higher_is_better: bool
    check_status: str  # status of the check that produced it
    problem: str | None = None  # why `value` cannot be used, in words

    @property
    def key(self) -> MetricKey:
        return (self.check, self.name, self.dtype, self.size)


@dataclass(frozen=True)
class Report:
    """A probe report, read and checked."""

    path: Path
    label: str  # short name for tables: "<env>/<target>" from the labels, else the file name
    schema_version: int
    status: str
    fingerprint: Mapping[str, Any]
    labels: Mapping[str, str]
    options: Mapping[str, Any]
    metrics: Mapping[MetricKey, Metric]
    failed_checks: tuple[tuple[str, str | None], ...]  # (check name, reason) for fail/error
    notes: tuple[str, ...] = ()  # problems found while reading (duplicate metrics, ...)


@dataclass(frozen=True)
class Spread:
    """Min / median / max over the repeats; n is the number of finite samples."""

    min: float
    median: float
    max: float
    n: int

    @property
    def range(self) -> float:
        return self.max - self.min


@dataclass(frozen=True)
class Cell:
    """One report's entry for one metric, relative to the baseline."""

    report: str
    value: float | None
    spread: Spread | None
    ratio: float | None = None
    relative: float | None = None
    relative_low: float | None = None  # worst case of `relative` over the two sample ranges
    relative_high: float | None = None  # best case
    loss_pct: float | None = None
    verdict: Verdict = "no comparison"
    direction: Direction | None = None
    noise: float | None = None  # the absolute floor (floor% x |baseline|) used for the verdict
    note: str | None = None


@dataclass(frozen=True)
class Row:
    """One matched metric across all reports. cells[0] is the baseline."""

    check: str
    name: str
    dtype: str | None
    size: str | None
    unit: str
    higher_is_better: bool
    cells: tuple[Cell, ...]

    @property
    def label(self) -> str:
        parts = [self.name] + [p for p in (self.dtype, self.size) if p]
        return " ".join(parts)


@dataclass(frozen=True)
class FingerprintDiff:
    """A fingerprint field that differs between reports; `unfair` ones skew the numbers."""

    field: str
    values: tuple[str, ...]  # one per report, in report order
    unfair: bool
    why: str


@dataclass(frozen=True)
class Comparison:
    reports: tuple[Report, ...]  # reports[0] is the baseline
    rows: tuple[Row, ...]
    fingerprint_diffs: tuple[FingerprintDiff, ...]
    notes: tuple[str, ...]
    noise_floor_pct: float
    noise_rule: str = field(default="")

    @property
    def baseline(self) -> Report:
        return self.reports[0]

"""Compare probe reports: match metrics, ratios to a baseline, spread over repeats, noise verdicts.

Reports follow the probe contract (schema `envbuilder/data/schemas/probe-report.schema.json`,
`schema_version` 1). Metrics are matched by (check, name, dtype, size).

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

Values are relative to the baseline: `ratio` = other / baseline (raw values); `relative` is the
performance relative to the baseline (> 1 is better: the ratio, or its inverse when lower is
better); `loss_pct` = (1 - relative) x 100 (negative means a gain).

Library code only: `load_report`, `compare_reports`, `to_json`, `to_markdown` return values;
printing and writing are the command's job. The HTML page and its charts are in
`envbuilder.report.html`, which imports this module (never the other way round) and needs
matplotlib, the optional extra `dl-envbuilder[html]`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from envbuilder.core.errors import CompareError

SUPPORTED_SCHEMA_VERSIONS = (1,)
PROBE_TOOL = "envbuilder-probe"
DEFAULT_NOISE_FLOOR_PCT = 2.0

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


# --------------------------------------------------------------------------- reading

#: A probe report is kilobytes (50,000 metrics are ~8 MB); a bigger file is not one, and
#: reading it whole would only cost memory.
MAX_REPORT_BYTES = 64 * 1024 * 1024
#: A report nests 6 deep (report > checks > check > metrics > metric > samples) plus a check's
#: free-form `details`. Python's JSON reader recurses per level, so depth is checked first.
MAX_JSON_DEPTH = 64
#: Labels, check and metric names, units, dtypes and sizes become table cells and chart labels.
MAX_NAME_CHARS = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE_TAB = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_JSON_ESCAPE = re.compile(r"\\.", re.DOTALL)
_JSON_STRING = re.compile(r'"[^"]*"')  # linear: run after escapes are gone
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _preview(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: object) -> str:
    """The JSON type of a decoded value, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _wrong_type(where: str, key: str, wanted: str, value: object) -> CompareError:
    return CompareError(
        f"{where}: {key!r} must be {wanted}, not {_kind(value)} ({_preview(value)})"
    )


def _name(value: object, where: str, key: str) -> str:
    """A string shown as one table cell or chart label: one line, at most MAX_NAME_CHARS."""
    if not isinstance(value, str):
        raise _wrong_type(where, key, "a string", value)
    if len(value) > MAX_NAME_CHARS:
        raise CompareError(
            f"{where}: {key!r} is {len(value)} characters long; at most {MAX_NAME_CHARS}"
        )
    if bad := _CONTROL.search(value):
        raise CompareError(
            f"{where}: {key!r} contains the control character {bad.group()!r}; "
            "it must be one line of plain text"
        )
    return value


def _optional_name(value: object, where: str, key: str) -> str | None:
    return None if value is None else _name(value, where, key)


def printable(text: str) -> str:
    """Free text from a report (a failure reason, a fingerprint value) made safe for a terminal:
    control characters other than newline and tab become '?'."""
    return _CONTROL_BUT_NEWLINE_TAB.sub("?", text)


def _number(value: object, where: str, key: str) -> float | None:
    """A JSON number as a float (None for null; NaN and inf are kept and reported later)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong_type(where, key, "a number", value)
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range: as infinite as 1e999
        return math.inf if value > 0 else -math.inf


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _metric_from(check: str, status: str, raw: object, where: str) -> Metric:
    if not isinstance(raw, dict):
        raise CompareError(f"{where}: a metric is not an object but {_kind(raw)}")
    if raw.get("name") in (None, ""):
        raise CompareError(f"{where}: a metric has no name; expected {{'name': ..., 'value': ...}}")
    name = _name(raw["name"], where, "name")
    where = f"{where}: metric {name!r}"
    raw_samples = raw.get("samples")
    if raw_samples is None:
        raw_samples = []
    if not isinstance(raw_samples, list):
        raise _wrong_type(where, "samples", "a list of numbers", raw_samples)
    numbers = [_number(s, where, f"samples[{i}]") for i, s in enumerate(raw_samples)]
    samples = tuple(v for v in map(_finite, numbers) if v is not None)
    value = _finite(_number(raw.get("value"), where, "value"))
    problem = None
    if value is None:
        problem = (
            "value is missing"
            if raw.get("value") is None
            else f"value is not a finite number ({_preview(raw['value'])})"
        )
    elif len(samples) < len(raw_samples):
        bad = len(raw_samples) - len(samples)
        problem = f"{bad} of {len(raw_samples)} samples are NaN/inf, ignored"
    higher = raw.get("higher_is_better", True)
    if not isinstance(higher, bool):
        raise _wrong_type(where, "higher_is_better", "true or false", higher)
    return Metric(
        check=check,
        name=name,
        dtype=_optional_name(raw.get("dtype"), where, "dtype"),
        size=_optional_name(raw.get("size"), where, "size"),
        value=value,
        unit=_optional_name(raw.get("unit"), where, "unit") or "",
        samples=samples,
        higher_is_better=higher,
        check_status=status,
        problem=problem,
    )


def _object(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """An optional object member (absent or null: empty)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _wrong_type(where, key, "an object", value)
    return value


def _labels(data: Mapping[str, Any], where: str) -> dict[str, str]:
    raw = _object(data, "labels", where)
    return {k: _name(v, where, f"labels.{k}") for k, v in raw.items()}


def _check_version(data: Mapping[str, Any], where: str) -> int:
    version = data.get("schema_version")
    if version is None:
        raise CompareError(
            f"{where}: not a probe report (no schema_version); pass the JSON "
            "files `envbuilder validate` or `envbuilder probe --json` wrote"
        )
    # `type(...) is int`: JSON true would otherwise pass as 1.
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        raise CompareError(
            f"{where}: schema_version {_preview(version)} is not supported (this envbuilder reads "
            f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}); re-run `envbuilder validate` with "
            "this envbuilder, or compare with the envbuilder that wrote it"
        )
    if data.get("tool") not in (PROBE_TOOL, None):
        raise CompareError(f"{where}: written by {_preview(data.get('tool'))}, not by {PROBE_TOOL}")
    return version


def _read_checks(
    checks: list[Any], where: str
) -> tuple[dict[MetricKey, Metric], list[tuple[str, str | None]], list[str]]:
    metrics: dict[MetricKey, Metric] = {}
    failed: list[tuple[str, str | None]] = []
    notes: list[str] = []
    for i, check in enumerate(checks):
        if not isinstance(check, dict) or check.get("name") is None:
            raise CompareError(f"{where}: checks[{i}]: a check has no name")
        name = _name(check["name"], f"{where}: checks[{i}]", "name")
        cwhere = f"{where}: check {name!r}"
        status = _optional_name(check.get("status"), cwhere, "status") or "pass"
        reason = check.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _wrong_type(cwhere, "reason", "a string or null", reason)
        if status in ("fail", "error"):
            failed.append((name, None if reason is None else printable(reason)))
        raw_metrics = check.get("metrics")
        if raw_metrics is None:
            raw_metrics = []
        if not isinstance(raw_metrics, list):
            raise _wrong_type(cwhere, "metrics", "a list", raw_metrics)
        for raw in raw_metrics:
            m = _metric_from(name, status, raw, cwhere)
            if m.key in metrics:
                notes.append(
                    f"{where}: metric {' '.join(p for p in m.key if p)} appears twice; "
                    "the first is used"
                )
                continue
            metrics[m.key] = m
    return metrics, failed, notes


def parse_report(data: object, path: Path) -> Report:
    """Check a decoded report and turn it into a `Report`. Raises CompareError saying what is
    wrong with which file and key."""
    where = str(path)
    if not isinstance(data, dict):
        raise CompareError(f"{where}: not a probe report (expected a JSON object)")
    version = _check_version(data, where)
    checks = data.get("checks")
    if not isinstance(checks, list):
        raise CompareError(f"{where}: 'checks' is missing or not a list; is this a probe report?")
    metrics, failed, notes = _read_checks(checks, where)
    labels = _labels(data, where)
    label = "/".join(labels[k] for k in ("env", "target") if k in labels) or path.stem
    return Report(
        path=path,
        label=label,
        schema_version=version,
        status=_optional_name(data.get("status"), where, "status") or "",
        fingerprint=_object(data, "fingerprint", where),
        labels=labels,
        options=_object(data, "options", where),
        metrics=metrics,
        failed_checks=tuple(failed),
        notes=tuple(notes),
    )


def json_nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON `text`, without parsing it (so without
    recursion): escapes and strings are removed, then the brackets counted. Linear in the text."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", _JSON_ESCAPE.sub("", text)))
    if not brackets:
        return 0
    return max(0, max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets))))


_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular_file(path: Path, info: os.stat_result) -> None:
    """Refuse, at once, anything that is not a regular file of report size: reading a FIFO
    waits for a writer, a device may never end."""
    if stat.S_ISDIR(info.st_mode):
        raise CompareError(
            f"{path}: is a folder; pass report files, e.g. reports/<env>.<target>.json"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = next((word for test, word in _FILE_KINDS if test(info.st_mode)), "special")
        raise CompareError(
            f"{path}: is {kind}, not a regular file; compare reads report "
            "files (reports/<env>.<target>.json)"
        )
    if info.st_size > MAX_REPORT_BYTES:
        raise CompareError(
            f"{path}: is {info.st_size:,} bytes; a probe report is at most "
            f"{MAX_REPORT_BYTES >> 20} MiB"
        )


def _read_report_bytes(path: Path) -> bytes:
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before the
    # fstat below could refuse it. Regular files ignore the flag.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CompareError(
            f"{path}: no such report; `envbuilder validate` writes them to "
            "reports/<env>.<target>.json"
        ) from None
    except IsADirectoryError:
        raise CompareError(
            f"{path}: is a folder; pass report files, e.g. reports/<env>.<target>.json"
        ) from None
    except OSError as exc:
        raise CompareError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        _check_regular_file(path, os.fstat(fd))
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise CompareError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_REPORT_BYTES:  # it grew after the fstat
        raise CompareError(
            f"{path}: is over {MAX_REPORT_BYTES >> 20} MiB; a probe report is smaller"
        )
    return data


def load_report(path: Path) -> Report:
    """Read one report file. Raises CompareError (never a traceback) when it cannot be used:
    not a regular file, too big, not UTF-8, not JSON, nested too deep, or not a probe report."""
    return report_from_bytes(_read_report_bytes(path), path)


def report_from_bytes(data: bytes, path: Path) -> Report:
    """A report from the bytes of `path` (read by the caller: the fleet report reads a job
    folder without following links). CompareError as load_report."""
    if len(data) > MAX_REPORT_BYTES:
        raise CompareError(
            f"{path}: is over {MAX_REPORT_BYTES >> 20} MiB; a probe report is smaller"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CompareError(
            f"{path}: not UTF-8 text (byte {exc.start}); a probe report is UTF-8 JSON"
        ) from None
    if (depth := json_nesting_depth(text)) > MAX_JSON_DEPTH:
        raise CompareError(
            f"{path}: JSON nested {depth} levels deep; a probe report nests a "
            f"few levels (at most {MAX_JSON_DEPTH} are read)"
        )
    try:
        decoded = json.loads(text)  # Python's json accepts NaN/Infinity, which we then report
    except json.JSONDecodeError as exc:
        raise CompareError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        reason = str(exc).split(";")[0]
        raise CompareError(f"{path}: cannot be read as JSON: {reason}") from None
    return parse_report(decoded, path)


# --------------------------------------------------------------------------- fingerprints

#: (field, unfair?, why) -- unfair fields change the numbers for reasons other than the target.
_FP_FIELDS: tuple[tuple[str, bool, str], ...] = (
    ("torch", True, "different torch builds run different kernels"),
    ("hip", True, "different HIP runtimes"),
    ("cuda", True, "different CUDA runtimes"),
    ("gpu", True, "different GPUs"),
    ("gfx", True, "different GPU architectures"),
    ("driver", True, "different drivers"),
    ("packages_sha256", True, "different installed packages (name==version)"),
    (
        "lock_sha256",
        True,
        "different lock files (each target has its own pylock: check that "
        "the pinned versions match)",
    ),
    ("python", True, "different Python versions"),
    ("nccl", True, "different NCCL/RCCL versions (collectives)"),
    ("cpu_count", True, "different CPU counts visible"),
    ("torch_threads", True, "different torch thread counts (CPU figures scale with them)"),
    ("cpus_allowed", True, "different numbers of CPUs allowed (affinity: taskset, cpuset)"),
    ("cpu_quota", True, "different CPU quotas (cgroup cpu.max / CFS quota, e.g. docker --cpus)"),
    ("level", True, "different probe levels (sizes and iterations differ)"),
    ("repeat", False, "different numbers of repeats (the noise bounds differ)"),
    ("wsl", False, "WSL vs not: usually what is being measured"),
    ("host_os", False, "host OS differs"),
    ("kernel", False, "kernel differs"),
)
_FP_WHY = {name: why for name, _unfair, why in _FP_FIELDS}
#: Fields that reports of older probes lack (probe 1.1 added them): compared only when every
#: report has the key, so an old report is not unfair for what it did not record.
_FP_NEWER = ("torch_threads", "cpus_allowed", "cpu_quota")


def _fp_value(report: Report, name: str) -> str:
    """A fingerprint field as one line of text (the fields are free-form: a report from another
    probe may hold anything there)."""
    text = _fp_raw_value(report, name)
    text = " ".join(printable(text).split())
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 3] + "..."


def _fp_raw_value(report: Report, name: str) -> str:
    fp = report.fingerprint
    raw = fp.get("devices")
    devices: list[Any] = raw if isinstance(raw, list) else []
    if name in ("gpu", "gfx"):
        key = "name" if name == "gpu" else "gfx"
        vals = [str(d.get(key)) for d in devices if isinstance(d, dict) and d.get(key)]
        return ", ".join(vals) if vals else "none"
    if name in ("level", "repeat"):
        return str(report.options.get(name, "?"))
    value = fp.get(name)
    return "none" if value is None else str(value)


def _all_have_packages(reports: Sequence[Report]) -> bool:
    return all(isinstance(r.fingerprint.get("packages_sha256"), str) for r in reports)


def _lock_diff(reports: Sequence[Report], values: tuple[str, ...]) -> FingerprintDiff:
    """Differing pylock files: unfair unless every report says what it had installed.

    Each target has its own pylock, so the files differ even when every pin is the same; what
    the numbers depend on is what was installed (`packages_sha256`; older reports lack it).
    When all reports carry it, that field decides fairness and the lock difference is a note.
    """
    packages = [r.fingerprint.get("packages_sha256") for r in reports]
    if not _all_have_packages(reports):
        return FingerprintDiff("lock_sha256", values, True, _FP_WHY["lock_sha256"])
    if len(set(packages)) == 1:
        return FingerprintDiff(
            "lock_sha256", values, False, "different pylock files, same installed packages"
        )
    return FingerprintDiff(
        "lock_sha256", values, False, "different pylock files (see packages_sha256)"
    )


def fingerprint_diffs(reports: Sequence[Report]) -> list[FingerprintDiff]:
    """Fields whose values differ across the reports, unfair ones first."""
    diffs = []
    for name, unfair, why in _FP_FIELDS:
        values = tuple(_fp_value(r, name) for r in reports)
        if len(set(values)) <= 1:
            continue
        if name == "packages_sha256" and not _all_have_packages(reports):
            continue  # a report from before the field: the lock_sha256 rule decides
        if name in _FP_NEWER and not all(name in r.fingerprint for r in reports):
            continue  # a report from before the field: unknown, not different
        if name == "lock_sha256":
            diffs.append(_lock_diff(reports, values))
        else:
            diffs.append(FingerprintDiff(name, values, unfair, why))
    return sorted(diffs, key=lambda d: not d.unfair)


# --------------------------------------------------------------------------- comparing


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


def _compare_cell(base: Metric, other: Metric, label: str, floor_pct: float) -> Cell:
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
    return _compare_cell(bm, om, label, floor_pct)


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


# --------------------------------------------------------------------------- output


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


def to_markdown(comp: Comparison) -> str:
    """The comparison as a markdown document."""
    lines = [f"# envbuilder compare: baseline {comp.baseline.label}", ""]
    lines += ["Reports:", ""]
    lines += [f"- `{r.label}`: `{r.path}` (status {r.status})" for r in comp.reports]
    lines += ["", "## Fingerprint", ""]
    fp = fingerprint_lines(comp)
    lines += [f"- {line}" for line in fp] if fp else ["- all compared fields match"]
    from envbuilder.report.guide import guide_markdown  # layer-exception: it imports this module

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
    from envbuilder.report.guide import guide_json  # layer-exception: it imports this module

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

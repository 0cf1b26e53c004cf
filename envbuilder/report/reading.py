"""Read probe reports: `load_report` (a file), `report_from_bytes` (bytes the caller read),
`parse_report` (decoded JSON). Every refusal is a CompareError that says which file and key is
wrong and what would be right, never a traceback.

Reports follow the probe contract (schema `envbuilder/data/schemas/probe-report.schema.json`,
`schema_version` 1). A file is refused before it is parsed when it is not a regular file, is
bigger than a report can be, is not UTF-8 or nests deeper than a report does; text shown in a
table (names, labels) must be one line of plain text.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuilder.core.errors import CompareError
from envbuilder.report.records import Metric, MetricKey, Report

SUPPORTED_SCHEMA_VERSIONS = (1,)
PROBE_TOOL = "envbuilder-probe"

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

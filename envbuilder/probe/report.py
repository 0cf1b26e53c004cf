"""The report for people: a plain-text table of checks and metrics (stdlib only)."""

from __future__ import annotations

from typing import Any

BYTE_SIZED = {"collectives", "membw"}


def _bytes(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _size(check: str, size: str | None) -> str:
    if size is None:
        return "-"
    if check in BYTE_SIZED and size.isdigit():
        return _bytes(int(size))
    return size


def _num(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 100_000:
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{value:.3g}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _short(text: str | None, limit: int = 90) -> str:
    line = (text or "").strip().splitlines()[0] if text and text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _cpu_lines(fp: dict[str, Any]) -> list[str]:
    """The CPU facts and their warnings (reports before probe 1.1 have neither)."""
    if "cpus_allowed" not in fp:
        return []
    quota = fp.get("cpu_quota")
    load = fp.get("load_avg")
    quota_text = f"quota {quota:g} CPUs" if quota is not None else "no quota"
    load_text = f"load average at start {load[0]:g}" if load else "load average unknown"
    line = (
        f"cpus: {fp['cpus_allowed']} allowed of {fp.get('cpu_count')}, {quota_text}; "
        f"torch threads {fp.get('torch_threads')}; {load_text}"
    )
    return [line, *(f"WARNING: {w}" for w in fp.get("cpu_warnings") or [])]


def _release_lines(report: dict[str, Any]) -> list[str]:
    """The release check's line (probe 1.2, when conformance ran): expected vs found."""
    for c in report["checks"]:
        release = (c.get("details") or {}).get("release") if c["name"] == "conformance" else None
        if isinstance(release, dict) and release.get("summary"):
            return [f"release: {release['summary']}"]
    return []


def render_table(report: dict[str, Any]) -> str:
    """Checks, then metrics (median, and min..max when repeated), then the verdict."""
    lines = [_headline(report), *_cpu_lines(report["fingerprint"]), *_release_lines(report), ""]
    lines += _table(_check_rows(report["checks"]))
    metric_rows = _metric_rows(report["checks"])
    if len(metric_rows) > 1:
        lines += ["", *_table(metric_rows)]
    lines += ["", _result_line(report)]
    return "\n".join(lines)


def _headline(report: dict[str, Any]) -> str:
    """What was asked, and the torch, devices and OS it ran on."""
    opts = report["options"]
    fp = report["fingerprint"]
    devices = ", ".join(d["name"] for d in fp["devices"]) or "no GPU"
    build = f"hip {fp['hip']}" if fp["hip"] else (f"cuda {fp['cuda']}" if fp["cuda"] else "cpu")
    return (
        f"envbuilder probe {report['probe_version']}: level {opts['level']}, expect "
        f"{opts['expect']}, repeat {opts['repeat']}; torch {fp['torch']} ({build}); "
        f"{devices}; {fp['host_os']}{' (WSL)' if fp['wsl'] else ''}"
    )


def _check_rows(checks: list[dict[str, Any]]) -> list[list[str]]:
    rows = [["check", "status", "time", "note"]]
    rows += [
        [
            c["name"],
            c["status"].upper() if c["status"] in ("fail", "error") else c["status"],
            f"{c['duration_s']:.1f}s",
            _short(c["reason"]),
        ]
        for c in checks
    ]
    return rows


def _metric_rows(checks: list[dict[str, Any]]) -> list[list[str]]:
    """The header, then one row per metric of every check."""
    rows = [["check", "metric", "dtype", "size", "value", "unit", "min..max"]]
    for c in checks:
        for m in c["metrics"]:
            spread = (
                f"{_num(min(m['samples']))}..{_num(max(m['samples']))}"
                if len(m["samples"]) > 1
                else ""
            )
            rows.append(
                [
                    c["name"],
                    m["name"],
                    m["dtype"] or "-",
                    _size(c["name"], m["size"]),
                    _num(m["value"]),
                    m["unit"],
                    spread,
                ]
            )
    return rows


def _result_line(report: dict[str, Any]) -> str:
    counts = {
        s: sum(1 for c in report["checks"] if c["status"] == s)
        for s in ("pass", "fail", "error", "skip")
    }
    return (
        f"result: {report['status'].upper()} ("
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + f") in {report['duration_s']:.1f} s"
    )

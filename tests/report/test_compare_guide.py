"""compare's guide table (memory bandwidth, ResNet-50 images/s, latency): the numbers it shows in
the terminal, markdown, HTML and JSON are the reports' numbers, and its loss and verdict follow
the noise rule; computed here from the reports independently of compare's own arithmetic."""

from __future__ import annotations

import html as html_lib
import json
import re
import statistics
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.commands._cli import main
from envbuilder.report import comparison, documents, guide, reading
from envbuilder.report import html as compare_html

SCHEMA = json.loads(
    (
        Path(comparison.__file__).parent.parent / "data" / "schemas" / "probe-report.schema.json"
    ).read_text()
)

#: (check, name, unit, higher_is_better, size, native samples, wsl2 samples or None)
FIGURES: list[tuple[str, str, str, bool, str | None, list[float], list[float] | None]] = [
    ("membw", "copy_bandwidth", "GB/s", True, str(1 << 30), [4150, 4200, 4100], [4090, 4180, 4000]),
    ("membw", "h2d_bandwidth", "GB/s", True, str(256 << 20), [55.4], [24.8]),
    (
        "membw",
        "bidir_bandwidth",
        "GB/s",
        True,
        str(256 << 20),
        [101.0, 99.0, 100.0],
        [40.0, 41.0, 39.5],
    ),
    ("train", "images_per_s", "img/s", True, "224x224", [3000, 3010, 2990], [2500, 2520, 2490]),
    ("train", "step_time", "ms", False, "224x224", [85.3, 85.1, 85.5], [102.4, 102.0, 102.9]),
    ("latency", "launch_latency", "us", False, None, [4.8, 4.9, 5.0], [21.0, 22.0, 25.0]),
    ("latency", "sync_latency", "us", False, None, [11.0, 12.0, 11.5], None),
]
TITLES = {
    "copy_bandwidth": "memory bandwidth (device copy) (1 GiB)",
    "h2d_bandwidth": "host to device (pinned) (256 MiB)",
    "bidir_bandwidth": "host-device, both ways at once (256 MiB)",
    "images_per_s": "ResNet-50 training (fp16, 224x224)",
    "step_time": "ResNet-50 step time (fp16, 224x224)",
    "launch_latency": "kernel launch latency",
    "sync_latency": "launch + synchronise latency",
}


def probe_report(target: str, wsl: bool) -> dict[str, Any]:
    """A probe report of the membw, train and latency checks, with FIGURES' samples (the
    WSL2 column's when `wsl`, else the native column's)."""
    checks: dict[str, list[dict[str, Any]]] = {
        "membw": [],
        "train": [],
        "latency": [],
        "matmul": [],
    }
    for fig in FIGURES:
        check, name, unit, higher, size, native, in_wsl = fig
        samples = in_wsl if wsl else native
        if samples is None:
            continue
        checks[check].append(
            {
                "name": name,
                "value": statistics.median(samples),
                "unit": unit,
                "dtype": "fp16" if check == "train" else None,
                "size": size,
                "samples": samples,
                "higher_is_better": higher,
            }
        )
    checks["matmul"].append(
        {
            "name": "tflops",
            "value": 600.0,
            "unit": "TFLOP/s",
            "dtype": "bf16",
            "size": "8192",
            "samples": [600.0],
            "higher_is_better": True,
        }
    )
    return {
        "schema_version": 1,
        "tool": "envbuilder-probe",
        "probe_version": "1.3.0",
        "started_at": "2026-12-05T07:00:00+00:00",
        "duration_s": 30.0,
        "status": "pass",
        "options": {"level": "workload", "expect": "rocm", "repeat": 3},
        "labels": {"env": "rocm", "target": target},
        "fingerprint": {
            "python": "3.12.3",
            "torch": "2.11.0+rocm7.14",
            "hip": "7.14",
            "cuda": None,
            "driver": None,
            "devices": [],
            "host_os": "Ubuntu 24.04",
            "kernel": "6.8",
            "wsl": wsl,
            "lock_sha256": "a" * 64,
            "env_vars": {},
        },
        "checks": [
            {
                "name": c,
                "status": "pass",
                "reason": None,
                "duration_s": 1.0,
                "details": {},
                "metrics": m,
            }
            for c, m in checks.items()
        ],
    }


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, Path]:
    native, wsl2 = tmp_path / "rocm.native.json", tmp_path / "rocm.wsl2.json"
    for path, data in (
        (native, probe_report("native", False)),
        (wsl2, probe_report("wsl2", True)),
    ):
        jsonschema.Draft202012Validator(SCHEMA).validate(data)
        path.write_text(json.dumps(data))
    return native, wsl2


def expected_line(fig: tuple[Any, ...]) -> list[str]:
    """The guide table's line for a figure, from the samples alone."""
    _check, name, unit, higher, _size, base, other = fig
    b = statistics.median(base)
    line = [TITLES[name], unit, f"{b:.4g}"]
    if other is None:
        return [*line, "-", "-", "-"]
    o = statistics.median(other)
    relative = o / b if higher else b / o
    separated = min(other) > max(base) or max(other) < min(base)
    if len(base) < 2 or len(other) < 2:
        better = (o > b) if higher else (o < b)
        verdict = f"noise unknown (looks {'faster' if better else 'slower'})"
    elif separated and abs(o - b) > 0.02 * abs(b):
        verdict = "faster" if relative > 1 else "slower"
    else:
        verdict = "within noise"
    return [*line, f"{o:.4g}", f"{(1 - relative) * 100:+.1f}%", verdict]


EXPECTED = [expected_line(f) for f in FIGURES]


def test_expected_lines_cover_every_verdict() -> None:
    """The fixture exercises each kind of line (so the comparisons below mean something)."""
    verdicts = {line[-1] for line in EXPECTED}
    assert {"within noise", "slower", "noise unknown (looks slower)", "-"} <= verdicts


def test_guide_table_shows_the_reports_numbers(reports: tuple[Path, Path]) -> None:
    comp = comparison.compare_reports([reading.load_report(p) for p in reports])
    assert guide.guide_header(comp) == [
        "figure",
        "unit",
        "rocm/native",
        "rocm/wsl2",
        "loss",
        "verdict",
    ]
    assert guide.guide_table(comp) == EXPECTED


def _markdown_table(text: str) -> list[list[str]]:
    section = text.split("## The guide's table", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row.strip("|").split(" | ")] for row in rows]


def test_markdown_and_json_carry_the_table(reports: tuple[Path, Path], tmp_path: Path) -> None:
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    assert main(["compare", *map(str, reports), "--markdown", str(md), "--json", str(js)]) == 0
    header, *lines = _markdown_table(md.read_text())
    assert header == ["figure", "unit", "rocm/native", "rocm/wsl2", "loss", "verdict"]
    assert lines == EXPECTED
    data = json.loads(js.read_text())
    by_name = {g["name"]: g for g in data["guide"]}
    for fig in FIGURES:
        entry = by_name[fig[1]]
        base, other = entry["results"]
        assert base["value"] == statistics.median(fig[5])
        assert other["value"] == (None if fig[6] is None else statistics.median(fig[6]))
    assert [g["name"] for g in data["guide"]] == [
        "copy_bandwidth",
        "h2d_bandwidth",
        "bidir_bandwidth",
        "images_per_s",
        "step_time",
        "launch_latency",
        "sync_latency",
    ]  # the guide's order; d2h is in neither report, so it has no line


def test_terminal_shows_the_table(
    reports: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # one table line per figure, nothing folded
    assert main(["compare", *map(str, reports)]) == 0
    out = capsys.readouterr().out
    assert "the guide's table, compared with rocm/native" in out
    for line in EXPECTED:
        found = [row for row in out.splitlines() if row.strip("│ ").startswith(line[0])]
        assert len(found) == 1, (line, out)
        cells = [c.strip() for c in found[0].strip().strip("│").split("│")]
        assert cells == line


def test_html_page_shows_the_table(reports: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the html extra (matplotlib) draws the page's charts")
    comp = comparison.compare_reports([reading.load_report(p) for p in reports])
    page = compare_html.write_html(comp, tmp_path / "html").read_text()
    table = page.split("<h2>The guide's table</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    cells = [
        [html_lib.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r)] for r in rows
    ]
    assert cells[0] == ["figure", "unit", "rocm/native", "rocm/wsl2", "loss", "verdict"]
    assert cells[1:] == EXPECTED
    assert '<td class="slower">slower</td>' in table


def test_three_reports_get_a_column_group_each(reports: tuple[Path, Path], tmp_path: Path) -> None:
    native, wsl2 = reports
    docker = tmp_path / "rocm.docker.json"
    docker.write_text(json.dumps(probe_report("docker", False)))
    comp = comparison.compare_reports([reading.load_report(p) for p in (native, wsl2, docker)])
    assert guide.guide_header(comp)[2:] == [
        "rocm/native",
        "rocm/wsl2",
        "loss",
        "verdict",
        "rocm/docker",
        "loss",
        "verdict",
    ]
    for line, want, fig in zip(guide.guide_table(comp), EXPECTED, FIGURES, strict=True):
        assert line[:6] == want
        # docker holds native's very samples: no loss, and no verdict but noise
        same = "within noise" if len(fig[5]) > 1 else "noise unknown (no difference)"
        assert line[6:] == [want[2], "+0.0%", same]


def test_reports_without_guide_figures_say_so(tmp_path: Path) -> None:
    a = probe_report("native", False)
    for c in a["checks"]:
        if c["name"] != "matmul":
            c["metrics"] = []
    b = json.loads(json.dumps(a))
    b["labels"]["target"] = "wsl2"
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for p, d in zip(paths, (a, b), strict=True):
        p.write_text(json.dumps(d))
    comp = comparison.compare_reports([reading.load_report(p) for p in paths])
    assert guide.guide_table(comp) == []
    assert "No guide figure in these reports" in documents.to_markdown(comp)

"""compare: matching, ratios, noise verdicts, fingerprints, edge cases, outputs."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from envbuilder.commands._cli import main
from envbuilder.core.errors import CompareError
from envbuilder.report import comparison, documents, reading, records, tables
from envbuilder.report import html as compare_html

DATA = Path(__file__).parents[1] / "data" / "compare"


def report(
    metrics: list[dict[str, Any]],
    *,
    target: str = "docker",
    check: str = "matmul",
    status: str = "pass",
    reason: str | None = None,
    **fp: Any,
) -> dict[str, Any]:
    """A probe report (contract schema_version 1) holding `metrics` under one check."""
    fingerprint: dict[str, Any] = {
        "python": "3.11.2",
        "torch": "2.13.0+cpu",
        "hip": None,
        "cuda": None,
        "driver": None,
        "devices": [],
        "host_os": "Debian 12",
        "kernel": "6.1",
        "wsl": False,
        "lock_sha256": "a" * 64,
        "env_vars": {},
    }
    fingerprint.update(fp)
    return {
        "schema_version": 1,
        "tool": "envbuilder-probe",
        "probe_version": "0.1.0",
        "started_at": "2026-12-02T14:00:00Z",
        "duration_s": 1.0,
        "status": status,
        "options": {"level": "quick", "expect": "cpu", "repeat": 3},
        "labels": {"env": "cpu", "target": target},
        "fingerprint": fingerprint,
        "checks": [
            {
                "name": check,
                "status": status,
                "reason": reason,
                "duration_s": 1.0,
                "details": {},
                "metrics": metrics,
            }
        ],
    }


def metric(
    samples: list[float],
    *,
    name: str = "tflops",
    dtype: str | None = "fp32",
    size: str | None = "1024",
    higher: bool = True,
    value: Any = "median",
) -> dict[str, Any]:
    clean = sorted(s for s in samples if isinstance(s, float | int) and math.isfinite(s))
    med = clean[len(clean) // 2] if clean else None
    return {
        "name": name,
        "value": med if value == "median" else value,
        "unit": "TFLOP/s",
        "dtype": dtype,
        "size": size,
        "samples": samples,
        "higher_is_better": higher,
    }


def write(tmp_path: Path, name: str, data: dict[str, Any] | str) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def compare_two(
    tmp_path: Path, a: dict[str, Any], b: dict[str, Any], floor: float = 2.0
) -> records.Comparison:
    pa, pb = write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)
    return comparison.compare_reports(
        [reading.load_report(pa), reading.load_report(pb)], noise_floor_pct=floor
    )


def other_cell(comp: records.Comparison, row: int = 0) -> records.Cell:
    return comp.rows[row].cells[1]


# --------------------------------------------------------------------------- verdicts


def test_clear_difference_beyond_both_spreads_is_faster(tmp_path: Path) -> None:
    comp = compare_two(
        tmp_path,
        report([metric([10.0, 10.1, 10.2])]),
        report([metric([12.0, 12.1, 12.2])], target="native"),
    )
    c = other_cell(comp)
    assert c.verdict == "faster"
    assert c.ratio == pytest.approx(12.1 / 10.1)
    assert c.loss_pct == pytest.approx((1 - 12.1 / 10.1) * 100)
    assert c.spread == records.Spread(12.0, 12.1, 12.2, 3)


def test_difference_inside_the_larger_spread_is_noise(tmp_path: Path) -> None:
    # 5 % apart, but the other run itself spread over 8 % and overlaps the baseline.
    comp = compare_two(
        tmp_path, report([metric([10.0, 10.0, 10.1])]), report([metric([10.0, 10.5, 10.8])])
    )
    assert other_cell(comp).verdict == "within noise"
    assert other_cell(comp).direction == "faster"


def test_difference_below_the_floor_is_noise_even_with_tight_spreads(tmp_path: Path) -> None:
    comp = compare_two(
        tmp_path,
        report([metric([10.0, 10.0, 10.0])]),
        report([metric([10.1, 10.1, 10.1])]),
        floor=2.0,
    )
    assert other_cell(comp).verdict == "within noise"
    # the same numbers with a floor below the 1 % difference count
    comp = compare_two(
        tmp_path,
        report([metric([10.0, 10.0, 10.0])]),
        report([metric([10.1, 10.1, 10.1])]),
        floor=0.5,
    )
    assert other_cell(comp).verdict == "faster"


def test_overlapping_ranges_are_noise_even_when_medians_differ_a_lot(tmp_path: Path) -> None:
    # medians 30 % apart, but one slow outlier in the other run reaches into the baseline's range
    comp = compare_two(
        tmp_path, report([metric([10.0, 10.2, 10.4])]), report([metric([10.3, 13.0, 13.2])])
    )
    assert other_cell(comp).verdict == "within noise"
    assert other_cell(comp).direction == "faster"


def test_a_bandwidth_and_its_time_get_the_same_verdict(tmp_path: Path) -> None:
    # time = bytes / bandwidth: the verdict depends only on the samples' order, so judging the
    # bandwidth or the time of the same runs must agree (an absolute-difference rule would not).
    base_bw, other_bw = [0.0861, 0.1095, 0.1802], [0.19, 0.255, 0.31]
    for bw_a, bw_b in ((base_bw, other_bw), ([0.1, 0.11, 0.12], [0.125, 0.13, 0.2])):
        t: dict[str, Any] = dict(name="time", dtype="fp32", size="256K", higher=False)
        b: dict[str, Any] = dict(name="busbw", dtype="fp32", size="256K", higher=True)
        comp = compare_two(
            tmp_path,
            report([metric(bw_a, **b), metric([1 / x for x in bw_a], **t)]),
            report([metric(bw_b, **b), metric([1 / x for x in bw_b], **t)]),
        )
        verdicts = {row.cells[1].verdict for row in comp.rows}
        assert len(verdicts) == 1, verdicts
    assert verdicts == {"faster"}


def test_lower_is_better_reverses_the_verdict(tmp_path: Path) -> None:
    m: dict[str, Any] = dict(name="step_time", dtype="fp32", size=None, higher=False)
    comp = compare_two(
        tmp_path,
        report([metric([40.0, 41.0, 42.0], **m)]),
        report([metric([50.0, 51.0, 52.0], **m)]),
    )
    c = other_cell(comp)
    assert c.verdict == "slower"
    assert c.ratio == pytest.approx(51 / 41)
    assert c.relative == pytest.approx(41 / 51)
    assert c.loss_pct == pytest.approx((1 - 41 / 51) * 100)
    # error bars: worst case is other's max over baseline's min, inverted
    assert c.relative_low == pytest.approx(40 / 52)
    assert c.relative_high == pytest.approx(42 / 50)


def test_single_sample_says_noise_unknown_with_direction(tmp_path: Path) -> None:
    comp = compare_two(tmp_path, report([metric([10.0])]), report([metric([8.0, 8.1, 8.2])]))
    c = other_cell(comp)
    assert c.verdict == "noise unknown"
    assert tables.cell_verdict(c) == "noise unknown (looks slower)"


# --------------------------------------------------------------------------- edge cases


def test_missing_metrics_are_noted_both_ways(tmp_path: Path) -> None:
    a = report([metric([1.0, 1.0, 1.0], size="512"), metric([2.0, 2.0, 2.0], size="1024")])
    b = report([metric([1.0, 1.0, 1.0], size="512"), metric([3.0, 3.0, 3.0], size="2048")])
    comp = compare_two(tmp_path, a, b)
    by_size = {row.size: row for row in comp.rows}
    assert by_size["1024"].cells[1].note == "missing in cpu/docker (b.json)"
    assert by_size["2048"].cells[0].note == "not in the baseline"
    assert by_size["2048"].cells[1].note == "not in the baseline; no ratio"
    assert any("1 metric(s) of the baseline are missing" in n for n in comp.notes)


def test_no_shared_metric_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="no metric of the baseline"):
        compare_two(tmp_path, report([metric([1.0], size="1")]), report([metric([1.0], size="2")]))


def test_zero_baseline_gives_a_note_not_a_division(tmp_path: Path) -> None:
    comp = compare_two(tmp_path, report([metric([0.0, 0.0, 0.0])]), report([metric([1.0, 1.0])]))
    c = other_cell(comp)
    assert c.ratio is None and c.verdict == "no comparison"
    assert c.note == "baseline value is 0; no ratio"


def test_zero_where_lower_is_better(tmp_path: Path) -> None:
    m: dict[str, Any] = dict(name="step_time", higher=False)
    comp = compare_two(
        tmp_path, report([metric([5.0, 5.0], **m)]), report([metric([0.0, 0.0], **m)])
    )
    assert other_cell(comp).note == "value is 0 where lower is better; no ratio"


def test_nan_value_and_nan_samples(tmp_path: Path) -> None:
    # JSON from Python may carry NaN literals; both files are read and explained.
    a = report([metric([1.0, float("nan"), 1.2])])
    b = report([metric([float("nan")], value=float("nan"))])
    comp = compare_two(tmp_path, a, b)
    assert comp.rows[0].cells[0].note == "1 of 3 samples are NaN/inf, ignored"
    c = other_cell(comp)
    assert c.value is None and c.verdict == "no comparison"
    assert "not a finite number" in (c.note or "")
    text = documents.dumps_json(comp)  # allow_nan=False: would raise on a NaN

    def refuse(const: str) -> None:
        raise AssertionError(f"{const} in the JSON output")

    json.loads(text, parse_constant=refuse)


def test_null_value_is_reported(tmp_path: Path) -> None:
    comp = compare_two(tmp_path, report([metric([1.0, 1.1])]), report([metric([], value=None)]))
    assert other_cell(comp).note == "value is missing"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a probe report"),
        (json.dumps({"schema_version": 2, "checks": []}), "schema_version 2 is not supported"),
        (json.dumps({"checks": []}), r"not a probe report \(no schema_version\)"),
        (json.dumps({"schema_version": 1, "tool": "other"}), "written by 'other'"),
        (json.dumps({"schema_version": 1}), "'checks' is missing"),
        (
            json.dumps({"schema_version": 1, "checks": [{"name": "m", "metrics": [{"value": 1}]}]}),
            "a metric has no name",
        ),
        (
            json.dumps(
                {
                    "schema_version": 1,
                    "checks": [
                        {"name": "m", "metrics": [{"name": "x", "value": 1, "samples": "1"}]}
                    ],
                }
            ),
            "'samples' must be a list",
        ),
    ],
)
def test_bad_reports_raise_compare_error(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path, "bad.json", content)
    with pytest.raises(CompareError, match=message) as exc:
        reading.load_report(path)
    assert str(path) in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="no such report"):
        reading.load_report(tmp_path / "nope.json")


def test_failed_check_is_noted_with_explain_pointer(tmp_path: Path) -> None:
    a = report([metric([1.0, 1.0])])
    b = report(
        [metric([1.0, 1.0])], status="fail", reason="RuntimeError: No HIP GPUs are available"
    )
    comp = compare_two(tmp_path, a, b)
    note = next(n for n in comp.notes if "failed" in n)
    assert "No HIP GPUs are available" in note and "envbuilder explain" in note
    assert "check matmul failed here" in (other_cell(comp).note or "")


def test_duplicate_metric_is_noted(tmp_path: Path) -> None:
    a = report([metric([1.0, 1.0]), metric([5.0, 5.0])])
    comp = compare_two(tmp_path, a, report([metric([1.0, 1.0])]))
    assert len(comp.rows) == 1 and comp.rows[0].cells[0].value == 1.0
    assert any("appears twice" in n for n in comp.notes)


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_differences_unfair_first(tmp_path: Path) -> None:
    dev = [{"index": 0, "name": "AMD Radeon RX 7900 XTX", "gfx": "gfx1100", "memory_bytes": 1}]
    a = report([metric([1.0, 1.0])], kernel="6.1")
    b = report(
        [metric([1.0, 1.0])],
        kernel="5.15-microsoft",
        torch="2.12.0",
        devices=dev,
        lock_sha256="b" * 64,
        wsl=True,
    )
    comp = compare_two(tmp_path, a, b)
    fields = [d.field for d in comp.fingerprint_diffs]
    assert fields == ["torch", "gpu", "gfx", "lock_sha256", "wsl", "kernel"]
    lines = tables.fingerprint_lines(comp)
    assert lines[0].startswith("UNFAIR: torch differs")
    assert "bbbbbbbbbbbb," not in lines[3] and lines[3].endswith("bbbbbbbbbbbb")
    assert lines[-1].startswith("note: kernel differs")


def test_other_pylock_same_packages_is_only_a_note(tmp_path: Path) -> None:
    """docker vs native of one env: two pylock files, the same pins installed."""
    a = report([metric([1.0, 1.0])], lock_sha256="a" * 64, packages_sha256="c" * 64)
    b = report(
        [metric([1.0, 1.0])], target="native", lock_sha256="b" * 64, packages_sha256="c" * 64
    )
    comp = compare_two(tmp_path, a, b)
    assert [(d.field, d.unfair) for d in comp.fingerprint_diffs] == [("lock_sha256", False)]
    (line,) = tables.fingerprint_lines(comp)
    assert line.startswith(
        "note: lock_sha256 differs (different pylock files, same installed packages)"
    )


def test_other_installed_packages_are_unfair(tmp_path: Path) -> None:
    a = report([metric([1.0, 1.0])], lock_sha256="a" * 64, packages_sha256="c" * 64)
    b = report([metric([1.0, 1.0])], lock_sha256="b" * 64, packages_sha256="d" * 64)
    comp = compare_two(tmp_path, a, b)
    assert [(d.field, d.unfair) for d in comp.fingerprint_diffs] == [
        ("packages_sha256", True),
        ("lock_sha256", False),
    ]
    lines = tables.fingerprint_lines(comp)
    assert lines[0].startswith("UNFAIR: packages_sha256 differs (different installed packages")
    # Same lock file, different installs (a venv changed by hand): still unfair.
    b2 = report([metric([1.0, 1.0])], lock_sha256="a" * 64, packages_sha256="d" * 64)
    comp = compare_two(tmp_path, a, b2)
    assert [(d.field, d.unfair) for d in comp.fingerprint_diffs] == [("packages_sha256", True)]


def test_report_without_packages_keeps_lock_rule(tmp_path: Path) -> None:
    """A report from before packages_sha256: a lock difference stays unfair, and the missing
    field itself is not reported as a package difference."""
    a = report([metric([1.0, 1.0])], lock_sha256="a" * 64, packages_sha256="c" * 64)
    b = report([metric([1.0, 1.0])], lock_sha256="b" * 64)
    comp = compare_two(tmp_path, a, b)
    assert [(d.field, d.unfair) for d in comp.fingerprint_diffs] == [("lock_sha256", True)]


def test_identical_fingerprints_flag_nothing(tmp_path: Path) -> None:
    comp = compare_two(tmp_path, report([metric([1.0, 1.0])]), report([metric([1.0, 1.0])]))
    assert comp.fingerprint_diffs == ()


# --------------------------------------------------------------------------- outputs + CLI


def test_baseline_option_reorders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docker, native = DATA / "cpu.docker.json", DATA / "cpu.native.json"
    out = tmp_path / "c.json"
    assert (
        main(["compare", str(docker), str(native), "--baseline", str(native), "--json", str(out)])
        == 0
    )
    data = json.loads(out.read_text())
    assert data["baseline"] == "cpu/native"
    assert [r["label"] for r in data["reports"]] == ["cpu/native", "cpu/docker"]
    # docker is slower than native at matmul 512: loss is positive from native's view
    m512 = next(m for m in data["metrics"] if m["size"] == "512")
    assert m512["results"][1]["verdict"] == "slower"
    assert m512["results"][1]["loss_pct"] > 15
    assert "cpu/native" in capsys.readouterr().out


def test_cli_outputs_markdown_json_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md, js, html = tmp_path / "c.md", tmp_path / "c.json", tmp_path / "html"
    rc = main(
        [
            "compare",
            str(DATA / "cpu.docker.json"),
            str(DATA / "cpu.native.json"),
            "--markdown",
            str(md),
            "--json",
            str(js),
            "--html",
            str(html),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "faster" in out and "within noise" in out and "noise rule" in out
    text = md.read_text()
    assert "| matmul: tflops fp32 512 | cpu/docker |" in text
    assert "Noise rule:" in text
    data = json.loads(js.read_text())
    assert data["tool"] == "envbuilder-compare" and len(data["metrics"]) == 5
    page = (html / "index.html").read_text()
    charts = sorted(p.name for p in html.glob("*.png"))
    assert charts == ["chart-amp.png", "chart-matmul.png", "chart-membw.png"]
    for name in charts:
        assert f'src="{name}"' in page  # relative paths: the folder can move
        assert (html / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http" not in page  # nothing fetched from the network


def test_charts_are_deterministic(tmp_path: Path) -> None:
    reports = [
        reading.load_report(DATA / "cpu.docker.json"),
        reading.load_report(DATA / "cpu.native.json"),
    ]
    comp = comparison.compare_reports(reports)
    compare_html.write_html(comp, tmp_path / "a")
    compare_html.write_html(comp, tmp_path / "b")
    for name in ("index.html", "chart-matmul.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_html_escapes_labels(tmp_path: Path) -> None:
    a = report([metric([1.0, 1.0])])
    b = copy.deepcopy(a)
    b["labels"] = {"env": "<script>alert(1)</script>", "target": "x"}
    comp = compare_two(tmp_path, a, b)
    page = compare_html.write_html(comp, tmp_path / "h").read_text()
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page


def test_cli_errors_are_messages_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "v2.json", json.dumps({"schema_version": 2, "checks": []}))
    assert main(["compare", str(DATA / "cpu.docker.json"), str(bad)]) == 1
    err = capsys.readouterr().err
    assert "schema_version 2 is not supported" in err and "Traceback" not in err
    assert main(["compare", str(DATA / "cpu.docker.json")]) == 2
    assert "at least two reports" in capsys.readouterr().err


def test_nothing_written_when_reports_are_bad(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.json", "{")
    md = tmp_path / "out.md"
    assert main(["compare", str(DATA / "cpu.docker.json"), str(bad), "--markdown", str(md)]) == 1
    assert not md.exists()


def test_fixtures_follow_the_probe_schema() -> None:
    import jsonschema

    schema_path = (
        Path(comparison.__file__).parent.parent / "data" / "schemas" / "probe-report.schema.json"
    )
    schema = json.loads(schema_path.read_text())
    for path in sorted(DATA.glob("*.json")):
        jsonschema.validate(json.loads(path.read_text()), schema)
    jsonschema.validate(report([metric([1.0, 2.0, 3.0])]), schema)


def test_baseline_without_metrics_says_why(tmp_path: Path) -> None:
    # As `validate --only device --only conformance` writes it: checks ran, nothing timed.
    empty = report([])
    empty["options"]["only"] = ["device", "conformance"]
    with pytest.raises(CompareError, match="holds no metric \\(it ran only device, conformance\\)"):
        compare_two(tmp_path, empty, report([metric([1.0, 1.0])]))


def test_repeat_and_level_differences_are_flagged(tmp_path: Path) -> None:
    a, b = report([metric([1.0, 1.0])]), report([metric([1.0, 1.0])])
    b["options"].update(level="standard", repeat=5)
    comp = compare_two(tmp_path, a, b)
    assert [(d.field, d.unfair) for d in comp.fingerprint_diffs] == [
        ("level", True),
        ("repeat", False),
    ]
    assert (
        tables.cell_verdict(
            compare_two(tmp_path, report([metric([2.0])]), report([metric([2.0])])).rows[0].cells[1]
        )
        == "noise unknown (no difference)"
    )


def test_baseline_outside_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    assert (
        main(
            [
                "compare",
                str(DATA / "cpu.docker.json"),
                "--baseline",
                str(DATA / "cpu.native.json"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["baseline"] == "cpu/native"

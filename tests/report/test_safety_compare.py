"""compare on odd reports (issue 13, fault 8): wrong types, markup and TeX in labels, float range,
deep JSON, FIFOs and devices, many metrics, outputs that would overwrite an input.

Every bad report: one message naming the file and the key, exit 1, no traceback, nothing written.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuilder.commands import compare as compare_command
from envbuilder.commands._cli import main
from envbuilder.core.errors import CompareError
from envbuilder.report import comparison, documents, reading
from envbuilder.report import html as compare_html

DATA = Path(__file__).parents[1] / "data" / "compare"


def report(
    metrics: list[dict[str, Any]],
    *,
    env: Any = "cpu",
    target: Any = "docker",
    check: str = "matmul",
) -> dict[str, Any]:
    """A schema_version 1 probe report with `metrics` under one check."""
    return {
        "schema_version": 1,
        "tool": "envbuilder-probe",
        "probe_version": "0.1.0",
        "started_at": "2026-12-02T14:00:00Z",
        "duration_s": 1.0,
        "status": "pass",
        "options": {"level": "quick", "expect": "cpu", "repeat": 3},
        "labels": {"env": env, "target": target},
        "fingerprint": {
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
        },
        "checks": [
            {
                "name": check,
                "status": "pass",
                "reason": None,
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
    size: str | None = "1024",
    higher: bool = True,
    value: float | None = None,
) -> dict[str, Any]:
    """A metric whose value is the middle sample (or `value`)."""
    middle = sorted(samples)[len(samples) // 2]
    return {
        "name": name,
        "value": middle if value is None else value,
        "unit": "TFLOP/s",
        "dtype": "fp32",
        "size": size,
        "samples": samples,
        "higher_is_better": higher,
    }


def write(path: Path, data: dict[str, Any] | str) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def outputs(tmp_path: Path) -> list[str]:
    return [
        "--json",
        str(tmp_path / "out.json"),
        "--markdown",
        str(tmp_path / "out.md"),
        "--html",
        str(tmp_path / "html"),
    ]


def assert_refused(
    tmp_path: Path, bad: Path, capsys: pytest.CaptureFixture[str], *expected: str
) -> str:
    """compare GOOD BAD with every output: exit 1, one error line naming the file and the
    expected words, and no output written."""
    good = write(tmp_path / "good.json", report([metric([1.0, 1.1, 1.2])]))
    assert main(["compare", str(good), str(bad), *outputs(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:"), err
    for word in expected:
        assert word in err, (word, err)
    assert "Traceback" not in err
    assert not any((tmp_path / name).exists() for name in ("out.json", "out.md", "html"))
    return err


# --------------------------------------------------------------------------- wrong types


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `data` with the dotted `path` set (numbers index lists)."""
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


M0 = "checks.0.metrics.0"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("labels", ["cpu", "docker"], "'labels' must be an object, not a list"),
        ("labels.env", ["cpu"], "'labels.env' must be a string, not a list"),
        ("labels.target", 5, "'labels.target' must be a string, not a number"),
        ("labels.env", {"a": 1}, "'labels.env' must be a string, not an object"),
        ("labels.env", "cpu\x1b[2J", "'labels.env' contains the control character '\\x1b'"),
        ("labels.env", "x" * 201, "'labels.env' is 201 characters long; at most 200"),
        ("fingerprint", "3.11", "'fingerprint' must be an object, not a string"),
        ("options", [1], "'options' must be an object, not a list"),
        ("status", 1, "'status' must be a string"),
        ("schema_version", True, "schema_version True is not supported"),
        ("checks.0.reason", 5, "check 'matmul': 'reason' must be a string or null, not a number"),
        ("checks.0.status", ["fail"], "check 'matmul': 'status' must be a string, not a list"),
        ("checks.0.metrics", {"a": 1}, "check 'matmul': 'metrics' must be a list, not an object"),
        ("checks.0.metrics", 7, "check 'matmul': 'metrics' must be a list, not a number"),
        (
            f"{M0}.higher_is_better",
            "false",
            "metric 'tflops': 'higher_is_better' must be true or false, not a string ('false')",
        ),
        (f"{M0}.value", "12.5", "metric 'tflops': 'value' must be a number, not a string"),
        (f"{M0}.samples", [1.0, "fast", 1.2], "'samples[1]' must be a number, not a string"),
        (f"{M0}.samples", 3, "'samples' must be a list of numbers, not a number"),
        (f"{M0}.dtype", 16, "metric 'tflops': 'dtype' must be a string, not a number"),
        (f"{M0}.size", [1024], "metric 'tflops': 'size' must be a string, not a list"),
        (
            f"{M0}.unit",
            {"si": "TFLOP/s"},
            "metric 'tflops': 'unit' must be a string, not an object",
        ),
        (f"{M0}.name", ["tflops"], "'name' must be a string, not a list"),
    ],
)
def test_wrong_types_name_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, expected: str
) -> None:
    bad = write(tmp_path / "bad.json", _set(report([metric([1.0, 1.1, 1.2])]), path, value))
    assert_refused(tmp_path, bad, capsys, expected)


def test_integer_beyond_float_range_is_a_value_problem_not_a_crash(tmp_path: Path) -> None:
    # float(10**400) raises OverflowError; such a value is as unusable as 1e999, and noted.
    text = json.dumps(report([metric([1.0, 1.1, 1.2])])).replace(
        '"value": 1.1', '"value": 1' + "0" * 400
    )
    loaded = reading.load_report(write(tmp_path / "big.json", text))
    (m,) = loaded.metrics.values()
    assert m.value is None and m.problem is not None and "not a finite number" in m.problem


def test_integer_too_long_for_python_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python refuses to parse integers of more than 4300 digits (a ValueError, not a
    # JSONDecodeError): one message, no traceback.
    text = json.dumps(report([metric([1.0, 1.1, 1.2])])).replace(
        '"value": 1.1', '"value": ' + "9" * 5000
    )
    assert_refused(
        tmp_path,
        write(tmp_path / "long.json", text),
        capsys,
        "cannot be read as JSON",
        "4300 digits",
    )


def test_not_utf8_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(
        json.dumps(report([metric([1.0])], env="caf\u00e9"), ensure_ascii=False).encode("latin-1")
    )
    assert_refused(tmp_path, bad, capsys, "not UTF-8 text (byte")


# --------------------------------------------------------------------------- markup and TeX


MARKUP = ("[/]", "[bold red]x")


def test_rich_markup_in_labels_prints_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one table line per row: the labels stay whole
    a = write(
        tmp_path / "a.json",
        report([metric([1.0, 1.1, 1.2], name="[i]tflops[/i]")], env=MARKUP[0], target="base"),
    )
    b = write(
        tmp_path / "b.json",
        report(
            [metric([2.0, 2.1, 2.2], name="[i]tflops[/i]")], env=MARKUP[1], target="[/bold red]"
        ),
    )
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "compared with [/]/base" in out  # the table's title
    assert "[bold red]x/[/bold red]" in out and "[i]tflops[/i]" in out


def test_rich_markup_in_labels_plain_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The plain-text table (used past RICH_TABLE_MAX_LINES lines) prints markup literally too.
    monkeypatch.setattr(compare_command, "RICH_TABLE_MAX_LINES", 0)
    a = write(tmp_path / "a.json", report([metric([1.0, 1.1, 1.2])], env=MARKUP[0]))
    b = write(tmp_path / "b.json", report([metric([2.0, 2.1, 2.2])], env=MARKUP[1]))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "[/]/docker" in out and "[bold red]x/docker" in out and "faster" in out


TEX = ("$\\frac{$", "$x^$")  # mathtext raises on both


def test_tex_in_labels_under_html_is_literal(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.json",
        report([metric([1.0, 1.1, 1.2], name="$\\alpha$")], env=TEX[0], target="t"),
    )
    b = write(
        tmp_path / "b.json",
        report([metric([2.0, 2.1, 2.2], name="$\\alpha$")], env=TEX[1], target="t", check="matmul"),
    )
    html = tmp_path / "html"
    assert main(["compare", str(a), str(b), "--html", str(html)]) == 0
    page = (html / "index.html").read_text()
    assert "$\\frac{$/t" in page and "$x^$/t" in page
    assert (html / "chart-matmul.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tex_labels_do_not_reach_latex_or_mathtext(tmp_path: Path) -> None:
    # A user's matplotlibrc may turn on usetex: the chart must not call LaTeX for a label.
    import matplotlib

    a = write(tmp_path / "a.json", report([metric([1.0, 1.1, 1.2])], env=TEX[0]))
    b = write(tmp_path / "b.json", report([metric([2.0, 2.1, 2.2])], env=TEX[1]))
    comp = comparison.compare_reports([reading.load_report(a), reading.load_report(b)])
    with matplotlib.rc_context({"text.usetex": True}):
        page = compare_html.write_html(comp, tmp_path / "html")
    assert (page.parent / "chart-matmul.png").stat().st_size > 1000


# --------------------------------------------------------------------------- float range


def _json_without_nan(path: Path) -> dict[str, Any]:
    def refuse(const: str) -> None:
        raise AssertionError(f"{const} in {path}")

    data: dict[str, Any] = json.loads(path.read_text(), parse_constant=refuse)
    return data


@pytest.mark.parametrize(("base", "other"), [(1e-308, 1e308), (1e308, 1e-308)])
@pytest.mark.parametrize("higher", [True, False])
def test_extreme_values_give_no_ratio_not_inf(
    tmp_path: Path, base: float, other: float, higher: bool
) -> None:
    """1e308 / 1e-308 overflows to inf and 1e-308 / 1e308 underflows to 0: neither is a ratio.
    Decision: no ratio, verdict 'no comparison', a note saying why; every output still written
    and the JSON has no NaN/Infinity."""
    a = write(tmp_path / "a.json", report([metric([base, base, base], higher=higher)]))
    b = write(
        tmp_path / "b.json", report([metric([other, other, other], higher=higher)], target="native")
    )
    assert main(["compare", str(a), str(b), *outputs(tmp_path)]) == 0
    data = _json_without_nan(tmp_path / "out.json")
    cell = data["metrics"][0]["results"][1]
    assert cell["ratio"] is None and cell["relative"] is None and cell["loss_pct"] is None
    assert cell["verdict"] == "no comparison"
    assert "beyond floating-point range" in cell["note"]
    assert (tmp_path / "html" / "index.html").exists()


def test_median_of_huge_even_samples_does_not_overflow(tmp_path: Path) -> None:
    # statistics.median adds the middle two: (1e308 + 1e308) / 2 is inf.
    # The noise floor (2 % of 1.25e308) must not overflow either: 1.25e308 * 2 is inf.
    a = write(tmp_path / "a.json", report([metric([1e308, 1.5e308], value=1.25e308)]))
    b = write(
        tmp_path / "b.json", report([metric([1.6e308, 1.7e308], value=1.65e308)], target="native")
    )
    assert main(["compare", str(a), str(b), "--json", str(tmp_path / "c.json")]) == 0
    results = _json_without_nan(tmp_path / "c.json")["metrics"][0]["results"]
    assert results[0]["median"] == pytest.approx(1.25e308)
    assert results[1]["median"] == pytest.approx(1.65e308)
    assert results[1]["ratio"] == pytest.approx(1.65 / 1.25)
    assert results[1]["noise"] == pytest.approx(2.5e306)
    assert results[1]["verdict"] == "faster"


def test_whiskers_beyond_range_are_dropped_not_inf(tmp_path: Path) -> None:
    # The medians compare fine, but max / min of the samples overflows: no error bars.
    comp = comparison.compare_reports(
        [
            reading.parse_report(report([metric([1e-300, 1.0, 2.0])]), tmp_path / "a.json"),
            reading.parse_report(report([metric([1.0, 1.0, 1e300])]), tmp_path / "b.json"),
        ]
    )
    cell = comp.rows[0].cells[1]
    assert cell.ratio == 1.0 and cell.relative_low is None and cell.relative_high is None
    assert cell.relative is not None and math.isfinite(cell.relative)
    assert cell.loss_pct is not None and math.isfinite(cell.loss_pct)


# --------------------------------------------------------------------------- size and depth


def test_deeply_nested_json_is_refused_without_recursion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(report([metric([1.0])])).replace(
        '"details": {}', '"details": ' + "[" * 200_000 + "]" * 200_000
    )
    err = assert_refused(
        tmp_path,
        write(tmp_path / "deep.json", text),
        capsys,
        "JSON nested 200003 levels deep",
        f"at most {reading.MAX_JSON_DEPTH}",
    )
    assert "Recursion" not in err


def test_nesting_up_to_the_bound_is_read(tmp_path: Path) -> None:
    # details nested to the bound (report > checks > check > details = 3 more levels)
    inner = reading.MAX_JSON_DEPTH - 3
    text = json.dumps(report([metric([1.0])])).replace(
        '"details": {}', '"details": ' + "[" * inner + "]" * inner
    )
    assert reading.json_nesting_depth(text) == reading.MAX_JSON_DEPTH
    assert reading.load_report(write(tmp_path / "ok.json", text)).metrics


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[{{{"}', 1),  # brackets in strings do not count
        ('{"a": "\\"[[[", "b": "\\\\"}', 1),  # nor after an escaped quote, nor an escaped backslash
        ("[" * 70 + "]" * 70, 70),
    ],
)
def test_json_nesting_depth(text: str, depth: int) -> None:
    assert reading.json_nesting_depth(text) == depth


def test_oversized_file_is_refused_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # sparse: no 64 MiB written to disk
        fh.truncate(reading.MAX_REPORT_BYTES + 1)
    assert_refused(
        tmp_path, big, capsys, f"{reading.MAX_REPORT_BYTES + 1:,} bytes", "at most 64 MiB"
    )


# --------------------------------------------------------------------------- FIFOs and devices


def _compare_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "compare", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("as_baseline", [False, True])
def test_fifo_is_refused_at_once(tmp_path: Path, as_baseline: bool) -> None:
    """A FIFO with no writer: opening it to read would wait forever (the issue: it hung)."""
    good = write(tmp_path / "good.json", report([metric([1.0, 1.1])]))
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    args = [str(good), "--baseline", str(fifo)] if as_baseline else [str(good), str(fifo)]
    proc = _compare_process(*args, "--json", str(tmp_path / "out.json"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"{fifo}: is a named pipe (FIFO), not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out.json").exists()


def test_character_device_is_refused(tmp_path: Path) -> None:
    good = write(tmp_path / "good.json", report([metric([1.0, 1.1])]))
    proc = _compare_process(str(good), "/dev/null", cwd=tmp_path)
    assert proc.returncode == 1
    assert "/dev/null: is a character device, not a regular file" in proc.stderr


def test_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reports").mkdir()
    assert_refused(tmp_path, tmp_path / "reports", capsys, "is a folder")


# --------------------------------------------------------------------------- many metrics


def test_many_metrics_keep_order_and_use_the_plain_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows: the baseline's metrics in its order, then the others' new ones in theirs (the
    order the quadratic list merge gave; a dict keeps it in linear time). Past
    RICH_TABLE_MAX_LINES table lines the terminal table is plain text."""
    n = compare_command.RICH_TABLE_MAX_LINES  # 2 reports x (n + n/2) rows > the limit
    a = report([metric([1.0, 1.1], name=f"m{i}") for i in range(n)])
    b = report([metric([1.0, 1.1], name=f"m{i}") for i in range(n // 2, n + n // 2)])
    pa, pb = write(tmp_path / "a.json", a), write(tmp_path / "b.json", b)
    assert main(["compare", str(pa), str(pb), "--json", str(tmp_path / "c.json")]) == 0
    captured = capsys.readouterr()
    assert "table lines: printed as plain text" in captured.err
    assert "matmul: m0 fp32 1024" in captured.out
    data = json.loads((tmp_path / "c.json").read_text())
    assert [m["name"] for m in data["metrics"]] == [f"m{i}" for i in range(n + n // 2)]
    comp = comparison.compare_reports([reading.load_report(pa), reading.load_report(pb)])
    assert data == json.loads(json.dumps(documents.to_json(comp)))


def test_chart_draws_the_metrics_that_differ_most(tmp_path: Path) -> None:
    n = compare_html.CHART_MAX_ROWS + 10
    a = report([metric([1.0, 1.0], name=f"m{i}") for i in range(n)])
    # m3 and m7 differ most; every other metric differs a little, by i
    b = report(
        [metric([{3: 9.0, 7: 0.1}.get(i, 1 + i / 1000)] * 2, name=f"m{i}") for i in range(n)]
    )
    comp = comparison.compare_reports(
        [
            reading.parse_report(a, tmp_path / "a.json"),
            reading.parse_report(b, tmp_path / "b.json"),
        ]
    )
    rows, total = compare_html.chart_groups(comp)["matmul"]
    assert total == n and len(rows) == compare_html.CHART_MAX_ROWS
    names = [r.name for r in rows]
    assert "m3" in names and "m7" in names and "m1" not in names
    assert names == sorted(names, key=lambda s: int(s[1:]))  # table order
    page = compare_html.write_html(comp, tmp_path / "html").read_text()
    assert f"the {compare_html.CHART_MAX_ROWS} of {n} metrics that differ most" in page


# --------------------------------------------------------------------------- outputs over inputs


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    a = write(tmp_path / "a.json", report([metric([1.0, 1.1])]))
    b = write(tmp_path / "b.json", report([metric([2.0, 2.1])], target="native"))
    return a, b


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> None:
    assert main(["compare", *args]) == 2
    err = capsys.readouterr().err
    assert all(word in err for word in expected), err


@pytest.mark.parametrize("option", ["--json", "--markdown"])
def test_output_naming_an_input_is_refused(
    tmp_path: Path, inputs: tuple[Path, Path], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = inputs
    before = a.read_bytes()
    _refused(
        [str(a), str(b), option, str(a)],
        capsys,
        f"{option} {a} is the input report",
        "would overwrite",
    )
    # the same file by another name: a symlink, a hard link, a path through '..'
    (tmp_path / "link.json").symlink_to(a)
    _refused([str(a), str(b), option, str(tmp_path / "link.json")], capsys, "input report")
    (tmp_path / "hard.json").hardlink_to(a)
    _refused([str(a), str(b), option, str(tmp_path / "hard.json")], capsys, "input report")
    (tmp_path / "sub").mkdir()
    _refused(
        [str(b), "--baseline", str(a), option, str(tmp_path / "sub" / ".." / "a.json")],
        capsys,
        "input report",
    )
    assert a.read_bytes() == before


def test_json_and_markdown_on_one_file_are_refused(
    tmp_path: Path, inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    _refused(
        [str(inputs[0]), str(inputs[1]), "--json", str(out), "--markdown", str(out)],
        capsys,
        "--json and --markdown both name",
    )
    assert not out.exists()


@pytest.mark.parametrize("name", ["index.html", "chart-matmul.png"])
def test_html_folder_over_an_input_is_refused(
    tmp_path: Path, inputs: tuple[Path, Path], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    victim = folder / name
    victim.write_bytes(inputs[0].read_bytes())
    _refused(
        [str(victim), str(inputs[1]), "--html", str(folder)],
        capsys,
        f"--html {folder} would overwrite the input report {victim}",
    )
    assert victim.read_bytes() == inputs[0].read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == [name]


def test_html_naming_an_input_file_is_refused(
    inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _refused(
        [str(inputs[0]), str(inputs[1]), "--html", str(inputs[0])],
        capsys,
        "is the input report",
        "takes a folder",
    )


def test_html_folder_holding_an_input_of_another_name_is_fine(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    # reports/ as the --html folder: the reports are not files the page writes.
    assert main(["compare", str(inputs[0]), str(inputs[1]), "--html", str(tmp_path)]) == 0
    assert (tmp_path / "index.html").exists() and json.loads(inputs[0].read_text())


def test_bad_report_message_through_a_real_process(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.json", _set(report([metric([1.0])]), "labels.env", 7))
    good = write(tmp_path / "good.json", report([metric([1.0])]))
    proc = _compare_process(str(good), str(bad), *outputs(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"error: {bad}: 'labels.env' must be a string, not a number (7)")
    assert proc.stdout == "" and not (tmp_path / "out.json").exists()


def test_shipped_fixtures_still_load() -> None:
    # The stricter reader accepts what the probe writes.
    for path in sorted(DATA.glob("*.json")):
        assert reading.load_report(path).metrics


def test_compare_error_is_the_library_error(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match=r"'labels\.env' must be a string"):
        reading.parse_report(_set(report([metric([1.0])]), "labels.env", 1), tmp_path / "x.json")

"""`envbuilder compare`: reports -> table, markdown, JSON, HTML with charts."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table
from rich.text import Text

from envbuilder.commands._options import path_value
from envbuilder.core.errors import UsageError
from envbuilder.core.fsutil import same_file, temp_dir, write_together
from envbuilder.core.ui import UI
from envbuilder.report import comparison, documents, guide, reading, tables
from envbuilder.report import html as compare_html
from envbuilder.report.records import Comparison

HELP = "compare validation reports: ratios, loss %, spread over repeats, noise verdicts"
DESCRIPTION = f"""\
Compare two or more probe reports (from `envbuilder validate`, e.g. reports/cpu.docker.json and
reports/cpu.native.json). Metrics are matched by check, name, dtype and size. For each: the
median, min/median/max over repeats, ratio to the baseline, loss in percent and a verdict.

{comparison.noise_rule_text(comparison.DEFAULT_NOISE_FLOOR_PCT)}

Fingerprint differences that make the comparison unfair (torch, HIP/CUDA, GPU, gfx, driver,
lock, Python) are listed before the numbers. Exit 0 when the reports could be compared."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reports",
        nargs="+",
        type=path_value,
        metavar="REPORT",
        help="probe report JSON files (at least two, counting --baseline)",
    )
    parser.add_argument(
        "--baseline",
        type=path_value,
        metavar="REPORT",
        help="the report others are compared with (default: the first)",
    )
    parser.add_argument(
        "--markdown", type=path_value, metavar="PATH", help="also write markdown here"
    )
    parser.add_argument(
        "--json",
        type=path_value,
        metavar="PATH",
        help="also write JSON here; - prints it on stdout instead of the table",
    )
    parser.add_argument(
        "--html",
        type=path_value,
        metavar="DIR",
        help="also write DIR/index.html with PNG charts (opens offline; needs "
        "matplotlib: pip install 'dl-envbuilder[html]')",
    )
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=comparison.DEFAULT_NOISE_FLOOR_PCT,
        metavar="PCT",
        help="smallest difference in %% that can count "
        f"(default {comparison.DEFAULT_NOISE_FLOOR_PCT:g})",
    )


def _paths(args: argparse.Namespace) -> tuple[list[Path], int]:
    paths: list[Path] = list(args.reports)
    if args.baseline is None:
        return paths, 0
    resolved = [p.resolve() for p in paths]
    if args.baseline.resolve() in resolved:
        return paths, resolved.index(args.baseline.resolve())
    return [args.baseline, *paths], 0


def _refuse_overwriting_inputs(args: argparse.Namespace, inputs: list[Path]) -> None:
    """An output that is one of the input reports would replace it: refuse before reading."""
    for option, out in (("--json", _json_file(args)), ("--markdown", args.markdown)):
        if out is None:
            continue
        for report in inputs:
            if same_file(out, report):
                raise UsageError(
                    f"{option} {out} is the input report {report}; writing it "
                    "would overwrite that report: name another file"
                )
    json_file = _json_file(args)
    if json_file is not None and args.markdown is not None and same_file(json_file, args.markdown):
        raise UsageError(f"--json and --markdown both name {args.json}; name two files")
    if args.html is None:
        return
    for report in inputs:
        if same_file(args.html, report):
            raise UsageError(
                f"--html {args.html} is the input report {report}; --html takes a "
                "folder to write index.html and charts into"
            )
        if compare_html.is_html_output(report.name) and same_file(
            args.html, report.resolve().parent
        ):
            raise UsageError(
                f"--html {args.html} would overwrite the input report {report} "
                "(it writes index.html and chart-*.png there): name another folder"
            )


def run(args: argparse.Namespace, ui: UI) -> int:
    paths, baseline = _paths(args)
    if len(paths) < 2:
        raise UsageError("compare needs at least two reports (or one report and --baseline)")
    _refuse_overwriting_inputs(args, paths)
    if args.html:  # a missing matplotlib fails here, before any output is written
        compare_html.require_matplotlib()
    reports = [reading.load_report(p) for p in paths]
    comp = comparison.compare_reports(reports, baseline, args.noise_floor)
    if not ui.json_mode:
        _print(comp, ui)
    _write_outputs(comp, args, ui)
    if ui.json_mode:  # --json -: after the files, so a write error gives the error object
        ui.json_text(documents.dumps_json(comp))
    return 0


def _json_file(args: argparse.Namespace) -> Path | None:
    """The file --json names; None without --json and for --json - (stdout)."""
    path: Path | None = args.json
    return None if path is None or str(path) == "-" else path


def _write_outputs(comp: Comparison, args: argparse.Namespace, ui: UI) -> None:
    """--markdown, --json and --html are made in memory (the HTML page and its charts in a temp
    folder) and written together: a write error (read-only, full disk, a file or folder in the
    way) writes none of them and says which path and why."""
    files: dict[Path, bytes] = {}
    if args.markdown:
        files[args.markdown] = documents.to_markdown(comp).encode("utf-8")
    json_file = _json_file(args)
    if json_file is not None:
        files[json_file] = documents.dumps_json(comp).encode("utf-8")
    page = None
    if args.html:
        with temp_dir("envbuilder-compare-") as tmp:
            made = compare_html.write_html(comp, tmp)
            page = args.html / made.name
            files.update(
                {
                    args.html / f.name: f.read_bytes()
                    for f in sorted(tmp.iterdir())
                    if f.is_file() and not f.name.startswith(".")
                }
            )
    write_together(files)
    for path in (args.markdown, json_file, page):
        if path is not None:
            ui.info(f"wrote {path}")


#: Past this many table lines the terminal table is plain text: rich lays out ~1,500 lines a
#: second (100,000 lines: over a minute), plain text is instant.
RICH_TABLE_MAX_LINES = 2000


def _print(comp: Comparison, ui: UI) -> None:
    ui.print(f"baseline: {comp.baseline.label} ({comp.baseline.path})")
    for line in tables.fingerprint_lines(comp):
        ui.warn(line) if line.startswith("UNFAIR") else ui.info(line)
    _print_guide(comp, ui)
    rows = tables.table_rows(comp)
    with_notes = any(r[-1] for r in rows)  # the note column only when some row has one
    header = tables.TABLE_HEADER if with_notes else tables.TABLE_HEADER[:-1]
    if len(rows) > RICH_TABLE_MAX_LINES:
        ui.info(f"{len(rows):,} table lines: printed as plain text")
        ui.print(plain_table(header, [r[: len(header)] for r in rows]))
    else:
        ui.table(_rich_table(comp, header, rows))
    ui.print(f"noise rule: {comp.noise_rule}")
    for note in comp.notes:
        ui.print(f"note: {note}")


def _print_guide(comp: Comparison, ui: UI) -> None:
    """The guide's table (memory bandwidth, images/s, latency), one column per report."""
    lines = guide.guide_table(comp)
    if not lines:
        return
    table = Table(title=Text(f"the guide's table, compared with {comp.baseline.label}"))
    for h in guide.guide_header(comp):
        table.add_column(Text(h), overflow="fold")
    styles = {"faster": "green", "slower": "red"}
    for line in lines:
        # a line's colour: its worst verdict (any slower is red, else any faster green)
        verdicts = line[5::3]
        style = "red" if "slower" in verdicts else styles.get(next(iter(verdicts), ""))
        table.add_row(*(Text(cell) for cell in line), style=style)
    ui.table(table)


def _rich_table(comp: Comparison, header: list[str], rows: list[list[str]]) -> Table:
    # Cells and title are Text, not str: rich would read "[/]" or "[bold]" in a label as markup
    # (and fail on a stray closing tag); labels must print as they are.
    table = Table(title=Text(f"compared with {comp.baseline.label}"), show_lines=False)
    # Minimum widths keep every column readable on an 80-column (or piped) console: cells
    # fold onto more lines instead of a column shrinking to nothing.
    min_widths = {
        "metric": 14,
        "report": 10,
        "median": 9,
        "min .. max": 11,
        "ratio": 5,
        "loss": 7,
        "verdict": 12,
        "note": 10,
    }
    for h in header:
        table.add_column(h, overflow="fold", min_width=min_widths.get(h))
    styles = {"faster": "green", "slower": "red"}
    for row in rows:
        table.add_row(
            *(Text(cell) for cell in row[: len(header)]),
            style=styles.get(row[tables.VERDICT_COLUMN]),
            end_section=False,
        )
    return table


def plain_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, a dashed line under the header."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)

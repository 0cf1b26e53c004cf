"""`envbuilder compare`: reports -> table, markdown, JSON, HTML with charts."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from envbuilder import compare
from envbuilder.errors import UsageError
from envbuilder.fsutil import temp_dir, write_together
from envbuilder.ui import UI

HELP = "compare validation reports: ratios, loss %, spread over repeats, noise verdicts"
DESCRIPTION = f"""\
Compare two or more probe reports (from `envbuilder validate`, e.g. reports/cpu.docker.json and
reports/cpu.native.json). Metrics are matched by check, name, dtype and size. For each: the
median, min/median/max over repeats, ratio to the baseline, loss in percent and a verdict.

{compare.noise_rule_text(compare.DEFAULT_NOISE_FLOOR_PCT)}

Fingerprint differences that make the comparison unfair (torch, HIP/CUDA, GPU, gfx, driver,
lock, Python) are listed before the numbers. Exit 0 when the reports could be compared."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT",
                        help="probe report JSON files (at least two, counting --baseline)")
    parser.add_argument("--baseline", type=Path, metavar="REPORT",
                        help="the report others are compared with (default: the first)")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="also write markdown here")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write JSON here")
    parser.add_argument("--html", type=Path, metavar="DIR",
                        help="also write DIR/index.html with PNG charts (opens offline)")
    parser.add_argument("--noise-floor", type=float, default=compare.DEFAULT_NOISE_FLOOR_PCT,
                        metavar="PCT", help="smallest difference in %% that can count "
                        f"(default {compare.DEFAULT_NOISE_FLOOR_PCT:g})")


def _paths(args: argparse.Namespace) -> tuple[list[Path], int]:
    paths: list[Path] = list(args.reports)
    if args.baseline is None:
        return paths, 0
    resolved = [p.resolve() for p in paths]
    if args.baseline.resolve() in resolved:
        return paths, resolved.index(args.baseline.resolve())
    return [args.baseline, *paths], 0


def run(args: argparse.Namespace, ui: UI) -> int:
    paths, baseline = _paths(args)
    if len(paths) < 2:
        raise UsageError("compare needs at least two reports (or one report and --baseline)")
    reports = [compare.load_report(p) for p in paths]
    comp = compare.compare_reports(reports, baseline, args.noise_floor)
    _print(comp, ui)
    _write_outputs(comp, args, ui)
    return 0


def _write_outputs(comp: compare.Comparison, args: argparse.Namespace, ui: UI) -> None:
    """--markdown, --json and --html are made in memory (the HTML page and its charts in a temp
    folder) and written together: a write error (read-only, full disk, a file or folder in the
    way) writes none of them and says which path and why."""
    files: dict[Path, bytes] = {}
    if args.markdown:
        files[args.markdown] = compare.to_markdown(comp).encode("utf-8")
    if args.json:
        files[args.json] = compare.dumps_json(comp).encode("utf-8")
    page = None
    if args.html:
        with temp_dir("envbuilder-compare-") as tmp:
            made = compare.write_html(comp, tmp)
            page = args.html / made.name
            files.update({args.html / f.name: f.read_bytes() for f in sorted(tmp.iterdir())
                          if f.is_file() and not f.name.startswith(".")})
    write_together(files)
    for path in (args.markdown, args.json, page):
        if path is not None:
            ui.info(f"wrote {path}")


def _print(comp: compare.Comparison, ui: UI) -> None:
    ui.print(f"baseline: {comp.baseline.label} ({comp.baseline.path})")
    for line in compare.fingerprint_lines(comp):
        ui.warn(line) if line.startswith("UNFAIR") else ui.info(line)
    rows = compare.table_rows(comp)
    with_notes = any(r[-1] for r in rows)  # the note column only when some row has one
    header = compare.TABLE_HEADER if with_notes else compare.TABLE_HEADER[:-1]
    table = Table(title=f"compared with {comp.baseline.label}", show_lines=False)
    # Minimum widths keep every column readable on an 80-column (or piped) console: cells
    # fold onto more lines instead of a column shrinking to nothing.
    min_widths = {"metric": 14, "report": 10, "median": 9, "min .. max": 11, "ratio": 5,
                  "loss": 7, "verdict": 12, "note": 10}
    for h in header:
        table.add_column(h, overflow="fold", min_width=min_widths.get(h))
    styles = {"faster": "green", "slower": "red"}
    for row in rows:
        table.add_row(*row[: len(header)], style=styles.get(row[compare.VERDICT_COLUMN]),
                      end_section=False)
    ui.table(table)
    ui.print(f"noise rule: {comp.noise_rule}")
    for note in comp.notes:
        ui.print(f"note: {note}")

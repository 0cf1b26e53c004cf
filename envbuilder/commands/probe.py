"""`envbuilder probe`: run the validation suite here, in this interpreter's environment."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from envbuilder.core.errors import UsageError, ValidationError
from envbuilder.core.fsutil import atomic_write_text
from envbuilder.core.ui import UI
from envbuilder.probe.cli import add_probe_arguments, expectation_error, options_from_args
from envbuilder.probe.report import render_table
from envbuilder.probe.runner import exit_code, run_probe

HELP = "run the validation suite (the probe) in this environment"
DESCRIPTION = """\
Run the same checks that `envbuilder validate` runs inside images, WSL distros and venvs, but
here, with this interpreter: device, matmul, amp, collectives, membw, conformance. The checks
run in one worker process; one that hangs past its timeout or crashes fails alone (a new worker
runs the rest). The options are those of the probe zipapp
(`python probe.pyz --help`); see docs/probe.md.

  envbuilder probe --level quick --expect cpu --lock lockfiles/pylock.cpu-native.toml \\
      --json reports/cpu.native.json

--json - prints the report (schema: envbuilder/data/schemas/probe-report.schema.json) on stdout
instead of the table.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_probe_arguments(parser)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Run the probe; print the table; write --json. Returns 0 when nothing failed."""
    if args.lock and not Path(args.lock).is_file():
        raise UsageError(
            f"--lock {args.lock}: no such file (give a PEP 751 pylock.toml, "
            "e.g. one under lockfiles/)"
        )
    to_stdout = args.json == "-"
    if args.json and not to_stdout and Path(args.json).is_dir():
        raise UsageError(
            f"--json {args.json} is a folder; give the report's file name, e.g. "
            "reports/cpu.native.json"
        )
    mismatch = expectation_error(args)
    if mismatch:
        raise UsageError(mismatch)
    report = run_probe(options_from_args(args), progress=ui.info)
    if to_stdout:
        ui.json(report)
        return exit_code(report)
    if args.json:
        try:
            atomic_write_text(Path(args.json), json.dumps(report, indent=2, allow_nan=False) + "\n")
        except OSError as exc:
            raise ValidationError(
                f"cannot write the report to --json {args.json}: {exc.strerror or exc}"
            ) from None
    ui.print(render_table(report))
    return exit_code(report)

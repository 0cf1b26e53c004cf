"""Command line of the probe (the same for `python -m envbuilder.probe` and the zipapp).

    python probe.pyz --level quick|standard|long|workload --expect rocm|cuda|cpu
        [--only C] [--skip C] [--expect-rocm RELEASE] [--expect-hip MAJOR.MINOR]
        [--expect-gfx GFX ...]
        [--lock PYLOCK] [--label key=value ...] [--json PATH] [--repeat N] [--timeout S]
        [--find-batch]

Exit codes: 0 nothing failed, 1 a check failed or erred, 2 usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from envbuilder.core import records
from envbuilder.probe.options import ProbeOptions, non_empty_path
from envbuilder.probe.report import render_table
from envbuilder.probe.runner import PROBE_VERSION, exit_code, run_probe


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe's options (shared with `envbuilder probe`): one argument per declared key of
    ProbeOptions, then --json (where the report goes: not an option of the run)."""
    for k in records.fields_of(ProbeOptions):
        add_argument(parser, k)
    parser.add_argument(
        "--json", type=non_empty_path, metavar="PATH", help="write the JSON report here"
    )


def add_argument(parser: argparse.ArgumentParser, k: records.Field) -> None:
    """The argument a declared key is set by: its flag, help, choices, how its text is read,
    and its default (a repeatable key's is an empty list, a required key has none)."""
    if k.flag is None:
        return
    spec: dict[str, Any] = {"dest": k.name, "help": k.desc}
    if k.action == "store_true":
        parser.add_argument(k.flag, action="store_true", **spec)
        return
    if k.action is not None:
        spec["action"] = k.action
    if k.choices:
        spec["choices"] = k.choices
    if k.metavar is not None:
        spec["metavar"] = k.metavar
    if k.arg_type is not None:
        spec["type"] = k.arg_type
    if k.action == "append":
        spec["default"] = []
    elif k.arg_default is not None:
        spec["default"] = k.arg_default
    elif k.required:
        spec["required"] = True
    parser.add_argument(k.flag, **spec)


def expectation_error(args: argparse.Namespace) -> str | None:
    """Why the --expect-* options do not fit --expect (a usage error), or None."""
    given = [
        name
        for name, value in (
            ("--expect-rocm", args.expect_rocm),
            ("--expect-hip", args.expect_hip),
            ("--expect-gfx", args.expect_gfx),
        )
        if value
    ]
    if given and args.expect != "rocm":
        return (
            f"{', '.join(given)}: only with --expect rocm (they describe a ROCm env), "
            f"not with --expect {args.expect}"
        )
    return None


def options_from_args(args: argparse.Namespace) -> ProbeOptions:
    """ProbeOptions from parsed (and checked) arguments: each declared key's value (an absent
    flag: the record's default), a repeatable one as a tuple without repeats, --label's pairs
    as a mapping, --lock as an absolute path."""
    values: dict[str, Any] = {}
    for k in records.fields_of(ProbeOptions):
        value = getattr(args, k.name)
        if value is None:
            continue
        if k.kind is dict:
            value = dict(value)
        elif k.kind is list:
            value = tuple(dict.fromkeys(value))
        values[k.name] = value
    if args.lock:
        values["lock"] = str(Path(args.lock).resolve())
    return ProbeOptions(**values)


def report_path(path: str) -> Path:
    """Where this process writes the report; under torchrun, ranks > 0 add `.rankN`."""
    target = Path(path)
    rank = int(os.environ.get("RANK", "0") or 0)
    if rank > 0:
        return target.with_name(f"{target.stem}.rank{rank}{target.suffix}")
    return target


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write atomically (temp file + rename): a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, allow_nan=False) + "\n"
    # mkstemp: created exclusively (O_EXCL|O_NOFOLLOW) under an unpredictable name, so a link
    # planted at a predictable temp name beside the report is never written through
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _child_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="envbuilder-probe-child")
    parser.add_argument("--_child", required=True)
    parser.add_argument("--_ctx", required=True)
    parser.add_argument("--_out", required=True)
    args = parser.parse_args(argv)
    from envbuilder.probe.child import main as child_main

    return child_main(args._child, args._ctx, args._out)


def _worker_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="envbuilder-probe-worker")
    parser.add_argument("--_worker", action="store_true", required=True)
    parser.add_argument("--_ctx", required=True)
    args = parser.parse_args(argv)
    from envbuilder.probe.worker import main as worker_main

    return worker_main(args._ctx)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run every check, print the table, write --json; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_child"]:
        return _child_main(argv)
    if argv[:1] == ["--_worker"]:
        return _worker_main(argv)
    parser = argparse.ArgumentParser(
        prog="probe",
        description="envbuilder's validation suite (stdlib + torch only).",
        epilog="Exit codes: 0 nothing failed, 1 a check failed or erred, 2 usage, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"envbuilder-probe {PROBE_VERSION}")
    add_probe_arguments(parser)
    args = parser.parse_args(argv)
    if args.lock and not Path(args.lock).is_file():
        parser.error(f"--lock {args.lock}: no such file")
    mismatch = expectation_error(args)
    if mismatch:
        parser.error(mismatch)
    if args.json and Path(args.json).is_dir():
        parser.error(f"--json {args.json} is a folder; give the report's file name")
    opts = options_from_args(args)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, _sigterm)  # `docker stop` ends the children too
    try:
        report = run_probe(opts, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: running checks were stopped", file=sys.stderr)
        return 130
    if args.json:
        write_json(report_path(args.json), report)
    if int(os.environ.get("RANK", "0") or 0) == 0:
        print(render_table(report))
    else:
        print(f"rank {os.environ['RANK']}: {report['status']}")
    return exit_code(report)

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
import re
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from envbuilder.probe.common import CHECK_NAMES, EXPECTS, LEVELS
from envbuilder.probe.report import render_table
from envbuilder.probe.runner import PROBE_VERSION, ProbeOptions, exit_code, run_probe


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--label wants key=value, got {text!r}")
    return key, value


#: Linux's PATH_MAX and NAME_MAX in bytes (the probe runs without envbuilder.core, which has
#: the same check for the other commands' paths).
_PATH_MAX = 4096
_NAME_MAX = 255


def _non_empty(text: str) -> str:
    """A path option's value: an empty one (an unset shell variable) or one longer than the OS
    allows is a usage error (exit 2), not "no report" (or a traceback) after minutes of checks."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?); name a file")
    raw = os.fsencode(os.path.abspath(text))  # noqa: PTH100
    longest = max(raw.split(b"/"), key=len)
    if len(raw) >= _PATH_MAX or len(longest) > _NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"the path is too long ({len(raw)} bytes, a name of {len(longest)}; the system "
            f"allows {_PATH_MAX - 1} and {_NAME_MAX}); choose a shorter one"
        )
    return text


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _pattern(what: str, regex: str, example: str) -> Any:
    """An argparse type that accepts `regex` (a full match) and names an example otherwise."""

    def parse(text: str) -> str:
        if not re.fullmatch(regex, text):
            raise argparse.ArgumentTypeError(f"expected {what} such as {example}, got {text!r}")
        return text

    return parse


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe's options (shared with `envbuilder probe`)."""
    _add_level_and_expect(parser)
    add_expectation_arguments(parser)
    _add_check_selection(parser)
    _add_inputs_and_outputs(parser)
    _add_sampling(parser)


def _add_level_and_expect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--level",
        choices=LEVELS,
        default="quick",
        help="quick (seconds), standard, long, workload (standard, and ResNet-50 trained at "
        "224x224 for a stable images/s)",
    )
    parser.add_argument(
        "--expect",
        choices=EXPECTS,
        required=True,
        help="what the environment must have: a ROCm/CUDA build with a GPU, "
        "or the CPU (a promised GPU that is missing is a failure)",
    )


def _add_check_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        action="append",
        choices=CHECK_NAMES,
        default=[],
        metavar="CHECK",
        help=f"run only this check (repeatable): {', '.join(CHECK_NAMES)}",
    )
    parser.add_argument(
        "--skip",
        action="append",
        choices=CHECK_NAMES,
        default=[],
        metavar="CHECK",
        help="skip this check (repeatable)",
    )


def _add_inputs_and_outputs(parser: argparse.ArgumentParser) -> None:
    """The lock to hold the packages against, the report's labels and its file."""
    parser.add_argument(
        "--lock",
        type=_non_empty,
        metavar="PYLOCK",
        help="PEP 751 pylock.toml the installed packages must equal",
    )
    parser.add_argument(
        "--label",
        action="append",
        type=_label,
        default=[],
        metavar="KEY=VALUE",
        help="copied into the report (e.g. env=cpu)",
    )
    parser.add_argument(
        "--json", type=_non_empty, metavar="PATH", help="write the JSON report here"
    )


def _add_sampling(parser: argparse.ArgumentParser) -> None:
    """How many samples each metric gets, and how long each check may take."""
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="N",
        help="samples per metric (the value is their median)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="per-check timeout (default: 120 quick, 300 standard, 1800 long and workload)",
    )
    parser.add_argument(
        "--find-batch",
        action="store_true",
        help="the train check also finds the largest power-of-two ResNet-50 batch that "
        "trains without running out of GPU memory",
    )


def add_expectation_arguments(parser: argparse.ArgumentParser) -> None:
    """What the release check (part of conformance) holds torch and the GPUs against."""
    parser.add_argument(
        "--expect-rocm",
        type=_pattern("a ROCm release", r"[0-9]+(\.[0-9]+)+", "7.14.1"),
        metavar="RELEASE",
        help="with --expect rocm: the ROCm release the env locks; torch's local version "
        "tag (+rocm7.14.1, or its line +rocm7.14) must name it",
    )
    parser.add_argument(
        "--expect-hip",
        type=_pattern("a HIP version", r"[0-9]+(\.[0-9]+)+", "7.14"),
        metavar="MAJOR.MINOR",
        help="with --expect rocm: torch.version.hip must start with it (the HIP the release "
        "ships; without it the HIP version is recorded, not checked)",
    )
    parser.add_argument(
        "--expect-gfx",
        action="append",
        type=_pattern("a gfx target", r"gfx[0-9a-f]+", "gfx1100"),
        default=[],
        metavar="GFX",
        help="with --expect rocm (repeatable): the GPU targets the lock holds device code "
        "for; every visible GPU must be one of them",
    )


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
    """ProbeOptions from parsed (and checked) arguments."""
    return ProbeOptions(
        level=args.level,
        expect=args.expect,
        only=tuple(args.only),
        skip=tuple(args.skip),
        lock=str(Path(args.lock).resolve()) if args.lock else None,
        labels=dict(args.label),
        repeat=args.repeat,
        timeout_s=args.timeout,
        expect_rocm=args.expect_rocm,
        expect_hip=args.expect_hip,
        expect_gfx=tuple(dict.fromkeys(args.expect_gfx)),
        find_batch=args.find_batch,
    )


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

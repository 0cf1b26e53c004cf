"""`envbuilder explain MESSAGE`: what a known ROCm/PyTorch error means and how to fix it."""

from __future__ import annotations

import argparse
import json
import sys

from envbuilder import explain
from envbuilder.errors import UsageError
from envbuilder.ui import UI

HELP = "explain a known ROCm/PyTorch error message: cause, fix, sources"
DESCRIPTION = """\
Paste an error message (or a whole log: `-` reads standard input). Known messages get their
cause, the fix and the public sources; unknown ones say so and exit 1.

Examples:
  envbuilder explain "RuntimeError: No HIP GPUs are available"
  envbuilder explain - < train.log
  envbuilder explain --list"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="?", help="the message, or - for standard input")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--list", action="store_true", help="list the known messages")


def run(args: argparse.Namespace, ui: UI) -> int:
    if args.list:
        for e in explain.load_errors():
            ui.print(f"{e.id}: {e.title}")
        return 0
    if args.message is None:
        raise UsageError("give a MESSAGE to explain (or - to read it from standard input)")
    text = sys.stdin.read() if args.message == "-" else args.message
    if not text.strip():
        raise UsageError("the message to explain is empty; paste the error text (quoted) or "
                         "pipe it in with -")
    found = explain.match_all(text)
    if args.json:
        ui.print(json.dumps({"known": bool(found), "matches": [e.as_dict() for e in found]},
                            indent=2))
        return 0 if found else 1
    if not found:
        ui.print("Not a known message. `envbuilder explain --list` shows the known ones; "
                 "`envbuilder doctor` checks the host.")
        return 1
    for i, e in enumerate(found):
        if i:
            ui.print("")
            ui.print("Also matches:")
        ui.print(e.title)
        ui.print(f"  cause: {e.cause}")
        ui.print(f"  fix:   {e.fix}")
        for s in e.sources:
            ui.print(f"  source: {s}")
    return 0

"""`envbuilder explain MESSAGE`: what a known ROCm/PyTorch error means and how to fix it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from envbuilder.commands._options import add_json_argument
from envbuilder.core.errors import UsageError
from envbuilder.core.ui import UI
from envbuilder.host import explain

HELP = "explain a known ROCm/PyTorch error message: cause, fix, sources"
DESCRIPTION = f"""\
Paste an error message (or a whole log: `-` reads standard input). Known messages get their
cause, the fix and the public sources; unknown ones say so and exit 1. Input is read as UTF-8
(bytes that are not become U+FFFD) and may be at most {explain.MAX_INPUT_BYTES >> 20} MiB: for a
longer log, pass its end (`tail -c 1M train.log | envbuilder explain -`).

Examples:
  envbuilder explain "RuntimeError: No HIP GPUs are available"
  envbuilder explain - < train.log
  envbuilder explain --list"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="?", help="the message, or - for standard input")
    add_json_argument(parser, "the matches (with --list: the known messages)")
    parser.add_argument("--list", action="store_true", help="list the known messages")


def run(args: argparse.Namespace, ui: UI) -> int:
    if args.list:
        _list_known(args.json, ui)
        return 0
    found = explain.match_all(_message(args))
    if args.json:
        ui.json(
            {
                "command": "explain",
                "ok": bool(found),
                "known": bool(found),
                "matches": [e.as_dict() for e in found],
            }
        )
        return 0 if found else 1
    if not found:
        ui.print(
            "Not a known message. `envbuilder explain --list` shows the known ones; "
            "`envbuilder doctor` checks the host."
        )
        return 1
    _print_matches(found, ui)
    return 0


def _list_known(as_json: bool, ui: UI) -> None:
    known = explain.load_errors()
    if as_json:
        ui.json(
            {
                "command": "explain",
                "ok": True,
                "messages": [{"id": e.id, "title": e.title} for e in known],
            }
        )
    else:
        for e in known:
            ui.print(f"{e.id}: {e.title}")


def _message(args: argparse.Namespace) -> str:
    """The text to explain (the argument, or standard input for -); UsageError when there is
    none, it is blank or it is longer than explain reads."""
    if args.message is None:
        raise UsageError("give a MESSAGE to explain (or - to read it from standard input)")
    text = _read_stdin() if args.message == "-" else args.message
    if len(text.encode("utf-8", "replace")) > explain.MAX_INPUT_BYTES:
        raise UsageError(_too_long("the message"))
    if not text.strip():
        raise UsageError(
            "the message to explain is empty; paste the error text (quoted) or pipe it in with -"
        )
    return text


def _print_matches(found: Sequence[explain.Explanation], ui: UI) -> None:
    for i, e in enumerate(found):
        if i:
            ui.print("")
            ui.print("Also matches:")
        ui.print(e.title)
        ui.print(f"  cause: {e.cause}")
        ui.print(f"  fix:   {e.fix}")
        for s in e.sources:
            ui.print(f"  source: {s}")


def _too_long(what: str) -> str:
    return (
        f"{what} is over {explain.MAX_INPUT_BYTES >> 20} MiB, more than explain reads; pass "
        "the part with the error, e.g. `tail -c 1M train.log | envbuilder explain -`"
    )


def _read_stdin() -> str:
    """Standard input as text, at most MAX_INPUT_BYTES: read as bytes so any encoding works
    (a log may hold binary junk; invalid UTF-8 becomes U+FFFD instead of a traceback)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # stdin replaced by a text stream (an embedding program, a test)
        return str(sys.stdin.read(explain.MAX_INPUT_BYTES + 1))
    data = buffer.read(explain.MAX_INPUT_BYTES + 1)
    if len(data) > explain.MAX_INPUT_BYTES:
        raise UsageError(_too_long("standard input"))
    return bytes(data).decode("utf-8", errors="replace")

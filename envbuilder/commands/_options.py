"""The argparse helpers that the commands share: the value types that refuse an empty string,
--spec and --json. They live here, below both the command modules and envbuilder.commands._cli, so
that the commands need not import the command line that imports them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from envbuilder.core.fsutil import path_too_long
from envbuilder.core.project import SPEC_NAME


def path_value(text: str) -> Path:
    """argparse type of every path option: an empty string is refused (exit 2). Path("") is
    ".", so `--run-dir "$UNSET"` would otherwise quietly mean the current folder and write
    there (a job folder, probe.pyz, reports)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "an empty path (an unset shell variable?); name a file or folder, "
            "e.g. . for the current one"
        )
    # Said here, before any work: past the OS's limits every stat() fails with "File name too
    # long", and a command would get part-way (a probe, a render) before the write does.
    too_long = path_too_long(Path(os.path.abspath(text)))  # noqa: PTH100
    if too_long is not None:
        raise argparse.ArgumentTypeError(f"{too_long}; choose a shorter path")
    return Path(text)


def non_empty(text: str) -> str:
    """argparse type given to every option and argument that takes a string without a type of
    its own (names, registries, messages, ...): an empty one is refused (exit 2), as
    `--env "$UNSET"` is a mistake, never a value."""
    if not text:
        raise argparse.ArgumentTypeError(
            "an empty value (an unset shell variable?); give one, or leave the option out"
        )
    return utf8_text(text)


def utf8_text(text: str) -> str:
    """`text` when it is UTF-8; ArgumentTypeError naming the first byte that is not (Python
    gives such argv bytes as lone surrogates, which no name, message or file can hold)."""
    raw = text.encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"'{raw.decode('utf-8', 'backslashreplace')}' is not UTF-8 text (byte "
            f"0x{raw[exc.start]:02x} at {exc.start}); give it in UTF-8 (check the terminal's "
            "or the script's encoding)"
        ) from None
    return text


def refuse_empty_values(parser: argparse.ArgumentParser) -> None:
    """Give `non_empty` to each of the command's options and arguments that takes a value and
    has no type yet (path options have path_value, numbers int). A command's own words (`run
    -- CMD...`, nargs REMAINDER) are its argv, passed as they are: '' and any bytes included."""
    for action in parser._actions:  # argparse keeps them there; there is no public list
        if action.nargs in (0, argparse.REMAINDER) or action.type is not None or not action.dest:
            continue
        if isinstance(action, (argparse._StoreAction, argparse._AppendAction)):
            action.type = non_empty


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command that reads the spec shares."""
    parser.add_argument(
        "--spec",
        type=path_value,
        default=None,
        metavar="PATH",
        help=f"the spec file (default: {SPEC_NAME} in this folder or the nearest folder "
        "above it that has one, as git finds .git; -v shows which); outputs go beside it",
    )


def add_json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """--json: print `what` as one JSON object on stdout (docs/cli.md gives every shape)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as one JSON object on stdout (shape: docs/cli.md)",
    )

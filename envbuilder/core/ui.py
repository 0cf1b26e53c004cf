"""Printing at the edge: results to stdout, progress and messages to stderr.

Plain lines are written as they are (no markup, no emoji codes); rich is imported only to
colour a warning or an error on a terminal, to draw progress bars on a terminal, or to print a
table, so a command that prints a few lines starts without it.

Progress (`UI.progress`): on a terminal, rich bars on stderr (one for the steps, one per
downloaded layer or file). When stderr is not a terminal (a pipe, a CI log, a file) there is
no bar and no final bar line: each step prints one plain line when it starts, and events
without a total (messages) print as they come. `--quiet` prints no progress at all.

`--json` (`UI(json=True)`): stdout carries exactly one JSON object, written by `UI.json`
(a command's result, or the CLI's error object). Anything a command would print for people
goes to stderr instead (silenced by --quiet), so it can never break the JSON.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from envbuilder.core.progress import ProgressFn
from envbuilder.core.redact import redact

if TYPE_CHECKING:  # rich is imported where it draws (it costs ~50 ms at start-up)
    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table

#: Control codes rich strips from printed text (BEL, BS, VT, FF, CR): a carriage return or a
#: backspace in a value (a report label, an error from a tool) must not overwrite what was
#: printed before it. Plain writes strip the same ones.
_CONTROL_CODES = dict.fromkeys((7, 8, 11, 12, 13))


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal that can redraw a progress bar (a tty whose
    TERM is not dumb)."""
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # a closed or detached stream
        return False
    return tty and os.environ.get("TERM", "") not in ("dumb", "unknown")


#: `--color`'s values: `auto` colours a terminal unless NO_COLOR says not to (or off one where
#: FORCE_COLOR says to); `always` and `never` override both variables, as no-color.org asks of
#: a command-line flag.
COLOR_CHOICES = ("auto", "always", "never")


def color_wanted(choice: str, stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether text written to `stream` is coloured. `auto`: off when NO_COLOR is set to
    anything but "" (no-color.org), else on when FORCE_COLOR is (force-color.org; NO_COLOR wins
    when both are: it is the reader's opt-out), else on a terminal."""
    if choice != "auto":
        return choice == "always"
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR", ""):
        return False
    return bool(env.get("FORCE_COLOR", "")) or is_terminal(stream)


class UI:
    """The only place commands print. Library code returns values or calls a progress callback."""

    def __init__(
        self, quiet: bool = False, json: bool = False, verbose: bool = False, color: str = "auto"
    ) -> None:
        self.quiet = quiet
        self.color = color
        self.verbose = verbose
        self.json_mode = json
        self.json_written = False
        self.stdout = sys.stdout
        self.stderr = sys.stderr
        self._out: Console | None = None
        self._err: Console | None = None
        self._live = 0  # progress displays drawing on stderr now (their console owns it)

    # --- consoles (rich), made on first use ------------------------------------------------------

    @property
    def out(self) -> Console:
        """A rich console on stdout (for tables)."""
        if self._out is None:
            self._out = _console(self.stdout, color_wanted(self.color, self.stdout))
        return self._out

    @property
    def err(self) -> Console:
        """A rich console on stderr (for colour, tables in --json mode and progress bars)."""
        if self._err is None:
            self._err = _console(self.stderr, color_wanted(self.color, self.stderr))
        return self._err

    # --- lines -------------------------------------------------------------------------------

    def print(self, text: str = "") -> None:
        """A result line on stdout, as it is. With --json it goes to stderr (stdout holds only
        the JSON object), silenced by --quiet there."""
        if self.json_mode:
            self.info(text)
        else:
            self._write(self.stdout, text)

    def info(self, text: str) -> None:
        """A progress or status line on stderr; silent with --quiet."""
        if not self.quiet:
            self._message(text, None)

    def detail(self, text: str) -> None:
        """A line on stderr only with -v/--verbose (and not --quiet)."""
        if self.verbose:
            self.info(text)

    def warn(self, text: str) -> None:
        self._message(f"warning: {text}", "yellow")

    def error(self, text: str) -> None:
        self._message(f"error: {text}", "red")

    def table(self, table: Table) -> None:
        """A rich table on stdout (on stderr with --json, silenced by --quiet there)."""
        if not self.json_mode:
            self.out.print(table)
        elif not self.quiet:
            self.err.print(table)

    def json(self, obj: Any) -> None:
        """The one JSON object of a --json run, on stdout (indented, ASCII, no NaN)."""
        self.json_text(jsonlib.dumps(obj, indent=2, allow_nan=False))

    def json_text(self, text: str) -> None:
        """The one JSON object of a --json run, already encoded (a large document a module
        encodes faster itself). A second object would break stdout's JSON: a bug."""
        if self.json_written:
            raise RuntimeError("a --json run writes one JSON object on stdout")
        self.json_written = True
        self.stdout.write(text if text.endswith("\n") else text + "\n")
        self.stdout.flush()

    def _message(self, text: str, style: str | None) -> None:
        """A line on stderr: through rich while a progress display owns the terminal (it prints
        the line above the bars) or to colour it; plain otherwise."""
        text = redact(text)  # no message prints a password a URL carries
        if self._live or (style is not None and color_wanted(self.color, self.stderr)):
            self.err.print(text, markup=False, highlight=False, emoji=False, style=style)
        else:
            self._write(self.stderr, text)

    @staticmethod
    def _write(stream: TextIO, text: str) -> None:
        stream.write(text.translate(_CONTROL_CODES) + "\n")
        stream.flush()

    # --- progress ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def progress(self, *, bytes_: bool = False) -> Iterator[ProgressFn]:
        """A ProgressFn for library calls while the block runs: rich bars on a terminal (opened
        at the first event with a total, so work that reports none draws none), one plain line
        per step otherwise, nothing with --quiet."""
        if self.quiet:
            yield _ignore
        elif not is_terminal(self.stderr):
            yield StepLines(self)
        else:
            with contextlib.ExitStack() as stack:
                yield _LazyBars(self, stack, bytes_)

    @contextlib.contextmanager
    def _bars(self, bytes_: bool) -> Iterator[Progress]:
        """A rich progress display on stderr; while it runs, messages go through its console."""
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            ProgressColumn,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        columns: list[ProgressColumn] = [
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
        ]
        if bytes_:
            columns += [DownloadColumn(), TransferSpeedColumn()]
        columns.append(TimeRemainingColumn())
        with Progress(*columns, console=self.err, transient=False) as prog:
            self._live += 1
            try:
                yield prog
            finally:
                self._live -= 1


def _console(stream: TextIO, color: bool) -> Console:
    """A rich console on `stream`, coloured or not as `color_wanted` decided (rich's own reading
    of NO_COLOR and FORCE_COLOR is overridden: `--color` may contradict them)."""
    from rich.console import Console

    return Console(
        file=stream,
        highlight=False,
        soft_wrap=True,
        # forced only off a terminal: on one, rich's own detection also drives the bars
        force_terminal=True if color and not is_terminal(stream) else None,
        no_color=not color,
        color_system="auto" if color else None,
    )


def _ignore(what: str, done: int, total: int | None) -> None:
    """The progress callback of --quiet."""


class StepLines:
    """A ProgressFn for a stderr that is not a terminal: a step (an event with a total) prints
    its description once, when it is first reported; its later updates and its end print
    nothing (a log gets no bar, no percentages and no final bar line). Events without a total
    are messages and print as they come."""

    def __init__(self, ui: UI) -> None:
        self.ui = ui
        self.seen: set[str] = set()

    def __call__(self, what: str, done: int, total: int | None) -> None:
        if total is None:
            self.ui.info(what)
        elif what not in self.seen:
            self.seen.add(what)
            self.ui.info(what)


#: Events named after a file being fetched (envbuilder.lock.wheelcache reports wheel names).
_FILES = (".whl", ".tar.gz", ".zip")


class ProgressView:
    """A ProgressFn drawing on a rich Progress: one bar for steps, one per downloaded layer or
    file ("pull ..." events or file names, with a total), plain lines for events without one."""

    def __init__(self, progress: Progress, ui: UI) -> None:
        self.progress = progress
        self.ui = ui
        self.main: TaskID | None = None
        self.transfers: dict[str, TaskID] = {}

    def __call__(self, what: str, done: int, total: int | None) -> None:
        if total is None:
            self.ui.info(what)
        elif what.startswith(("pull ", "download ", "fetch ")) or what.endswith(_FILES):
            task = self.transfers.get(what)
            if task is None:
                task = self.transfers[what] = self.progress.add_task(what, total=total)
            self.progress.update(task, completed=done, total=total)
        else:
            if self.main is None:
                self.main = self.progress.add_task(what, total=total)
            self.progress.update(self.main, description=what, completed=done, total=total)


class _LazyBars:
    """A ProgressFn for a terminal that opens the rich display at the first event with a total
    (messages before it print as plain lines) and draws through a ProgressView from then on."""

    def __init__(self, ui: UI, stack: contextlib.ExitStack, bytes_: bool) -> None:
        self.ui = ui
        self.stack = stack
        self.bytes_ = bytes_
        self.view: ProgressView | None = None

    def __call__(self, what: str, done: int, total: int | None) -> None:
        if self.view is None:
            if total is None:
                self.ui.info(what)
                return
            self.view = ProgressView(self.stack.enter_context(self.ui._bars(self.bytes_)), self.ui)
        self.view(what, done, total)

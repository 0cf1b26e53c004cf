"""Printing at the edge: results to stdout, progress and messages to stderr (rich)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table


class UI:
    """The only place commands print. Library code returns values or calls a progress callback."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
        self.err = Console(file=sys.stderr, highlight=False, soft_wrap=True)

    def print(self, text: str = "") -> None:
        """A result line on stdout (markup off, so user values print as they are)."""
        self.out.print(text, markup=False)

    def info(self, text: str) -> None:
        """A progress or status line on stderr; silent with --quiet."""
        if not self.quiet:
            self.err.print(text, markup=False)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {text}", markup=False, style="yellow")

    def error(self, text: str) -> None:
        self.err.print(f"error: {text}", markup=False, style="red")

    def table(self, table: Table) -> None:
        self.out.print(table)

    @contextmanager
    def progress(self, *, bytes_: bool = False) -> Iterator[Progress]:
        """A rich progress display on stderr (disabled with --quiet or when not a terminal)."""
        columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn()]
        if bytes_:
            columns += [DownloadColumn(), TransferSpeedColumn()]
        columns.append(TimeRemainingColumn())
        with Progress(*columns, console=self.err, disable=self.quiet, transient=False) as prog:
            yield prog

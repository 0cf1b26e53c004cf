"""Progress events, the one callback type that long work reports through.

A leaf module (it imports nothing of envbuilder), so engines, the tar writer and the wheel cache can
report progress without importing the target registry.
"""

from __future__ import annotations

from collections.abc import Callable

#: Progress events: (what, done, total) -- total None when unknown; `what` is a short label.
ProgressFn = Callable[[str, int, int | None], None]


def no_progress(what: str, done: int, total: int | None) -> None:
    """The default progress callback: ignore."""

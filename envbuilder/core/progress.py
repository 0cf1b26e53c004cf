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


def byte_size(n: int) -> str:
    """`n` bytes for a message: "512 B", "16.4 kB", "259.7 MB", "3.1 GB" (decimal units, as
    registries and `docker images` count)."""
    if n < 1000:
        return f"{n} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n_units = n / 1000 ** ("kMGT".index(unit[0]) + 1)
        if n_units < 1000 or unit == "TB":
            return f"{n_units:.1f} {unit}"
    raise AssertionError("unreachable")

"""The probe's options, each declared once (envbuilder.core.records): the command line
(`probe.cli` builds its arguments from these declarations), the report's `options`, the
context a check gets (`common.Context` extends the record) and the command line envbuilder
builds for a run (`builders.probeargs`, records.to_argv) all follow from `ProbeOptions`.

Standard library only, like all of envbuilder.probe (envbuilder.core.records is too).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from envbuilder.core.records import key

#: Checks in the order they run. Each is the module `envbuilder.probe.check_<name>`.
CHECK_NAMES: tuple[str, ...] = (
    "device",
    "topology",
    "latency",
    "matmul",
    "amp",
    "train",
    "collectives",
    "membw",
    "conformance",
)
#: `workload` runs every check as `standard` does, and the train check at the guide's shape
#: (224x224, a batch that fits) for long enough to give a stable figure.
LEVELS: tuple[str, ...] = ("quick", "standard", "long", "workload")
EXPECTS: tuple[str, ...] = ("rocm", "cuda", "cpu")
#: Default per-check timeout by level (seconds); --timeout overrides.
DEFAULT_TIMEOUT_S = {"quick": 120.0, "standard": 300.0, "long": 1800.0, "workload": 1800.0}

#: Linux's PATH_MAX and NAME_MAX in bytes (the probe runs without envbuilder.core.fsutil,
#: which has the same check for the other commands' paths).
_PATH_MAX = 4096
_NAME_MAX = 255
#: A release or version number (7.14.1, 7.14) and a gfx target, as the release check takes them.
RELEASE = r"[0-9]+(\.[0-9]+)+"
GFX = r"gfx[0-9a-f]+"


def _label(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--label wants key=value, got {text!r}")
    return name, value


def non_empty_path(text: str) -> str:
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


def _pattern(what: str, regex: str, example: str) -> Callable[[str], str]:
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


@dataclass(frozen=True, kw_only=True)
class ProbeOptions:
    """The probe's command-line options as values, each declared once. The order is the order
    of the command line envbuilder builds and of the report's `options`."""

    level: str = key(
        "quick (seconds), standard, long, workload (standard, and ResNet-50 trained at "
        "224x224 for a stable images/s)",
        choices=LEVELS,
        flag="--level",
        arg_default="quick",
    )
    expect: str = key(
        "what the environment must have: a ROCm/CUDA build with a GPU, "
        "or the CPU (a promised GPU that is missing is a failure)",
        choices=EXPECTS,
        flag="--expect",
    )
    expect_rocm: str | None = key(
        "with --expect rocm: the ROCm release the env locks; torch's local version "
        "tag (+rocm7.14.1, or its line +rocm7.14) must name it",
        default=None,
        pattern=RELEASE,
        flag="--expect-rocm",
        metavar="RELEASE",
        arg_type=_pattern("a ROCm release", RELEASE, "7.14.1"),
    )
    expect_hip: str | None = key(
        "with --expect rocm: torch.version.hip must start with it (the HIP the release "
        "ships; without it the HIP version is recorded, not checked)",
        default=None,
        pattern=RELEASE,
        flag="--expect-hip",
        metavar="MAJOR.MINOR",
        arg_type=_pattern("a HIP version", RELEASE, "7.14"),
    )
    expect_gfx: tuple[str, ...] = key(
        "with --expect rocm (repeatable): the GPU targets the lock holds device code "
        "for; every visible GPU must be one of them",
        default=(),
        pattern=GFX,
        flag="--expect-gfx",
        action="append",
        metavar="GFX",
        arg_type=_pattern("a gfx target", GFX, "gfx1100"),
    )
    labels: dict[str, str] = key(
        "copied into the report (e.g. env=cpu)",
        default_factory=dict,
        flag="--label",
        action="append",
        metavar="KEY=VALUE",
        arg_type=_label,
    )
    repeat: int = key(
        "samples per metric (the value is their median)",
        default=1,
        minimum=1,
        flag="--repeat",
        metavar="N",
        arg_type=_positive,
    )
    only: tuple[str, ...] = key(
        f"run only this check (repeatable): {', '.join(CHECK_NAMES)}",
        default=(),
        choices=CHECK_NAMES,
        flag="--only",
        action="append",
        metavar="CHECK",
    )
    skip: tuple[str, ...] = key(
        "skip this check (repeatable)",
        default=(),
        choices=CHECK_NAMES,
        flag="--skip",
        action="append",
        metavar="CHECK",
    )
    lock: str | None = key(
        "PEP 751 pylock.toml the installed packages must equal",
        default=None,
        flag="--lock",
        metavar="PYLOCK",
        arg_type=non_empty_path,
    )
    timeout_s: float | None = key(
        "per-check timeout (default: 120 quick, 300 standard, 1800 long and workload)",
        default=None,
        # the report holds the timeout the checks ran with: always a number
        schema={"type": "number", "exclusiveMinimum": 0},
        flag="--timeout",
        metavar="SECONDS",
        arg_type=_seconds,
    )
    find_batch: bool = key(
        "the train check also finds the largest power-of-two ResNet-50 batch that "
        "trains without running out of GPU memory",
        default=False,
        flag="--find-batch",
        action="store_true",
    )

    @property
    def check_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else DEFAULT_TIMEOUT_S[self.level]

    def selected(self) -> list[str]:
        """The checks to run, in their fixed order."""
        return [c for c in CHECK_NAMES if (not self.only or c in self.only) and c not in self.skip]

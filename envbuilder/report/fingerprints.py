"""Fingerprint differences between reports: the fields (torch, HIP, GPU, driver, lock, ...)
whose values differ, and whether each makes the comparison unfair (the numbers then differ for
reasons other than the target).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envbuilder.report.reading import MAX_NAME_CHARS, printable
from envbuilder.report.records import FingerprintDiff, Report

#: (field, unfair?, why) -- unfair fields change the numbers for reasons other than the target.
_FP_FIELDS: tuple[tuple[str, bool, str], ...] = (
    ("torch", True, "different torch builds run different kernels"),
    ("hip", True, "different HIP runtimes"),
    ("cuda", True, "different CUDA runtimes"),
    ("gpu", True, "different GPUs"),
    ("gfx", True, "different GPU architectures"),
    ("driver", True, "different drivers"),
    ("packages_sha256", True, "different installed packages (name==version)"),
    (
        "lock_sha256",
        True,
        "different lock files (each target has its own pylock: check that "
        "the pinned versions match)",
    ),
    ("python", True, "different Python versions"),
    ("nccl", True, "different NCCL/RCCL versions (collectives)"),
    ("cpu_count", True, "different CPU counts visible"),
    ("torch_threads", True, "different torch thread counts (CPU figures scale with them)"),
    ("cpus_allowed", True, "different numbers of CPUs allowed (affinity: taskset, cpuset)"),
    ("cpu_quota", True, "different CPU quotas (cgroup cpu.max / CFS quota, e.g. docker --cpus)"),
    ("level", True, "different probe levels (sizes and iterations differ)"),
    ("repeat", False, "different numbers of repeats (the noise bounds differ)"),
    ("wsl", False, "WSL vs not: usually what is being measured"),
    ("host_os", False, "host OS differs"),
    ("kernel", False, "kernel differs"),
)
_FP_WHY = {name: why for name, _unfair, why in _FP_FIELDS}
#: Fields that reports of older probes lack (probe 1.1 added them): compared only when every
#: report has the key, so an old report is not unfair for what it did not record.
_FP_NEWER = ("torch_threads", "cpus_allowed", "cpu_quota")


def _fp_value(report: Report, name: str) -> str:
    """A fingerprint field as one line of text (the fields are free-form: a report from another
    probe may hold anything there)."""
    text = _fp_raw_value(report, name)
    text = " ".join(printable(text).split())
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 3] + "..."


def _fp_raw_value(report: Report, name: str) -> str:
    fp = report.fingerprint
    raw = fp.get("devices")
    devices: list[Any] = raw if isinstance(raw, list) else []
    if name in ("gpu", "gfx"):
        key = "name" if name == "gpu" else "gfx"
        vals = [str(d.get(key)) for d in devices if isinstance(d, dict) and d.get(key)]
        return ", ".join(vals) if vals else "none"
    if name in ("level", "repeat"):
        return str(report.options.get(name, "?"))
    value = fp.get(name)
    return "none" if value is None else str(value)


def _all_have_packages(reports: Sequence[Report]) -> bool:
    return all(isinstance(r.fingerprint.get("packages_sha256"), str) for r in reports)


def _lock_diff(reports: Sequence[Report], values: tuple[str, ...]) -> FingerprintDiff:
    """Differing pylock files: unfair unless every report says what it had installed.

    Each target has its own pylock, so the files differ even when every pin is the same; what
    the numbers depend on is what was installed (`packages_sha256`; older reports lack it).
    When all reports carry it, that field decides fairness and the lock difference is a note.
    """
    packages = [r.fingerprint.get("packages_sha256") for r in reports]
    if not _all_have_packages(reports):
        return FingerprintDiff("lock_sha256", values, True, _FP_WHY["lock_sha256"])
    if len(set(packages)) == 1:
        return FingerprintDiff(
            "lock_sha256", values, False, "different pylock files, same installed packages"
        )
    return FingerprintDiff(
        "lock_sha256", values, False, "different pylock files (see packages_sha256)"
    )


def fingerprint_diffs(reports: Sequence[Report]) -> list[FingerprintDiff]:
    """Fields whose values differ across the reports, unfair ones first."""
    diffs = []
    for name, unfair, why in _FP_FIELDS:
        values = tuple(_fp_value(r, name) for r in reports)
        if len(set(values)) <= 1:
            continue
        if name == "packages_sha256" and not _all_have_packages(reports):
            continue  # a report from before the field: the lock_sha256 rule decides
        if name in _FP_NEWER and not all(name in r.fingerprint for r in reports):
            continue  # a report from before the field: unknown, not different
        if name == "lock_sha256":
            diffs.append(_lock_diff(reports, values))
        else:
            diffs.append(FingerprintDiff(name, values, unfair, why))
    return sorted(diffs, key=lambda d: not d.unfair)

"""The release check: torch's build and the visible GPUs against what the env locks.

The caller (`envbuilder validate`, the Slurm script) says what it expects: the accelerator
(--expect), and for a ROCm env the release it locks (--expect-rocm 7.14.1), the HIP major.minor
that release ships (--expect-hip 7.14, from envbuilder's compatibility data) and the GPU targets
the lock's device code is for (--expect-gfx gfx1100, repeatable). The conformance check runs
`compare_release` on the facts torch gives and puts its result in `details.release`.

Pure functions on given facts (no torch import here): the facts are the device check's
(`torch_facts`): torch version, `torch.version.hip`/`.cuda`, devices with their `gcnArchName`.
Rules (docs/probe.md, "Release check"):

- rocm: torch is a ROCm build; its local version tag `+rocmX[.Y[.Z]]` names the expected release
  or its major.minor line (PyTorch's own indexes tag `+rocm7.14`, AMD's `+rocm7.14.1`);
  `torch.version.hip` starts with the expected HIP major.minor; every visible device's gfx
  target (gcnArchName before ':') is in the expected set; no visible GPU fails.
- cuda: torch is a CUDA build (tag `+cuNNN` or none, `torch.version.cuda` set), a GPU is
  visible; the CUDA version and device names are recorded.
- cpu: nothing can fail (the env may run a GPU build on the CPU); what was found is recorded.

What was not checked (no expected HIP version, no GPU targets, no local tag) is listed in
`not_checked` with the reason, never counted as a pass of that part.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from envbuilder.core import records
from envbuilder.core.records import key
from envbuilder.probe.options import EXPECTS, GFX, RELEASE

_SPLIT = re.compile(r"[.+-]")


@dataclass(frozen=True)
class Expectation:
    """What the caller expects: --expect, --expect-rocm, --expect-hip, --expect-gfx (the
    report's details.release.expected, each key declared once)."""

    accelerator: str = key("--expect: the accelerator the env is built for", choices=EXPECTS)
    rocm: str | None = key(
        "--expect-rocm: the ROCm release the env locks (e.g. 7.14.1)", default=None, pattern=RELEASE
    )
    hip: str | None = key(
        "--expect-hip: the HIP major.minor that release ships (e.g. 7.14)",
        default=None,
        pattern=RELEASE,
    )
    gfx: tuple[str, ...] = key(
        "--expect-gfx: the GPU targets the lock holds device code for", default=(), pattern=GFX
    )

    def to_json(self) -> dict[str, Any]:
        return records.to_json(self)


def local_tag(torch_version: str | None) -> str | None:
    """The local version label: "2.13.0+cpu" -> "cpu"; None without one."""
    if not torch_version or "+" not in torch_version:
        return None
    return torch_version.split("+", 1)[1] or None


def gfx_base(arch: str | None) -> str | None:
    """The gfx target of a gcnArchName: "gfx90a:sramecc+:xnack-" -> "gfx90a"."""
    if not arch:
        return None
    return arch.split(":", 1)[0] or None


def starts_with(version: str, prefix: str) -> bool:
    """Whether `version`'s components begin with `prefix`'s: "7.14.60850-0" starts with "7.14",
    "7.140.1" does not."""
    have = [p for p in _SPLIT.split(version) if p]
    want = [p for p in _SPLIT.split(prefix) if p]
    return bool(want) and have[: len(want)] == want


def build_of(facts: dict[str, Any]) -> str:
    """What torch was built for: "rocm", "cuda" or "cpu"."""
    if facts.get("hip"):
        return "rocm"
    return "cuda" if facts.get("cuda") else "cpu"


def _tag_kind(tag: str | None) -> str | None:
    if tag is None:
        return None
    if tag.startswith("rocm"):
        return "rocm"
    if re.fullmatch(r"cu[0-9]+", tag):
        return "cuda"
    return "cpu" if tag == "cpu" else "other"


def _found(facts: dict[str, Any]) -> dict[str, Any]:
    devices = [
        {"index": d.get("index"), "name": d.get("name"), "gfx": gfx_base(d.get("gfx"))}
        for d in facts.get("devices") or []
    ]
    return {
        "torch": facts.get("torch"),
        "local_tag": local_tag(facts.get("torch")),
        "build": build_of(facts),
        "hip": facts.get("hip"),
        "cuda": facts.get("cuda"),
        "devices": devices,
    }


_BUILD_LABEL = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU-only"}


def _build_findings(exp: Expectation, found: dict[str, Any]) -> list[str]:
    """torch is the expected kind of build (torch.version.hip / .cuda)."""
    torch = found["torch"]
    if exp.accelerator == "rocm" and not found["hip"]:
        return [f"torch {torch} is not a ROCm build (torch.version.hip is None)"]
    if exp.accelerator == "cuda" and not found["cuda"]:
        return [f"torch {torch} is not a CUDA build (torch.version.cuda is None)"]
    return []


def _tag_findings(exp: Expectation, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, not checked) of torch's local version tag against the accelerator/release."""
    tag, torch = found["local_tag"], found["torch"]
    if exp.accelerator == "cpu":
        return [], []
    kind = _tag_kind(tag)
    if kind is None:
        return [], [f"torch {torch} has no local version tag: its build was not read from it"]
    if kind == "other":
        return [], [f"torch's local version tag +{tag} names no accelerator"]
    if kind != exp.accelerator:
        return [f"torch {torch} is a {_BUILD_LABEL[kind]} build (+{tag})"], []
    if exp.accelerator == "rocm" and exp.rocm:
        line = tag[len("rocm") :]
        if not line or not starts_with(exp.rocm, line):
            return [f"torch {torch} was built for ROCm {line or '(no version)'}"], []
    return [], []


def _hip_findings(exp: Expectation, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, not checked) of torch.version.hip against the expected HIP major.minor."""
    hip = found["hip"]
    if exp.accelerator != "rocm" or not hip:
        return [], []
    if exp.hip is None:
        why = "envbuilder gives it when its data holds the release's HIP version"
        return [], [f"HIP {hip}: no --expect-hip given ({why})"]
    if not starts_with(hip, exp.hip):
        ships = f" (ROCm {exp.rocm} ships HIP {exp.hip})" if exp.rocm else ""
        return [f"HIP {hip} is not HIP {exp.hip}{ships}"], []
    return [], []


def _gfx_findings(exp: Expectation, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, not checked) of the visible devices against the expected gfx targets."""
    devices = found["devices"]
    if exp.accelerator == "cpu":
        return [], []
    if not devices:
        wanted = f" (expected {', '.join(exp.gfx)})" if exp.gfx else ""
        return [f"no GPU visible{wanted}"], []
    if exp.accelerator != "rocm":
        return [], []
    if not exp.gfx:
        return [], ["GPU targets: none expected (--expect-gfx)"]
    problems = []
    for d in devices:
        label = f"device {d['index']} ({d['name']})"
        if d["gfx"] is None:
            problems.append(f"{label} reports no gfx target")
        elif d["gfx"] not in exp.gfx:
            problems.append(f"{label} is {d['gfx']}, not {' or '.join(exp.gfx)}")
    return problems, []


def _devices_text(exp: Expectation, found: dict[str, Any]) -> str:
    """ "gfx1100 x2" (ROCm, by gfx target), "NVIDIA H200 x1" (by name), or "no GPU"."""
    devices = found["devices"]
    if not devices:
        return "no GPU"
    by_gfx = exp.accelerator == "rocm" or found["build"] == "rocm"
    keys = [str(d["gfx"] if by_gfx and d["gfx"] else d["name"]) for d in devices]
    counted = ", ".join(f"{key} x{n}" for key, n in Counter(keys).items())
    return counted if exp.accelerator != "cpu" else f"{len(devices)} GPU visible ({counted})"


def summary(
    exp: Expectation, found: dict[str, Any], problems: list[str], not_checked: list[str]
) -> str:
    """One line for people: "ROCm 7.14.1 as locked (HIP 7.14.60850, gfx1100 x1)", or why not."""
    parts = [f"HIP {found['hip']}"] if found["hip"] else []
    if found["cuda"]:
        parts.append(f"CUDA {found['cuda']}")
    parts.append(_devices_text(exp, found))
    if exp.accelerator != "rocm":
        text = f"no ROCm expected ({exp.accelerator} env): torch {found['torch']}, "
        text += ", ".join(parts)
    else:
        what = f"ROCm {exp.rocm} as locked" if exp.rocm else "a ROCm build (no release expected)"
        text = f"{'not ' if problems else ''}{what} ({', '.join(parts)})"
    if problems:
        text += ": " + "; ".join(problems)
    if not_checked:
        text += "; not checked: " + "; ".join(not_checked)
    return text


def compare_release(exp: Expectation, facts: dict[str, Any]) -> dict[str, Any]:
    """The release check's findings (details.release of the conformance check): expected, found,
    problems (each fails the check), not_checked (with the reason), and the summary line."""
    found = _found(facts)
    problems = _build_findings(exp, found)
    not_checked: list[str] = []
    # Not the expected kind of build: what its tag says adds nothing.
    parts = (
        (_hip_findings, _gfx_findings)
        if problems
        else (_tag_findings, _hip_findings, _gfx_findings)
    )
    for part in parts:
        bad, unchecked = part(exp, found)
        problems += bad
        not_checked += unchecked
    return {
        "expected": exp.to_json(),
        "found": found,
        "problems": problems,
        "not_checked": not_checked,
        "summary": summary(exp, found, problems, not_checked),
    }

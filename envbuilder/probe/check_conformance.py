"""conformance: the installed distributions equal the pylock's packages.

Expected: every lock package whose marker holds here (PEP 508 markers, evaluated by
`envbuilder.probe.pylock`). Installed: `importlib.metadata.distributions()` on this
interpreter's path; where a name appears twice, the first on the path (the one imports use).
Names are compared canonical (PEP 503), versions in PEP 440 normal form.

Findings: missing (locked, not installed), extra (installed, not locked), wrong version.
The bootstrap rule: pip, setuptools and wheel, which `python -m venv`/ensurepip put into
every venv, are ignored when installed but absent from the lock; when the lock names them,
they are checked like any other package.

The release check (`envbuilder.probe.expectation`) is part of this check, with or without a
lock: torch's build, HIP version and the visible GPUs' gfx targets against --expect and the
--expect-rocm/--expect-hip/--expect-gfx options; its findings are `details.release`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuilder.probe.common import CheckFailed, CheckResult, Context
from envbuilder.probe.expectation import Expectation, compare_release, summary
from envbuilder.probe.pylock import (
    LockedPackage,
    LockReadError,
    MarkerError,
    canonical_name,
    evaluate_marker,
    marker_environment,
    normalize_version,
    read_pylock,
)

BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def installed_distributions() -> tuple[dict[str, str], list[str]]:
    """{canonical name: version} of what is installed, and the names found more than once."""
    found: dict[str, str] = {}
    duplicates: list[str] = []
    for dist in importlib.metadata.distributions():
        raw = dist.metadata["Name"] if dist.metadata else None
        if not raw:
            continue  # a broken .dist-info without metadata: nothing to compare
        name = canonical_name(raw)
        if name in found:
            duplicates.append(name)
            continue
        found[name] = dist.version
    return found, sorted(set(duplicates))


def installed_packages_digest() -> tuple[str, int]:
    """sha256 and count of what is installed here, for the report's fingerprint.

    The hashed text is the sorted `name==version` lines (names canonical, PEP 503; versions as
    the metadata says), each ending in a newline. The bootstrap packages (pip, setuptools,
    wheel) are left out, as conformance ignores them: venvs made by different interpreters
    carry different ones, and they do not change what the checks measure.
    """
    installed, _dups = installed_distributions()
    lines = sorted(f"{n}=={v}" for n, v in installed.items() if n not in BOOTSTRAP)
    text = "".join(line + "\n" for line in lines)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), len(lines)


def compare(lock_path: Path) -> dict[str, Any]:
    """The findings as a dict: missing, extra, wrong_version, ignored, and counts."""
    try:
        packages, lock = read_pylock(lock_path)
    except LockReadError as exc:
        raise CheckFailed(str(exc)) from exc
    expected, not_here, unparsed = _expected_here(packages, marker_environment(lock))
    installed, duplicates = installed_distributions()
    missing = sorted(n for n in expected if n not in installed)
    extra = sorted(n for n in installed if n not in expected and n not in BOOTSTRAP)
    ignored = sorted(n for n in installed if n not in expected and n in BOOTSTRAP)
    wrong = [
        {"name": n, "locked": v, "installed": installed[n]}
        for n, v in sorted(expected.items())
        if n in installed
        and v is not None
        and normalize_version(v) != normalize_version(installed[n])
    ]
    return {
        "lock": str(lock_path),
        "lock_sha256": hashlib.sha256(lock_path.read_bytes()).hexdigest(),
        "locked": len(packages),
        "expected_here": len(expected),
        "installed": len(installed),
        "missing": missing,
        "extra": extra,
        "wrong_version": wrong,
        "ignored_bootstrap": ignored,
        "marker_not_for_here": sorted(not_here),
        "marker_not_understood": unparsed,
        "duplicates": duplicates,
    }


def _expected_here(
    packages: Sequence[LockedPackage], env: Mapping[str, Any]
) -> tuple[dict[str, str | None], list[str], list[str]]:
    """The locked packages whose markers hold here (name -> version), those whose markers do
    not, and the markers that could not be read (their packages count as expected)."""
    expected: dict[str, str | None] = {}
    not_here: list[str] = []
    unparsed: list[str] = []
    for pkg in packages:
        applies = True
        if pkg.marker:
            try:
                applies = evaluate_marker(pkg.marker, env)
            except MarkerError:
                unparsed.append(f"{pkg.name}: {pkg.marker}")  # counted as expected
        if applies:
            expected[pkg.name] = pkg.version
        else:
            not_here.append(pkg.name)
    return expected, not_here, unparsed


def _package_problems(details: dict[str, Any]) -> list[str]:
    """The lock comparison's failures as text: missing, extra, wrong version."""
    problems = []
    if details["missing"]:
        problems.append(f"missing: {', '.join(details['missing'])}")
    if details["extra"]:
        problems.append(f"not in the lock: {', '.join(details['extra'])}")
    if details["wrong_version"]:
        problems.append(
            "wrong version: "
            + ", ".join(
                f"{w['name']} {w['installed']} (locked {w['locked']})"
                for w in details["wrong_version"]
            )
        )
    return problems


def expectation(ctx: Context) -> Expectation:
    """The release check's expectation from the probe's options."""
    return Expectation(ctx.expect, ctx.expect_rocm, ctx.expect_hip, ctx.expect_gfx)


def release_findings(ctx: Context) -> dict[str, Any]:
    """details.release: torch's build and the visible GPUs against the expectation (torch's
    facts as the device check found them when the runner passed them, else asked here)."""
    if ctx.device_facts is not None:
        return compare_release(expectation(ctx), ctx.device_facts)
    try:
        from envbuilder.probe.check_device import torch_facts

        facts = torch_facts()
    except ImportError as exc:
        # No torch here: a failure where a GPU build is expected; on a cpu env (whose lock
        # may hold no torch at all) only a part that was not checked.
        exp = expectation(ctx)
        findings = compare_release(exp, {})
        if exp.accelerator == "cpu":
            findings["problems"] = []
            findings["not_checked"].insert(0, f"torch's build: torch does not import ({exc})")
        else:
            findings["problems"].insert(0, f"torch does not import ({exc})")
        findings["summary"] = summary(
            exp, findings["found"], findings["problems"], findings["not_checked"]
        )
        return findings
    return compare_release(expectation(ctx), facts)


def run(ctx: Context) -> CheckResult:
    """Fail on any missing, extra or wrong-version distribution (with --lock) and on any
    problem of the release check; without --lock only the release check runs (noted)."""
    release = release_findings(ctx)
    details: dict[str, Any] = compare(Path(ctx.lock)) if ctx.lock else {"lock": None}
    details["release"] = release
    problems = _package_problems(details) if ctx.lock else []
    if release["problems"]:
        problems.append("release: " + "; ".join(release["problems"]))
    note = None if ctx.lock else "packages not compared: no --lock PYLOCK given"
    result = CheckResult(details=details, reason=note)
    if problems:
        raise CheckFailed("; ".join(problems), result)
    return result

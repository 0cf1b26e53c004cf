"""Find the Python interpreter a venv target needs: the `py` launcher on Windows, uv elsewhere.

The command lines are pure functions (tested on any OS); `find_python` runs them. Only
interpreters already on the machine are considered: nothing is downloaded, so an offline machine
gives the same answer twice.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuilder.core.errors import EngineError

#: Printed by the found interpreter: its executable and its version, one per line.
_REPORT = "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"
_VERSION = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class FoundPython:
    """An interpreter that was asked for and answered: its path and full version ("3.11.7")."""

    executable: Path
    version: str


def check_version_request(version: str) -> str:
    """`version` if it is "MAJOR.MINOR"; EngineError otherwise (the spec should have said so)."""
    if not _VERSION.match(version):
        raise EngineError(f"Python version {version!r} must be MAJOR.MINOR, e.g. '3.12'")
    return version


def py_launcher_command(version: str) -> list[str]:
    """The Windows `py` launcher line that runs Python `version` and prints where and what it is."""
    return ["py", f"-{check_version_request(version)}", "-c", _REPORT]


def uv_find_command(uv_bin: str, version: str) -> list[str]:
    """uv's interpreter discovery: installed interpreters only (no download), ignoring any
    active virtualenv or project, so the venv's base is a real installation."""
    return [
        uv_bin,
        "python",
        "find",
        "--system",
        "--no-project",
        "--no-python-downloads",
        check_version_request(version),
    ]


def install_hint(version: str, windows: bool) -> str:
    """What a user can do when Python `version` is missing."""
    if windows:
        return (
            f"install Python {version} for Windows (x64) so that `py -{version}` runs it "
            f"(the python.org installer registers it with the py launcher)"
        )
    return (
        f"install Python {version} (your distribution's python{version} package, pyenv, "
        f"or `uv python install {version}`)"
    )


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    from envbuilder.core import interrupts

    try:  # in its own process group, ended with envbuilder when interrupted
        return interrupts.run(cmd, timeout=120)
    except FileNotFoundError as exc:
        raise EngineError(f"cannot run {cmd[0]!r}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{' '.join(cmd)} did not answer within 120 s") from exc


def parse_report(stdout: str, version: str) -> FoundPython:
    """Read what `_REPORT` printed; EngineError when it is not Python `version`."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) < 2:
        raise EngineError(f"the interpreter for Python {version} printed no version: {stdout!r}")
    exe, full = lines[-2], lines[-1]
    if full.rsplit(".", 1)[0] != version:
        raise EngineError(f"asked for Python {version} but the interpreter at {exe} is {full}")
    return FoundPython(Path(exe), full)


def uv_bin() -> str:
    """The uv executable shipped with the `uv` dependency."""
    import uv  # local import: only the venv targets need it

    return str(uv.find_uv_bin())


def find_python(version: str, *, windows: bool) -> FoundPython:
    """The interpreter for Python `version` ("3.12"). Raises EngineError naming the version and
    how to install it when there is none."""
    hint = install_hint(version, windows)
    if windows:
        try:
            proc = _run(py_launcher_command(version))
        except EngineError as exc:
            raise EngineError(
                f"Python {version} not found: the py launcher is missing ({exc}); {hint}"
            ) from exc
        if proc.returncode != 0:
            raise EngineError(
                f"Python {version} not found by the py launcher "
                f"({proc.stderr.strip() or proc.stdout.strip()}); {hint}"
            )
        return parse_report(proc.stdout, version)
    proc = _run(uv_find_command(uv_bin(), version))
    if proc.returncode != 0 or not proc.stdout.strip():
        raise EngineError(
            f"Python {version} not found on this machine (uv python find: "
            f"{_last_line(proc.stderr)}); {hint}"
        )
    exe = proc.stdout.strip().splitlines()[-1]
    return parse_report(_run([exe, "-c", _REPORT]).stdout, version)


def _last_line(text: str) -> str:
    """uv's own `error:` line when there is one (warnings come first), else the last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[0 if errors else -1]

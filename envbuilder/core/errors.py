"""One exception tree. Only the CLI turns these into messages and exit codes.

Raise a subclass of `EnvbuilderError` for anything the user can fix (a bad spec, a missing
engine, a refused push). Its message must say what is wrong, where (file and key when there
is one) and what would be right. Programming errors stay ordinary exceptions and tracebacks.
"""

from __future__ import annotations


class EnvbuilderError(Exception):
    """Base of every error envbuilder reports to a user. `exit_code` is what the CLI returns."""

    exit_code: int = 1


class UsageError(EnvbuilderError):
    """Bad command-line use (unknown env name, conflicting flags)."""

    exit_code = 2


class SpecError(EnvbuilderError):
    """environments.toml cannot be loaded or holds errors."""


class CompatDataError(EnvbuilderError):
    """The shipped compatibility data is malformed (a bug in envbuilder, reported plainly)."""


class LockError(EnvbuilderError):
    """A lock file is missing, stale, malformed, or cannot be produced."""


class RenderError(EnvbuilderError):
    """Rendering failed or rendered files are stale."""


class BuildError(EnvbuilderError):
    """Building an artifact (image, .wsl, venv) failed."""


class EngineError(EnvbuilderError):
    """An engine (Docker, wsl.exe, a Python interpreter) is missing or refused a request."""


class RegistryError(EngineError):
    """A registry refused a push or pull, or returned an unexpected digest."""


class ValidationError(EnvbuilderError):
    """Validation could not run, or its report could not be read."""


class CompareError(EnvbuilderError):
    """Reports cannot be compared (schema version, missing metrics, bad values)."""


class CommandNotFoundError(EngineError):
    """`envbuilder run`/`shell`: the program to start is not there (exit 127, as a shell's)."""

    exit_code = 127


def output_tail(text: str, lines: int, indent: str = "") -> str:
    """The last `lines` lines of a tool's output (blank lines at either end dropped), each
    prefixed with `indent`: what an error message quotes of what uv, apt, pip or docker said."""
    return "\n".join(indent + line for line in text.strip().splitlines()[-lines:])

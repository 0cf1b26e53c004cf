"""The `envbuilder` command line: parse arguments, call one module, turn errors into exit codes.

Each subcommand lives in `envbuilder/commands/<name>.py` and exposes:

    HELP: str                                   one line for `envbuilder --help`
    DESCRIPTION: str                            the longer text for `envbuilder NAME --help`
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace, ui: envbuilder.core.ui.UI) -> int

and is listed in COMMANDS below with the same HELP (tests/commands/test_cli.py holds the two
together).
Only the command that runs is imported: the others' modules pull in docker, jinja2, rich and
more, which would double the start-up of a quick command such as `envbuilder lock` with nothing
to do. `envbuilder --help` imports none of them.

Options every command takes, before or after its name: -q/--quiet (no progress or status
lines), -v/--verbose (more: which spec file a command found by walking up from the current
folder). Commands that print results take --json (compare and probe: --json -): one JSON
object on stdout (see docs/cli.md).

Exit codes: 0 ok, 1 findings or a failed operation, 2 usage, 130 interrupted (SIGINT, Ctrl-C),
143 terminated (SIGTERM). An interrupt prints one line and no traceback; temp files and folders
are removed and child processes ended on the way out (envbuilder.core.interrupts). The console
script's entry point is envbuilder.__main__.entry, which handles signals from its first moment.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envbuilder import DISTRIBUTION, __version__
from envbuilder.commands._options import refuse_empty_values
from envbuilder.core import interrupts
from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.fsutil import lock_waits_told_to, os_failure
from envbuilder.core.project import SPEC_NAME, find_spec
from envbuilder.core.redact import redact
from envbuilder.core.ui import COLOR_CHOICES, UI

if TYPE_CHECKING:
    from typing import NoReturn

    from envbuilder.core.journal import Scope
    from envbuilder.core.project import Project

#: Every command with its one-line help, in `--help` order (the data flow first, then the
#: helpers). Each module's HELP must equal its line here.
COMMANDS: dict[str, str] = {
    "init": "write a starter environments.toml for this host's GPU (or --gpu/--os); never "
    "overwrites",
    "check": "check environments.toml: errors exit 1, warnings are printed",
    "lock": "resolve envs into lockfiles/ (PEP 751 pylocks + base image digests); --check verifies",
    "render": "render Dockerfiles, WSL rootfs files and Windows scripts; --check verifies them",
    "build": "build the locked, rendered envs for a target (docker image, .wsl, venv)",
    "push": "push built images (docker, wsl2) to a registry; records the repository digest in "
    "the lock",
    "pull": "pull the pushed images (docker, wsl2) the lock records, by digest (refuses a "
    "mismatch)",
    "validate": "run the validation probe inside built envs; writes reports/<env>.<target>.json",
    "compare": "compare validation reports: ratios, loss %, spread over repeats, noise verdicts",
    "fleet": "the fleet report of a cluster validation: one row per node, outliers, collectives",
    "run": "run a command in an env's built artifact with the devices validate gives the probe",
    "shell": "open an interactive shell in an env's built artifact (what `run` runs, without CMD)",
    "probe": "run the validation suite (the probe) in this environment",
    "doctor": "check this host (OS, RAM, disk, Docker, GPU devices, drivers, WSL, Python) for "
    "an env",
    "explain": "explain a known ROCm/PyTorch error message: cause, fix, sources",
    "completion": "print the bash, zsh or fish tab-completion script (argcomplete) for envbuilder",
}

#: The order of `envbuilder --help` (kept for callers of the earlier API).
ORDER = list(COMMANDS)

COLOR_HELP = (
    "colour warnings, errors and tables: auto (a terminal; NO_COLOR turns it off, FORCE_COLOR "
    "on), always, never (also after the command's name)"
)
QUIET_HELP = "no progress or status lines on stderr (also after the command's name)"
VERBOSE_HELP = "say more on stderr: which spec file was used (also after the command's name)"


class CommandLineError(SystemExit):
    """A command line that does not parse: exit 2, as argparse's own error exits, with the
    message kept for the JSON error object of a --json run."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(2)
        self.message = f"{prog}: {message}"


class _Parser(argparse.ArgumentParser):
    """argparse's parser (and its subcommands'), whose usage error raises CommandLineError
    after printing what argparse prints (the usage and `PROG: error: MESSAGE` on stderr)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise CommandLineError(self.prog, message)


def json_asked(words: Sequence[str]) -> bool:
    """Whether a command line that did not parse asked for JSON: a `--json` before any `--`
    (compare and probe, whose --json takes a file: `--json -`)."""
    command = requested_command(words)
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == "--json=-":
            return True
        if word == "--json":
            follows = words[i + 1] if i + 1 < len(words) else None
            return follows == "-" or command not in ("compare", "probe")
    return False


def command_module(name: str) -> ModuleType:
    """The module of command `name` (imported now)."""
    return importlib.import_module(f"envbuilder.commands.{name}")


def _command_modules() -> list[tuple[str, ModuleType]]:
    """Every command module in envbuilder/commands/ (imports them all: for tests and docs),
    those in COMMANDS first, in its order."""
    import pkgutil

    from envbuilder import commands

    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return [(n, command_module(n)) for n in names]


def build_parser(load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser: every command listed with its HELP; the arguments and description of the
    commands in `load` (default: all, which imports every command module)."""
    loaded = set(COMMANDS if load is None else load)
    parser = _Parser(
        prog="envbuilder",
        description=(
            "Reproducible, validated deep-learning environments for AMD GPUs. One spec "
            "(environments.toml) -> checked -> locked -> rendered for WSL2, Docker and native "
            "venvs -> built -> validated by the same probe -> compared."
        ),
        epilog="Exit codes: 0 ok, 1 findings or failure, 2 usage error, 130 interrupted "
        "(Ctrl-C), 143 terminated (SIGTERM). --json: one JSON object on stdout.",
    )
    # The distribution in the line: `envbuilder` is also the name of unrelated tools.
    parser.add_argument(
        "-V", "--version", action="version", version=f"envbuilder {__version__} ({DISTRIBUTION})"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--color", choices=COLOR_CHOICES, default="auto", help=COLOR_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_line in COMMANDS.items():
        # argparse %-formats help strings; a literal "%" in a HELP must not crash --help.
        p = sub.add_parser(
            name,
            help=help_line.replace("%", "%%"),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # SUPPRESS: without -q here, the value given before the command name stays.
        p.add_argument(
            "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP
        )
        p.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )
        p.add_argument("--color", choices=COLOR_CHOICES, default=argparse.SUPPRESS, help=COLOR_HELP)
        if name in loaded:
            _load_command(p, name)
    return parser


def _load_command(parser: argparse.ArgumentParser, name: str) -> None:
    module = command_module(name)
    parser.description = getattr(module, "DESCRIPTION", module.HELP)
    module.add_arguments(parser)
    refuse_empty_values(parser)
    parser.set_defaults(_module=module)


def requested_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option or --color's value (the
    other options before the command, -q, -v, -h and --version, take no value)."""
    words = iter(argv)
    for word in words:
        if word == "--color":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def wants_json(args: argparse.Namespace | None) -> bool:
    """Whether the command line asked for JSON on stdout: --json, or --json - where --json
    takes a file (compare, probe)."""
    value: Any = getattr(args, "json", None)
    return value is True or (isinstance(value, str | Path) and str(value) == "-")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Returns the exit code. SIGINT and SIGTERM are handled while it runs
    (the previous handlers are restored afterwards)."""
    if "_ARGCOMPLETE" in os.environ:  # a Tab of the completion script (envbuilder completion)
        from envbuilder.commands.completion import complete, completed_command

        # Only the command on the line is loaded, as for a run: a Tab stays a quick start.
        command = completed_command(os.environ, COMMANDS)
        complete(build_parser([command] if command else []))  # argcomplete answers and exits
    restore = interrupts.install()
    args: argparse.Namespace | None = None
    ui: UI | None = None
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parse(words)
        ui = UI(quiet=args.quiet, json=wants_json(args), verbose=args.verbose, color=args.color)
        _find_spec(args, ui)
        with lock_waits_told_to(ui.warn):  # said even with --quiet: a wait is not progress
            _finish_interrupted_writes(args, ui)
            return int(args._module.run(args, ui))
    except EnvbuilderError as exc:
        return _failed(ui or UI(), args, exc)
    except OSError as exc:  # the disk or file system failed where no step said more (ENOSPC, EIO)
        return _failed(ui or UI(), args, os_failure(exc))
    except KeyboardInterrupt as exc:
        sys.stderr.write(interrupts.message(exc) + "\n")
        code = interrupts.exit_code(exc)
        if ui is not None:
            _json_error(ui, args, "Interrupted", interrupts.message(exc), code)
        return code
    finally:
        restore()


def _failed(ui: UI, args: argparse.Namespace | None, exc: EnvbuilderError) -> int:
    """Say the error (and under --json give its object); its exit code."""
    ui.error(str(exc))
    _json_error(ui, args, type(exc).__name__, str(exc), exc.exit_code)
    return exc.exit_code


def _parse(words: list[str]) -> argparse.Namespace:
    """The parsed command line. One that does not parse exits 2 as argparse's does; under
    --json it also gives the error object on stdout (docs/cli.md)."""
    command = requested_command(words)
    try:
        return build_parser([command] if command in COMMANDS else []).parse_args(words)
    except CommandLineError as exc:
        if json_asked(words):
            error = {"kind": "UsageError", "message": redact(exc.message), "exit_code": 2}
            known = command if command in COMMANDS else None
            UI(json=True).json({"command": known, "ok": False, "error": error})
        raise


def _json_error(
    ui: UI, args: argparse.Namespace | None, kind: str, message: str, code: int
) -> None:
    """With --json, an error also gives the one JSON object on stdout, unless the command
    already wrote its result."""
    if not wants_json(args) or ui.json_written:
        return
    ui.json(
        {
            "command": getattr(args, "command", None),
            "ok": False,
            "error": {"kind": kind, "message": redact(message), "exit_code": code},
        }
    )


#: Commands that only read: they never finish or undo an interrupted write (a journal found in a
#: checkout proves nothing by being there); they report it and name the command that finishes it.
READ_ONLY = frozenset(
    {
        "check",
        "doctor",
        "fleet",
        "compare",
        "explain",
        "probe",
        "run",
        "shell",
        "completion",
        "init",
    }
)


#: Commands that write into the project's data folders (reports/, .envbuilder/, dist/): each must
#: be a real folder or absent (envbuilder.core.datafolders).
DATA_WRITERS = frozenset({"build", "validate", "push", "pull"})


def _find_spec(args: argparse.Namespace, ui: UI) -> None:
    """--spec not given: the spec found by walking up from the current folder (project.find_spec;
    ./environments.toml when no folder has one, so the command says it is missing)."""
    if getattr(args, "spec", False) is not None:
        return  # no --spec option, or one given
    found = find_spec(Path.cwd())
    args.spec = Path(os.path.relpath(found)) if found is not None else Path(SPEC_NAME)
    ui.detail(
        f"spec: {found} (found from {Path.cwd()})"
        if found is not None
        else f"spec: no {SPEC_NAME} in {Path.cwd()} or any folder above it"
    )


def _finish_interrupted_writes(args: argparse.Namespace, ui: UI) -> None:
    """A commit of several files (lockfiles/, rendered files) that a crash or SIGKILL cut short
    is finished (or, before its commit point, undone) before anything reads those files, by
    every command that writes; one that only reads (READ_ONLY, or --check) reports it.
    envbuilder.core.journal says how a journal is proven to be envbuilder's own."""
    spec = getattr(args, "spec", None)
    if not isinstance(spec, (str, Path)):  # --spec is a Path (path_value), or absent
        return
    from envbuilder.core import journal, journalfile, receipts
    from envbuilder.core.datafolders import check_data_folders
    from envbuilder.core.project import Project

    project = Project.from_spec(spec)
    roots = [root for root in (project.root, project.lockfiles) if journalfile.left_over(root)]
    read_only = args.command in READ_ONLY or getattr(args, "check", False) is True
    if not read_only:
        receipts.ready_state_dir()  # a state folder that cannot hold receipts: said before work
        if args.command in DATA_WRITERS:
            check_data_folders(project.root)  # a link there refused before anything is written
        receipts.drop_orphan_receipts()
        _sweep_stale_work(project, ui)
    for root in roots:
        scope = _journal_scope(project, root)
        if read_only:
            if note := journal.pending(root, scope):
                ui.warn(note)
        elif note := journal.recover(root, scope):
            ui.warn(note)


def _sweep_stale_work(project: Project, ui: UI) -> None:
    """Work folders a killed lock or build left (envbuilder.core.stale removes only those it can
    prove are this user's and dead: no process, nor a uv it started, holds them)."""
    import tempfile

    from envbuilder.core import stale

    stale.sweep(Path(tempfile.gettempdir()), "envbuilder-lock-", ui.warn)
    stale.sweep(project.cache, "venv-wheelhouse-", ui.warn)


def _journal_scope(project: Project, root: Path) -> Scope:
    """What the command that writes `root` may touch there (imported only when a journal is
    left: render pulls in jinja2)."""
    if root == project.lockfiles:
        from envbuilder.lock.lockfile import LOCKFILES_SCOPE

        return LOCKFILES_SCOPE
    from envbuilder.builders.render import commit_scope
    from envbuilder.commands.render import EXTRAS

    return commit_scope(project, EXTRAS)


if __name__ == "__main__":  # `python -m envbuilder` is the entry point; main() handles signals too
    sys.exit(main())

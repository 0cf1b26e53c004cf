"""The `envbuilder` command line: parse arguments, call one module, turn errors into exit codes.

Each subcommand lives in `envbuilder/commands/<name>.py` and exposes:

    HELP: str                                   one line for `envbuilder --help`
    DESCRIPTION: str                            the longer text for `envbuilder NAME --help`
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace, ui: envbuilder.ui.UI) -> int

Commands are discovered from that package, so adding one touches no other file. Exit codes:
0 ok, 1 findings or a failed operation, 2 usage, 130 interrupted (SIGINT, Ctrl-C), 143
terminated (SIGTERM). An interrupt prints one line and no traceback; temp files and folders are
removed and child processes ended on the way out (envbuilder.interrupts). The console script's
entry point is envbuilder.__main__.entry, which handles signals from its first moment.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from envbuilder import __version__, commands, interrupts
from envbuilder.errors import EnvbuilderError
from envbuilder.fsutil import recover
from envbuilder.project import Project
from envbuilder.ui import UI

#: Order in `--help`: the data flow first, then the helpers. Unlisted commands sort after these.
ORDER = ["check", "lock", "render", "build", "push", "pull", "validate", "compare", "probe",
         "doctor", "explain"]


def _command_modules() -> list[tuple[str, ModuleType]]:
    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return [(n, importlib.import_module(f"envbuilder.commands.{n}")) for n in names]


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command that reads the spec shares."""
    parser.add_argument(
        "--spec", default="environments.toml", metavar="PATH",
        help="the spec file (default: ./environments.toml); outputs go beside it",
    )


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with one subparser per discovered command."""
    parser = argparse.ArgumentParser(
        prog="envbuilder",
        description=(
            "Reproducible, validated deep-learning environments for AMD GPUs. One spec "
            "(environments.toml) -> checked -> locked -> rendered for WSL2, Docker and native "
            "venvs -> built -> validated by the same probe -> compared."
        ),
        epilog="Exit codes: 0 ok, 1 findings or failure, 2 usage error, 130 interrupted "
               "(Ctrl-C), 143 terminated (SIGTERM).",
    )
    parser.add_argument("--version", action="version", version=f"envbuilder {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _command_modules():
        p = sub.add_parser(
            # argparse %-formats help strings; a literal "%" in a HELP must not crash --help.
            name, help=module.HELP.replace("%", "%%"),
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Returns the exit code. SIGINT and SIGTERM are handled while it runs
    (the previous handlers are restored afterwards)."""
    restore = interrupts.install()
    ui: UI | None = None
    try:
        args = build_parser().parse_args(argv)
        ui = UI(quiet=args.quiet)
        _finish_interrupted_writes(args, ui)
        return int(args._module.run(args, ui))
    except EnvbuilderError as exc:
        (ui or UI()).error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as exc:
        sys.stderr.write(interrupts.message(exc) + "\n")
        return interrupts.exit_code(exc)
    finally:
        restore()


def _finish_interrupted_writes(args: argparse.Namespace, ui: UI) -> None:
    """A commit of several files (lockfiles/, rendered files) that a crash or SIGKILL cut short
    is finished (or, before its commit point, undone) before anything reads those files."""
    spec = getattr(args, "spec", None)
    if not isinstance(spec, str):
        return
    project = Project.from_spec(spec)
    for root in (project.root, project.lockfiles):
        if note := recover(root):
            ui.warn(note)


if __name__ == "__main__":  # `python -m envbuilder` is the entry point; main() handles signals too
    sys.exit(main())

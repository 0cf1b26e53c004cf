"""The entry point of the `envbuilder` console script and of `python -m envbuilder`.

The interrupt handlers go in before anything heavy is imported: importing the commands takes
about half a second, and a Ctrl-C or SIGTERM then must end like one at any later moment (one
line, exit 130 or 143, no traceback). Only `envbuilder.core.interrupts` (standard library only) is
imported before that.
"""

from __future__ import annotations

import sys

from envbuilder.core import interrupts

TYPE_CHECKING = False  # typing's own flag costs an import of typing (~15 ms) at start-up
if TYPE_CHECKING:
    from typing import NoReturn


def entry() -> NoReturn:
    """Install the handlers, import and run the CLI, exit with its code."""
    try:
        try:
            # inside the try: a signal can land while install() itself still runs (seen: a
            # SIGTERM between installing the handler and signal.signal's return)
            interrupts.install()
            from envbuilder.commands._cli import main

            if (lost := interrupts.swallowed()) is not None:
                raise lost  # raised during the imports where Python dropped it
            code = main()
            if (lost := interrupts.swallowed()) is not None:
                raise lost  # dropped during the command, which then ran to its end
        finally:
            interrupts.ignore_further()  # the work is done; exiting is not interrupted
    except KeyboardInterrupt as exc:  # before main() took over: installing, importing
        sys.stderr.write(interrupts.message(exc) + "\n")
        code = interrupts.exit_code(exc)
    sys.exit(code)


if __name__ == "__main__":
    entry()

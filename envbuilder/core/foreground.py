"""Run a user's command in the foreground: on this terminal, with this stdin, its exit code ours.

`envbuilder run` and `shell` hand the terminal to the command they start (docker run, wsl.exe, a
venv's program), unlike every other child envbuilder starts (envbuilder.core.interrupts puts those
in a session of their own, with their output captured). So here:

* the child stays in envbuilder's process group: the terminal's Ctrl-C reaches it directly, and
  an interactive shell can read the terminal (a background group would be stopped, SIGTTIN);
* while it runs, envbuilder itself does nothing on SIGINT (the child decides, as a shell's
  child does) and passes SIGTERM and SIGHUP on to it;
* the result is the child's exit code, or 128 + N when a signal N ended it (a shell's `$?`).

The handlers set here are Python functions, not SIG_IGN: a handler is reset to the default in
the child at exec, an ignored signal would stay ignored there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from envbuilder.core.errors import CommandNotFoundError


def exit_status(returncode: int) -> int:
    """A Popen returncode as a shell reports it: 128 + N for a child ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_foreground(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run `argv` attached to this terminal and return its exit status (exit_status). Raises
    CommandNotFoundError when its program is not there (nothing ran)."""
    if sys.platform == "win32":  # no process groups or POSIX signals to arrange
        return _start_and_wait(argv, env, lambda proc: None)
    forwarded = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *forwarded)}
    child: list[subprocess.Popen[bytes]] = []

    def pass_on(signum: int, frame: FrameType | None) -> None:
        if child and child[0].poll() is None:
            child[0].send_signal(signum)

    def ignore(signum: int, frame: FrameType | None) -> None:
        return None

    signal.signal(signal.SIGINT, ignore)
    for sig in forwarded:
        signal.signal(sig, pass_on)
    try:
        return _start_and_wait(argv, env, child.append)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_and_wait(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    started: Callable[[subprocess.Popen[bytes]], None],
) -> int:
    try:
        proc = subprocess.Popen(list(argv), env=dict(env) if env is not None else None)
    except FileNotFoundError:
        raise CommandNotFoundError(f"cannot run {argv[0]}: no such program (on PATH)") from None
    except PermissionError as exc:
        raise CommandNotFoundError(f"cannot run {argv[0]}: {exc.strerror}") from None
    started(proc)
    while True:
        try:
            return exit_status(proc.wait())
        except InterruptedError:  # a signal handler ran; keep waiting for the child
            continue


def is_terminal_session() -> bool:
    """Whether stdin and stdout are both a terminal (a container then gets one: docker -t)."""
    try:
        return os.isatty(0) and os.isatty(1)
    except OSError:
        return False

"""Ctrl-C and SIGTERM at any moment: unwind cleanly, finish critical steps, leave no children.

Why this module exists: a signal can arrive between any two bytecodes. The CLI installs
`install()` first thing (before its heavy imports), after which
  * SIGINT and SIGTERM both raise `Interrupted` (a KeyboardInterrupt), so every `finally` and
    context manager runs: temp folders are removed, half-written files deleted;
  * code whose steps belong together (a commit's renames, creating a temp folder and keeping its
    name) runs inside `deferred()`: a signal received there is raised when the section ends;
  * after the first signal further ones are ignored, so that the clean-up is not cut short
    (SIGKILL still ends everything; a journal makes that safe too, see journal.commit_files);
  * `run()` starts each child process in its own session (its own process group): a terminal's
    Ctrl-C reaches envbuilder only, and when envbuilder is interrupted the child's whole group
    (uv and whatever uv started) is terminated and reaped before the exception goes on.

The console script imports this module before anything else, so that a signal during the
half second of imports is handled too: hence few, light imports at the top (subprocess is
imported where a child is started).
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # typing's own flag costs an import of typing (~15 ms) at start-up
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from types import FrameType, TracebackType

#: The signals that interrupt envbuilder.
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: How long an interrupted child group gets to exit on SIGTERM before it is killed.
CHILD_GRACE_S = 2.0


class Interrupted(KeyboardInterrupt):
    """Raised by the handler for SIGINT or SIGTERM. `exit_code` is 128 + the signal number
    (130 for SIGINT, 143 for SIGTERM), as shells report a process ended by that signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """The exit code for an interrupt: 128 + signal (a plain KeyboardInterrupt counts as SIGINT).
    Asking for it is what handling an interrupt means here (see `swallowed`)."""
    _state.delivered = True
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


def message(exc: KeyboardInterrupt) -> str:
    """The one line the CLI prints for an interrupt."""
    if isinstance(exc, Interrupted) and exc.signum != signal.SIGINT:
        return f"interrupted ({signal.Signals(exc.signum).name})"
    return "interrupted"


class _State:
    def __init__(self) -> None:
        self.depth = 0  # nesting of deferred() sections in the main thread
        self.pending: int | None = None  # a signal received inside a deferred section
        self.fired = False  # an Interrupted was raised; later signals are ignored
        self.signum: int | None = None  # the signal that raised it
        self.delivered = False  # its exit code was asked for: someone handled it


_state = _State()


def _in_main_thread() -> bool:
    import threading  # here, not at the top: see the module's docstring

    return threading.current_thread() is threading.main_thread()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.fired:
        return  # the clean-up of the first interrupt runs to its end
    if _state.depth > 0:
        if _state.pending is None:
            _state.pending = signum
        return
    _state.fired, _state.signum = True, signum
    raise Interrupted(signum)


def install() -> Callable[[], None]:
    """Make SIGINT and SIGTERM raise `Interrupted` (main thread only; a signal the parent set to
    be ignored stays ignored). Returns a function that restores the previous handlers."""
    previous: dict[int, Callable[[int, FrameType | None], object] | int] = {}
    # reset before any handler is in: one that fires during the loop below must stay recorded
    _state.fired, _state.pending, _state.signum, _state.delivered = False, None, None, False
    for signum in SIGNALS:
        old = signal.getsignal(signum)
        if old == signal.SIG_IGN:
            continue
        try:
            signal.signal(signum, _handler)
        except ValueError:  # not the main thread (where Python runs signal handlers)
            return lambda: None
        if old is not None:  # None: a handler not installed from Python, nothing to restore
            previous[signum] = old

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


def swallowed() -> Interrupted | None:
    """The interrupt the handler raised where Python drops exceptions, or None. Python runs a
    signal handler between any two bytecodes, also in a weakref callback or a `__del__`, where
    an exception is printed as "Exception ignored" and lost (seen: a SIGINT inside importlib's
    module-lock callback; the render then ran to its end and exited 0). The entry point asks
    after the imports and after the command: a raised interrupt nobody handled is raised (or
    reported) again there."""
    if _state.fired and not _state.delivered and _state.signum is not None:
        return Interrupted(_state.signum)
    return None


def ignore_further() -> None:
    """From now on SIGINT and SIGTERM (while the handlers are installed) do nothing: the process
    is exiting, and an exception raised during the interpreter's shutdown would print a
    traceback."""
    _state.fired = True


class deferred:  # lower case: used like a function, `with deferred():`
    """Run the block to its end even when a signal arrives; the signal is raised after it.

    Effective in the main thread under `install()` (Python runs signal handlers there); a no-op
    elsewhere. Keep such blocks short: renames, creating and removing a temp folder. (A class,
    not contextlib: this module avoids imports, see its docstring.)"""

    def __enter__(self) -> None:
        self.active = _in_main_thread()
        if self.active:
            _state.depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.active:
            return
        _state.depth -= 1
        if _state.depth == 0 and _state.pending is not None and not _state.fired:
            signum, _state.pending = _state.pending, None
            _state.fired = True
            raise Interrupted(signum)


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, capture_output=True, text=True)` with the child in a new session
    (stdin /dev/null). On any exception while it runs (an interrupt, the timeout) the child's
    whole process group is terminated and reaped, then the exception goes on. Raises what
    subprocess.run raises (FileNotFoundError, subprocess.TimeoutExpired). `pass_fds`: open
    files the child inherits (POSIX), e.g. a lock it must go on holding if envbuilder is
    killed (envbuilder.core.stale)."""
    import subprocess

    proc: subprocess.Popen[str] | None = None
    try:
        with deferred():  # the child's pid is known before an interrupt can unwind
            proc = _start(cmd, cwd, env, pass_fds)
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        if proc is not None:
            with deferred():
                _end_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _start(
    cmd: Sequence[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[str]:
    import subprocess

    environ = dict(env) if env is not None else None
    if sys.platform == "win32":
        return subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=environ,
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            creationflags=subprocess.CREATE_NEW_PROCESS_GROUP,
        )
    return subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=environ,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )


def _end_group(proc: subprocess.Popen[str]) -> None:
    """Terminate the child's process group, kill what is left after a grace period, reap the
    child and close its pipes.

    The child is left unreaped (WNOWAIT) until its group was sent SIGKILL: while it is a zombie
    its pid (= the group's id) cannot be given to another process, so the signal reaches only
    processes of this group."""
    import time

    if sys.platform == "win32":
        proc.kill()  # no process groups to signal; the child itself is ended
    elif proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + CHILD_GRACE_S
        while time.monotonic() < deadline and not _exited(proc.pid):
            time.sleep(0.01)
        _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


if sys.platform != "win32":

    def _signal_group(pgid: int, signum: int) -> None:
        import contextlib

        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
            os.killpg(pgid, signum)

    def _exited(pid: int) -> bool:
        """Whether the child `pid` has exited, without reaping it."""
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

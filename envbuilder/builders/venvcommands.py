"""What a venv build runs and what a user pastes: the venv's layout, the uv and probe command
lines, the environment they run in, the package differences a sync makes, and the lines `run
--print` gives."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from packaging.utils import canonicalize_name

from envbuilder.builders.proberun import probe_options
from envbuilder.builders.venvfolder import MARKER
from envbuilder.core import interrupts
from envbuilder.core.errors import BuildError
from envbuilder.core.model import EnvSpec
from envbuilder.core.quoting import ps_quote, sh_command, sh_word
from envbuilder.targets.base import ValidateOptions

#: Run by the venv's Python: its version and the installed distributions (what sync produced),
#: and its prefixes (a folder whose bin/python is not a venv's must never be synced).
STATE_SCRIPT = (
    "import json, sys, importlib.metadata as m\n"
    "pk = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n: pk[n] = d.version\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': pk,\n"
    "                  'prefix': sys.prefix, 'base_prefix': sys.base_prefix}))\n"
)


@dataclass(frozen=True)
class VenvLayout:
    """Where things are inside a venv; pure paths, so the Windows layout is testable anywhere."""

    root: PurePath
    windows: bool

    @property
    def scripts(self) -> PurePath:
        return self.root / ("Scripts" if self.windows else "bin")

    @property
    def python(self) -> PurePath:
        return self.scripts / ("python.exe" if self.windows else "python")

    @property
    def marker(self) -> PurePath:
        return self.root / MARKER


def uv_venv_command(uv: str, python: str, venv: PurePath, prompt: str) -> list[str]:
    """Create a venv (no pip, setuptools or wheel in it: it holds the lock and nothing else).

    `--allow-existing`: the folder already holds envbuilder's "incomplete" marker (written before
    the venv is made, so an interrupted build leaves a folder the next build recognises); uv keeps
    it. Never `--clear`, which removes whatever the folder holds."""
    return [
        uv,
        "venv",
        "--no-project",
        "--allow-existing",
        "--python",
        python,
        "--prompt",
        prompt,
        str(venv),
    ]


def uv_venv_environment() -> dict[str, str]:
    """The environment for `uv venv`: without UV_VENV_CLEAR, which would make uv delete what an
    existing folder holds (envbuilder empties a folder only after checking it is its own)."""
    return {k: v for k, v in os.environ.items() if k != "UV_VENV_CLEAR"}


def uv_sync_command(
    uv: str, venv_python: PurePath, requirements: PurePath, find_links: PurePath | None = None
) -> list[str]:
    """Make the venv hold exactly `requirements` (local files with hashes): offline, no index,
    every artifact's sha256 checked.

    `find_links`: the wheelhouse, so that uv's isolated build of a locked sdist (the pip SDK's
    `rocm`) finds its build backend among the locked wheels (`envbuilder lock` checked it is
    there); with wheels only it changes nothing.

    `--no-cache`: the wheels sit in a fresh wheelhouse folder each build, so uv's cache would
    key every build's torch anew and keep one more unpacked copy (~0.7 GB) each time (seen
    here: 30 copies, 21 GB). envbuilder's own wheel cache already keeps the downloads."""
    links = ["--find-links", str(find_links)] if find_links is not None else []
    return [
        uv,
        "pip",
        "sync",
        "--python",
        str(venv_python),
        "--offline",
        "--no-index",
        *links,
        "--require-hashes",
        "--no-cache",
        str(requirements),
    ]


def probe_command(
    venv_python: PurePath,
    zipapp: PurePath,
    pylock: PurePath,
    report: PurePath,
    env: EnvSpec,
    target: str,
    options: ValidateOptions,
) -> list[str]:
    """The probe's command line, run with the venv's Python (probe contract in the brief)."""
    return [
        str(venv_python),
        str(zipapp),
        *probe_options(env, options, {"env": env.name, "target": target}),
        "--lock",
        str(pylock),
        "--json",
        str(report),
    ]


def package_diff(installed: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Human lines for every difference: extra, missing, other version ([] when equal)."""
    inst = {canonicalize_name(k): v for k, v in installed.items()}
    want = {canonicalize_name(k): v for k, v in expected.items()}
    out = [f"extra: {n}=={inst[n]}" for n in sorted(inst.keys() - want.keys())]
    out += [f"missing: {n}=={want[n]}" for n in sorted(want.keys() - inst.keys())]
    out += [
        f"other version: {n}=={inst[n]} (lock: {want[n]})"
        for n in sorted(inst.keys() & want.keys())
        if inst[n] != want[n]
    ]
    return out


def sync_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What a sync did, one short item per package: "+name==v", "-name==v", "name a -> b"."""
    old = {canonicalize_name(k): v for k, v in before.items()}
    new = {canonicalize_name(k): v for k, v in after.items()}
    out = [f"+{n}=={new[n]}" for n in sorted(new.keys() - old.keys())]
    out += [f"-{n}=={old[n]}" for n in sorted(old.keys() - new.keys())]
    out += [
        f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]
    ]
    return out


def run_tool(
    cmd: Sequence[str],
    what: str,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess[str]:
    try:  # in its own process group, ended with envbuilder when interrupted
        return interrupts.run(cmd, env=env, timeout=timeout, pass_fds=pass_fds)
    except FileNotFoundError as exc:
        raise BuildError(f"{what}: cannot run {cmd[0]}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what}: no answer within {timeout} s") from exc


def user_shell(windows: bool) -> str:
    """The interactive shell `envbuilder shell` starts in a venv: $SHELL (POSIX; /bin/sh
    without it), PowerShell on Windows."""
    if windows:
        return "powershell.exe"
    return os.environ.get("SHELL") or "/bin/sh"


def activation_line(scripts: PurePath, command: Sequence[str], windows: bool) -> str:
    """What a user pastes to do what `envbuilder run` does in a venv: source its activate
    script (which sets the env's variables too), then run `command` (nothing when empty).
    The native target's `run --print` gives posix_run_line instead (the activate script is
    bash's and zsh's, not POSIX sh's)."""
    if windows:
        line = f"& {ps_quote(str(scripts / 'Activate.ps1'))}"
        return f"{line}; & {' '.join(ps_quote(a) for a in command)}" if command else line
    line = f". {shlex.quote(str(scripts / 'activate'))}"
    return f"{line} && {shlex.join(command)}" if command else line


def posix_run_line(layout: VenvLayout, variables: Mapping[str, str], argv: Sequence[str]) -> str:
    """`envbuilder run` in a native venv as one POSIX sh line: in a subshell (the pasting
    shell keeps its own environment), the variables run drops unset, the venv's and the env's
    exported, then exactly `argv` (quoting.sh_command). No activate script: it is written for
    bash and zsh (`declare -f`), and it would not drop what run drops."""
    steps = [f"unset {' '.join(sorted(_DROPPED))}"]
    if variables:
        steps.append("export " + " ".join(f"{k}={sh_word(v)}" for k, v in variables.items()))
    # a second export: "$PATH" is expanded before export runs, so it is the env's PATH if it
    # sets one, as run's is
    venv_bin = sh_word(str(layout.scripts) + os.pathsep)
    steps.append(f'export VIRTUAL_ENV={sh_word(str(layout.root))} PATH={venv_bin}"$PATH"')
    return f"({'; '.join([*steps, sh_command(argv)])})"


#: What would make the venv's Python see other packages: not passed to what runs in a venv.
_DROPPED = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV"})


def clean_env() -> dict[str, str]:
    """The caller's environment without _DROPPED."""
    return {k: v for k, v in os.environ.items() if k not in _DROPPED}

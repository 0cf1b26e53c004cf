"""An env's environment variables, written into a venv's activate scripts (bash, PowerShell, cmd).

Each script gets one block between marker lines, replaced on every build (so a rebuild with the
same values rewrites nothing). Activation saves the variables' previous values once and sets the
env's; `deactivate` restores them. Everything here is a pure function of text except
`write_activation`, so the Windows scripts are tested on Linux. Which variables a target sets is
the target's own knowledge (its descriptor's `variables`, `envbuilder.targets`).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePath

from envbuilder.core import quoting
from envbuilder.core.errors import BuildError, EnvbuilderError
from envbuilder.core.fsutil import atomic_write_bytes

BEGIN = ">>> envbuilder environment (written by `envbuilder build`; edit environments.toml) >>>"
END = "<<< envbuilder environment <<<"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


#: Inside `writable_only()`: checked_variables leaves out what it would refuse.
_LENIENT: contextvars.ContextVar[bool] = contextvars.ContextVar("lenient", default=False)


@contextlib.contextmanager
def writable_only() -> Iterator[None]:
    """Within the block, checked_variables drops a variable it would refuse instead of raising:
    for `check`, which reports every problem of the spec. One bad value (a line break in
    `hip_path`) made a target's `variables()` raise, and the quoting problems of the others went
    unreported although `render` then refused one of them."""
    token = _LENIENT.set(True)
    try:
        yield
    finally:
        _LENIENT.reset(token)


def checked_variables(variables: Mapping[str, str]) -> dict[str, str]:
    """`variables` (in order) when every name and value can be written into an activate script;
    BuildError naming the first that cannot (inside `writable_only()`: without those)."""
    out = {}
    for name, value in variables.items():
        try:
            _check(name, value)
        except BuildError:
            if not _LENIENT.get():
                raise
            continue
        out[name] = value
    return out


def _check(name: str, value: str) -> None:
    if not _NAME.match(name):
        raise BuildError(
            f"environment variable name {name!r} (environments.toml, env.*.env) is "
            f"not a valid name; use letters, digits and '_' (no leading digit)"
        )
    if "\n" in value or "\r" in value or "\0" in value:
        raise BuildError(
            f"environment variable {name} (environments.toml) holds a line break or "
            f"NUL; activate scripts cannot carry it, write it on one line"
        )


# --- bash (also zsh, which runs the same `activate`) -------------------------------------------


def bash_block(variables: Mapping[str, str]) -> str:
    """Save each variable once per activation, set it, and wrap `deactivate` to restore it."""
    lines = [f"# {BEGIN}", 'if [ -z "${_ENVBUILDER_ACTIVE+x}" ]; then']
    for name in variables:
        lines += [
            f"    unset _ENVBUILDER_OLD_{name}",
            f'    if [ -n "${{{name}+x}}" ]; then _ENVBUILDER_OLD_{name}="${name}"; fi',
        ]
    lines += ["    _ENVBUILDER_ACTIVE=1", "fi"]
    lines += [f"export {name}={quoting.sh_quote(value)}" for name, value in variables.items()]
    lines += ["_envbuilder_restore () {", '    if [ -n "${_ENVBUILDER_ACTIVE+x}" ]; then']
    for name in variables:
        lines += [
            f'        if [ -n "${{_ENVBUILDER_OLD_{name}+x}}" ]; then '
            f'export {name}="$_ENVBUILDER_OLD_{name}"; '
            f"unset _ENVBUILDER_OLD_{name}; else unset {name}; fi"
        ]
    lines += [
        "        unset _ENVBUILDER_ACTIVE",
        "    fi",
        "}",
        # Keep the venv's own deactivate under another name; `${f#deactivate}` works for the
        # text both bash and zsh print for `declare -f`.
        "_envbuilder_f=$(declare -f deactivate)",
        'eval "_envbuilder_venv_deactivate${_envbuilder_f#deactivate}"',
        "unset _envbuilder_f",
        "deactivate () {",
        "    _envbuilder_restore",
        '    _envbuilder_venv_deactivate "$@"',
        '    if [ ! "${1-}" = "nondestructive" ]; then',
        "        unset -f _envbuilder_venv_deactivate _envbuilder_restore",
        "    fi",
        "}",
        f"# {END}",
    ]
    return "\n".join(lines) + "\n"


# --- PowerShell --------------------------------------------------------------------------------


def powershell_block(variables: Mapping[str, str]) -> str:
    """The same for activate.ps1: old values kept in one global hashtable until deactivate."""
    names = ", ".join(quoting.ps_quote(name) for name in variables)
    lines = [
        f"# {BEGIN}",
        "if (-not (Test-Path variable:global:_ENVBUILDER_OLD_ENV)) {",
        "    $global:_ENVBUILDER_OLD_ENV = @{}",
        f"    foreach ($name in @({names})) {{",
        "        $global:_ENVBUILDER_OLD_ENV[$name] = [Environment]::GetEnvironmentVariable($name)",
        "    }",
        "}",
    ]
    lines += [f"$env:{name} = {quoting.ps_quote(value)}" for name, value in variables.items()]
    lines += [
        "Set-Item -Path function:global:_envbuilder_venv_deactivate -Value $function:deactivate",
        "function global:deactivate([switch] $NonDestructive) {",
        "    if (Test-Path variable:global:_ENVBUILDER_OLD_ENV) {",
        "        foreach ($item in $global:_ENVBUILDER_OLD_ENV.GetEnumerator()) {",
        "            [Environment]::SetEnvironmentVariable($item.Key, $item.Value)",
        "        }",
        "        Remove-Variable -Name _ENVBUILDER_OLD_ENV -Scope global",
        "    }",
        "    _envbuilder_venv_deactivate -NonDestructive:$NonDestructive",
        "    if (!$NonDestructive) {",
        "        Remove-Item function:_envbuilder_venv_deactivate",
        "    }",
        "}",
        f"# {END}",
    ]
    return "\n".join(lines) + "\n"


# --- cmd.exe -----------------------------------------------------------------------------------


def cmd_activate_block(variables: Mapping[str, str]) -> str:
    """For activate.bat (cmd cannot tell unset from empty, so neither can the restore)."""
    lines = [f"@REM {BEGIN}", "@if defined _ENVBUILDER_ACTIVE @goto ENVBUILDER_SAVED"]
    lines += [f'@set "_ENVBUILDER_OLD_{name}=%{name}%"' for name in variables]
    lines += ['@set "_ENVBUILDER_ACTIVE=1"', ":ENVBUILDER_SAVED"]
    # `%` doubled; a `"` is refused (QuotingError): it would end the quoted word
    lines += ["@" + quoting.cmd_set_line(name, value) for name, value in variables.items()]
    lines += [f"@REM {END}"]
    return "\r\n".join(lines) + "\r\n"


def cmd_deactivate_block(variables: Mapping[str, str]) -> str:
    """For deactivate.bat: put back what activate.bat saved."""
    lines = [f"@REM {BEGIN}", "@if not defined _ENVBUILDER_ACTIVE @goto ENVBUILDER_RESTORED"]
    for name in variables:
        lines += [f'@set "{name}=%_ENVBUILDER_OLD_{name}%"', f"@set _ENVBUILDER_OLD_{name}="]
    lines += ["@set _ENVBUILDER_ACTIVE=", ":ENVBUILDER_RESTORED", f"@REM {END}"]
    return "\r\n".join(lines) + "\r\n"


# --- splicing into the scripts -----------------------------------------------------------------


def splice(text: str, block: str) -> str:
    """`text` with its envbuilder block replaced by `block` (appended when there is none; removed
    when `block` is empty). The text's own line ending is kept."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if BEGIN in line), None)
    if begin is not None:
        end = next((i for i in range(begin, len(lines)) if END in lines[i]), len(lines) - 1)
        del lines[begin : end + 1]
    body = "".join(lines)
    if not block:
        return body
    if body and not body.endswith(("\n", "\r")):
        body += newline
    return body + block.replace("\r\n", "\n").replace("\n", newline)


def script_blocks(
    scripts: Iterable[PurePath], variables: Mapping[str, str], windows: bool
) -> dict[str, str]:
    """Which block goes into which script of a venv's bin/Scripts folder, keyed by file name as
    found there (uv writes `activate.ps1`, `python -m venv` writes `Activate.ps1`). cmd's
    activate.bat/deactivate.bat only for Windows venvs (on Linux nobody runs them, and a value
    cmd cannot carry must not stop a Linux build). An env with no variables gets empty blocks
    (any old block is removed)."""
    found = {path.name.lower(): path.name for path in scripts}
    wanted: dict[str, Callable[[Mapping[str, str]], str]] = {
        "activate": bash_block,
        "activate.ps1": powershell_block,
    }
    if windows:
        wanted |= {"activate.bat": cmd_activate_block, "deactivate.bat": cmd_deactivate_block}
    missing = [name for name in wanted if name not in found]
    if missing:
        raise BuildError(
            f"the venv has no {', '.join(missing)} script; delete the venv folder and build again"
        )
    return {found[key]: (render(variables) if variables else "") for key, render in wanted.items()}


def write_activation(scripts_dir: Path, variables: Mapping[str, str], windows: bool) -> list[Path]:
    """Write `variables` into the activate scripts in `scripts_dir`; return the files that
    changed (none when they already hold the same block)."""
    blocks = script_blocks(list(scripts_dir.iterdir()), variables, windows)
    changed = []
    for name, block in blocks.items():
        path = scripts_dir / name
        text = path.read_bytes().decode("utf-8")
        new = splice(text, block)
        if new != text:
            # keep the script's mode (a plain temp file would be 0600)
            atomic_write_bytes(path, new.encode("utf-8"), mode=path.stat().st_mode & 0o777)
            changed.append(path)
    return changed


def activation_is_current(scripts_dir: Path, variables: Mapping[str, str], windows: bool) -> bool:
    """True when every activate script already holds exactly these variables' block."""
    try:
        blocks = script_blocks(list(scripts_dir.iterdir()), variables, windows)
        return all(
            splice(text := (scripts_dir / n).read_bytes().decode("utf-8"), b) == text
            for n, b in blocks.items()
        )
    except (OSError, UnicodeDecodeError, EnvbuilderError):
        return False

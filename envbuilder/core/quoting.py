"""Quoting for every language envbuilder writes: POSIX sh, Dockerfiles, PowerShell, cmd.

Each function turns an arbitrary value into ONE token of its language that means exactly that
value, or raises `QuotingError` when the language cannot carry it on one line (a newline in a
Dockerfile, a double quote in a cmd `set`). Templates call these through jinja2 filters; nothing
a spec or lock carries is ever pasted into a generated line unquoted.

The rules, per language:

- POSIX sh (`sh_quote`): single quotes; an embedded `'` becomes `'"'"'`. Inside single quotes the
  shell expands nothing (`$(...)`, backticks, `;`, globs are literal).
- Dockerfile (`dockerfile_quote`): a double-quoted word for ENV/LABEL/ARG values. The Dockerfile
  lexer expands `$VAR` and `${VAR}` and treats `\\` as its escape character, so `\\`, `"` and `$`
  are escaped; a line break would end the instruction, so CR/LF are refused.
  `dockerfile_exec_form` writes the JSON-array form (no shell at all).
- Dockerfile RUN lines are sh lines: `dockerfile_sh_quote` is `sh_quote` that also refuses CR/LF.
- PowerShell (`ps_quote`): a verbatim single-quoted string; PowerShell treats the typographic
  quotes U+2018..U+201B like `'`, so each of them is doubled as well. Newlines stay literal.
- cmd.exe (`cmd_set_line`): `set "NAME=value"`; inside the quotes `& | < > ^` are literal and `%`
  is doubled (batch files expand `%VAR%`). A `"` or a line break would end the quoted word, so
  they are refused. (`!VAR!` expands only where a user turned delayed expansion on.)

What each function refuses is a predicate of its own (`*_refusal(value)`: the reason, or None);
the function raises QuotingError with that reason. `envbuilder check` asks the same predicates,
so a spec it accepts renders.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence

from envbuilder.core.errors import RenderError


class QuotingError(RenderError):
    """A value cannot be written safely in the target language (e.g. a newline in a Dockerfile)."""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SH_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
#: Characters PowerShell accepts as a single quote (the ASCII one and four typographic ones).
PS_SINGLE_QUOTES = "'\u2018\u2019\u201a\u201b"


#: Characters that end a line (or, NUL, that no language carries) somewhere envbuilder writes.
LINE_BREAKS = ("\n", "\r", "\x00", "\u2028", "\u2029", "\x85", "\x0b", "\x0c")


def line_break_refusal(value: str, language: str) -> str | None:
    """Why `value` cannot be written on one `language` line (it holds a line break or NUL), or
    None."""
    for ch in LINE_BREAKS:
        if ch in value:
            return (
                f"contains a line break or NUL ({ch!r}), which cannot be written on one "
                f"{language} line"
            )
    return None


def env_name_refusal(name: str) -> str | None:
    """Why `name` is not a portable environment variable name, or None."""
    if _ENV_NAME.match(name):
        return None
    return (
        "is not a valid environment variable name (letters, digits and _, not starting "
        "with a digit)"
    )


def sh_refusal(value: str) -> str | None:
    """Why `sh_quote` refuses `value` (a NUL byte), or None."""
    return "contains a NUL byte, which no shell can carry" if "\x00" in value else None


def dockerfile_sh_refusal(value: str) -> str | None:
    """Why `dockerfile_sh_quote` refuses `value`, or None."""
    return line_break_refusal(value, "Dockerfile") or sh_refusal(value)


def dockerfile_refusal(value: str) -> str | None:
    """Why `dockerfile_quote` (and `dockerfile_exec_form`, per argument) refuses `value`."""
    return line_break_refusal(value, "Dockerfile")


def ps_refusal(value: str) -> str | None:
    """Why `ps_quote` refuses `value` (a NUL byte), or None."""
    return "contains a NUL byte, which PowerShell cannot carry" if "\x00" in value else None


def cmd_set_refusal(value: str) -> str | None:
    """Why `cmd_set_line` refuses `value` as the value of a `set`, or None."""
    if why := line_break_refusal(value, "cmd.exe"):
        return why
    if '"' in value:
        return "contains a double quote, which a cmd.exe `set` cannot carry"
    return None


def _refuse(value: str, why: str | None) -> None:
    if why is not None:
        raise QuotingError(f"value {value!r} {why}; remove it from the spec")


def env_name(name: str) -> str:
    """Return `name` if it is a portable environment variable name, else raise QuotingError."""
    if why := env_name_refusal(name):
        raise QuotingError(f"{name!r} {why}")
    return name


def sh_quote(value: str) -> str:
    """One POSIX sh word meaning exactly `value` (safe words stay bare, as shlex.quote does)."""
    _refuse(value, sh_refusal(value))
    if _SH_SAFE.match(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


#: Words a shell reads as syntax in a command's place (POSIX reserved words, and bash's and zsh's
#: own): a command of that name is quoted, as is one holding "=" (an assignment otherwise).
_SH_RESERVED = frozenset(
    {"!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in"}
    | {"then", "until", "while", "[[", "]]", "function", "select", "time", "coproc"}
)
#: Unicode categories written as bytes through printf: control, format (bidi overrides that make
#: a line read differently than it runs), surrogate (a byte that is not UTF-8), private use,
#: and line and paragraph separators.
_SH_AS_BYTES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def _as_printf(text: str) -> str:
    """`text` as a word of its exact bytes: "$(printf '\\ooo...')" (octal escapes are POSIX)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no OS argv holds; written as Python would store it
        raw = text.encode("utf-8", "surrogatepass")
    return "\"$(printf '" + "".join(f"\\{b:03o}" for b in raw) + "')\""


def sh_word(value: str) -> str:
    """One POSIX sh word meaning exactly `value`, on a line a terminal shows as it is: safe words
    bare, the rest single-quoted (where the shell expands nothing), and each run of control or
    format characters (or of bytes that are not UTF-8) written as printf octal escapes. A
    newline stays literal inside the quotes: a command substitution would drop it."""
    _refuse(value, sh_refusal(value))
    if _SH_SAFE.match(value):
        return value
    parts: list[str] = []
    run = ""
    for ch in value:
        if (ch != "\n" and unicodedata.category(ch) in _SH_AS_BYTES) != _is_printf_run(run):
            parts.append(_sh_run(run))
            run = ""
        run += ch
    parts.append(_sh_run(run))
    return "".join(p for p in parts if p) or "''"


def _is_printf_run(run: str) -> bool:
    return bool(run) and run[0] != "\n" and unicodedata.category(run[0]) in _SH_AS_BYTES


def _sh_run(run: str) -> str:
    if not run:
        return ""
    if _is_printf_run(run):
        return _as_printf(run)
    return "'" + run.replace("'", "'\"'\"'") + "'"


def sh_command(argv: Sequence[str]) -> str:
    """`argv` as one POSIX sh command (sh_word per word) that runs exactly it: a first word the
    shell would read as an assignment (`X=1`), a reserved word (`if`, `!`) or an option is
    quoted."""
    if not argv:
        raise ValueError("sh_command needs a command")
    first = sh_word(argv[0])
    # a leading "-" too: `sh -c LINE` would read the line as its own option
    if first == argv[0] and ("=" in first or first in _SH_RESERVED or first.startswith("-")):
        first = f"'{first}'"
    return " ".join([first, *(sh_word(word) for word in argv[1:])])


def dockerfile_sh_quote(value: str) -> str:
    """`sh_quote` for a Dockerfile RUN line: additionally refuses line breaks."""
    _refuse(value, dockerfile_sh_refusal(value))
    return sh_quote(value)


def dockerfile_quote(value: str) -> str:
    """A double-quoted Dockerfile word (ENV, LABEL, ARG default) meaning exactly `value`."""
    _refuse(value, dockerfile_refusal(value))
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def dockerfile_exec_form(argv: Sequence[str]) -> str:
    """The JSON-array (exec) form of a command: no shell, no variable expansion."""
    for arg in argv:
        _refuse(arg, dockerfile_refusal(arg))
    return json.dumps(list(argv), ensure_ascii=False)


def ps_quote(value: str) -> str:
    """A verbatim PowerShell single-quoted string meaning exactly `value`."""
    _refuse(value, ps_refusal(value))
    out = []
    for ch in value:
        out.append(ch + ch if ch in PS_SINGLE_QUOTES else ch)
    return "'" + "".join(out) + "'"


def cmd_set_line(name: str, value: str) -> str:
    """A cmd.exe batch line `set "NAME=value"` that sets exactly `value`."""
    env_name(name)
    _refuse(value, cmd_set_refusal(value))
    return f'set "{name}={value.replace("%", "%%")}"'


def comment_text(value: str) -> str:
    """Free text for a `#` comment: line breaks and other control characters become spaces."""
    return "".join(" " if (ord(ch) < 32 or ch in "\x7f\x85\u2028\u2029") else ch for ch in value)


def ps_block_comment_text(value: str) -> str:
    """Free text inside a PowerShell `<# ... #>` block: `comment_text`, and `#>`/`<#` broken up
    so the text cannot end (or nest) the block."""
    return comment_text(value).replace("#>", "# >").replace("<#", "< #")

"""Issue 30, item 9: `run --print` is exact. The printed line, pasted into the shell it names,
runs exactly the argv `run` starts: for docker (quoting.sh_command) and native venvs
(venv.posix_run_line, POSIX sh, no bash `declare`), checked by property through the real
/bin/sh with a stand-in command that writes its argv NUL-separated; the PowerShell form
(wsl2, windows) at unit level against PowerShell's single-quoted string rules. `run` passes
an empty string in CMD as the argv element it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path, PurePath, PureWindowsPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_safety_venv import Tiny, envbuilder, tiny  # noqa: F401 (tiny: the fixture)

from envbuilder.builders.venvcommands import VenvLayout, activation_line, posix_run_line
from envbuilder.core.quoting import PS_SINGLE_QUOTES, ps_quote, sh_command, sh_word
from envbuilder.host.wslexe import powershell_line

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX sh on Linux")

#: Writes its arguments NUL-terminated, then (after a line "--env--") the variables asked for
#: in STANDIN_SHOW, each NAME=value, NUL-terminated (a missing one as NAME!).
STANDIN = f"""#!{sys.executable}
import os, sys
out = sys.stdout.buffer
for word in sys.argv[1:]:
    out.write(os.fsencode(word) + b"\\0")
out.write(b"--env--\\0")
for name in os.environ.get("STANDIN_SHOW", "").split():
    value = os.environb.get(name.encode())
    out.write(name.encode() + (b"=" + value if value is not None else b"!") + b"\\0")
"""

#: Characters a printed line never holds raw (a newline excepted): they would act on the terminal
#: or make the line read differently than it runs.
RAW = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}

#: What the issue names, and what a shell reads as syntax.
HOSTILE = [
    "", " ", "'", '"', "it's", 'say "hi"', "a\nb", "\n", "a\tb", "\t", "\r", "\x1b[31mred",
    "\x01\x02\x7f", "\x85", "\u2028", "\u202e", "caf\u00e9", "\U0001f600", "$(touch /tmp/x)",
    "`id`", "$HOME", "${HOME}", "~", "~root", "a=~", "-n", "--", "-e", "*", "?", "[a]", "#", "!",
    "!!", "&&", ";", "|", "<", ">", "(", ")", "{", "}", "\\", "\\n", "%s", "X=1", "if", "\udcff",
    "a\udc80b",
]  # fmt: skip

words = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=3),
)


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("standin")
    for name in ("standin", "X=1", "if", "-x", "time", "!"):
        (folder / name).write_text(STANDIN)
        (folder / name).chmod(0o755)
    return folder


def _pasted(line: str, env: dict[str, str]) -> tuple[list[bytes], dict[str, bytes | None]]:
    """`line` run by /bin/sh -c: the stand-in's argv and the variables it was asked to show."""
    proc = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    *fields, last = proc.stdout.split(b"\0")
    assert last == b""
    split = fields.index(b"--env--")
    shown: dict[str, bytes | None] = {}
    for item in fields[split + 1 :]:
        name, eq, value = item.partition(b"=")
        shown[name.rstrip(b"!").decode()] = value if eq else None
    return fields[:split], shown


def _fs(argv: Sequence[str]) -> list[bytes]:
    return [os.fsencode(word) for word in argv]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(words, max_size=6))
def test_a_docker_line_pasted_into_sh_gives_exactly_the_argv(
    standin: Path, argv: list[str]
) -> None:
    line = sh_command([str(standin / "standin"), *argv])
    assert not [c for c in line if c != "\n" and unicodedata.category(c) in RAW]
    got, _ = _pasted(line, {"PATH": os.environ["PATH"]})
    assert got == _fs(argv)


@pytest.mark.parametrize("command", ["X=1", "if", "-x", "time", "!"])
def test_a_command_the_shell_would_read_as_syntax_is_run_as_a_command(
    standin: Path, command: str
) -> None:
    # `X=1 env` would set X and run env; `if`, `time`, `!` are the shell's own words
    line = sh_command([command, "env", "a b"])
    got, _ = _pasted(line, {"PATH": str(standin)})
    assert got == [b"env", b"a b"]


def test_sh_word_shows_no_raw_control_character() -> None:
    assert sh_word("a\x1b[31mb") == "'a'\"$(printf '\\033')\"'[31mb'"
    assert sh_word("\udcff") == "\"$(printf '\\377')\""
    assert sh_word("") == "''"
    assert sh_word("plain-word_1.2") == "plain-word_1.2"


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    argv=st.lists(words, max_size=5),
    value=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
)
def test_a_native_line_pasted_into_sh_gives_the_argv_and_the_environment_run_gives(
    standin: Path, argv: list[str], value: str
) -> None:
    # the stand-in plays a program of the venv: found through the PATH the line exports
    layout = VenvLayout(standin.parent, windows=False)
    venv_bin = standin.parent / "bin"
    if not venv_bin.exists():
        venv_bin.symlink_to(standin)
    line = posix_run_line(layout, {"ENV_VALUE": value}, ["standin", *argv])
    assert "declare" not in line
    show = "ENV_VALUE VIRTUAL_ENV PATH PYTHONPATH PYTHONHOME"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere", "STANDIN_SHOW": show}
    got, shown = _pasted(line, env)
    assert got == _fs(argv)
    assert shown == {
        "ENV_VALUE": os.fsencode(value),
        "VIRTUAL_ENV": os.fsencode(str(standin.parent)),
        "PATH": os.fsencode(f"{venv_bin}:/usr/bin:/bin"),
        "PYTHONPATH": None,  # run drops it
        "PYTHONHOME": None,
    }


# --- PowerShell (wsl2, windows): unit level --------------------------------------------------


def ps_single_quoted(text: str, start: int) -> tuple[str, int]:
    """PowerShell's tokenizer for a verbatim string starting at `start` (a single quote of any
    of its five kinds): inside, any single quote followed by another is that second one, any
    other ends the string. The value and the index after it."""
    assert text[start] in PS_SINGLE_QUOTES
    out: list[str] = []
    i = start + 1
    while True:
        ch = text[i]
        if ch in PS_SINGLE_QUOTES:
            if i + 1 >= len(text) or text[i + 1] not in PS_SINGLE_QUOTES:
                return "".join(out), i + 1
            i += 1
            ch = text[i]
        out.append(ch)
        i += 1


def ps_words(line: str) -> list[str]:
    """The quoted words of `& 'a' 'b' ...` (what powershell_line writes)."""
    assert line.startswith("& ")
    found, i = [], 2
    while i < len(line):
        word, i = ps_single_quoted(line, i)
        found.append(word)
        assert i == len(line) or line[i] == " "
        i += 1
    return found


ps_text = st.one_of(
    st.sampled_from([*HOSTILE[:-2], "’", "‘x‘", "'’‚‛'", "$env:PATH", "@(1)", "`n"]),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
)


@given(st.lists(ps_text, min_size=1, max_size=6))
def test_the_powershell_line_reads_back_as_the_argv(argv: list[str]) -> None:
    assert ps_words(powershell_line(argv)) == argv
    assert all(ps_single_quoted(ps_quote(w), 0) == (w, len(ps_quote(w))) for w in argv)


def test_the_windows_venv_line_activates_then_calls_the_argv() -> None:
    scripts: PurePath = PureWindowsPath(r"C:\venvs\it's\Scripts")
    line = activation_line(scripts, ("python", "-c", "print('x')", ""), windows=True)
    first, rest = line.split("; ", 1)
    assert ps_words(first) == [str(scripts / "Activate.ps1")]
    assert ps_words(rest) == ["python", "-c", "print('x')", ""]


# --- the command line ------------------------------------------------------------------------

ARGV_CODE = "import sys; sys.stdout.write(repr(sys.argv[1:]))"


def test_run_print_native_is_exact_and_run_passes_empty_arguments(
    tiny: Tiny,  # noqa: F811
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    built = tiny.build(venv)
    assert built.returncode == 0, built.stderr
    argv = ["python", "-c", ARGV_CODE, "", "it's", "a\nb", "$(id)", "-n", "X=1", "\t"]
    where = ("run", "--env", "tiny", "--target", "native", "--path", str(venv))
    ran = envbuilder(*where, "--", *argv, cwd=tiny.root)
    assert ran.returncode == 0, ran.stderr  # '' is an argument like any other
    assert ran.stdout == repr(argv[3:])
    printed = envbuilder(*where, "--print", "--", *argv, cwd=tiny.root)
    assert printed.returncode == 0, printed.stderr
    line = printed.stdout.removesuffix("\n")
    assert "declare" not in line and "activate" not in line
    pasted = subprocess.run(
        ["/bin/sh", "-c", line], capture_output=True, text=True, timeout=60, check=False
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout == ran.stdout

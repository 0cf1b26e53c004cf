"""Quoting for sh, Dockerfiles, PowerShell and cmd: each quoted value means exactly itself.

sh is checked by a real /bin/sh; Dockerfile words by BuildKit's parser and by the real engine
(legacy builder: hostile ENV, LABEL and RUN values arrive in the image exactly as given, and
none runs as code); PowerShell (not installed here) by a decoder written from the
PowerShell language specification's rules for verbatim strings.
"""

from __future__ import annotations

import io
import json
import subprocess
from typing import Any

import dockerfile
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuilder.core import quoting
from envbuilder.core.quoting import QuotingError

#: Values that try to become code in one language or another.
HOSTILE = [
    "",
    "plain",
    "two words",
    "it's",
    "'; touch /tmp/pwned; echo '",
    '"; touch /tmp/pwned; echo "',
    "$(touch /tmp/pwned)",
    "${HOME}",
    "$HOME",
    "`touch /tmp/pwned`",
    "a;b&&c||d|e>f<g",
    "back\\slash\\",
    "trailing backslash \\",
    "glob * ? [a]",
    "%PATH%",
    "^&|<>",
    "\u2018smart\u2019 \u201aquotes\u201b",
    "#>  <# comment enders",
    "unicode \u00e9\u4e2d",
    "-n",
    "--flag=1",
]
NEWLINES = ["a\nb", "a\rb", "a\r\nb", "\nRUN touch /tmp/pwned", "x\u2028y"]


def run_sh(script: str) -> str:
    return subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("value", [*HOSTILE, "multi\nline"])
def test_sh_quote_is_one_literal_word(value: str) -> None:
    assert run_sh(f"printf '%s|' {quoting.sh_quote(value)}") == value + "|"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Surrogates (category Cs) cannot be encoded into an argv at all, so they are not "text" here.
@given(
    st.text(
        alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=30
    )
)
def test_sh_quote_roundtrips_any_text(value: str) -> None:
    out = subprocess.run(
        ["sh", "-c", f"printf '%s' {quoting.sh_quote(value)}"], check=True, capture_output=True
    ).stdout
    assert out.decode("utf-8", "surrogateescape") == value


def test_sh_quote_refuses_nul() -> None:
    with pytest.raises(QuotingError, match="NUL"):
        quoting.sh_quote("a\x00b")


@pytest.mark.parametrize("value", NEWLINES)
def test_dockerfile_quoting_refuses_line_breaks(value: str) -> None:
    for fn in (quoting.dockerfile_quote, quoting.dockerfile_sh_quote):
        with pytest.raises(QuotingError, match="line break"):
            fn(value)
    with pytest.raises(QuotingError):
        quoting.dockerfile_exec_form(["echo", value])


def dockerfile_word(word: str) -> str:
    """The value of a double-quoted Dockerfile word, by the Dockerfile lexer's rules: `\\`
    escapes the next character; `$` starts an expansion unless escaped."""
    assert word.startswith('"') and word.endswith('"')
    out, i, body = [], 0, word[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            out.append(body[i + 1])
            i += 2
            continue
        assert ch not in '"$', f"unescaped {ch!r} in {word!r}"
        out.append(ch)
        i += 1
    return "".join(out)


@pytest.mark.parametrize("value", HOSTILE)
def test_dockerfile_quote_stays_one_env_value(value: str) -> None:
    quoted = quoting.dockerfile_quote(value)
    parsed = dockerfile.parse_string(f"FROM scratch\nENV NAME={quoted}\nLABEL k={quoted}\n")
    assert [c.cmd.upper() for c in parsed] == ["FROM", "ENV", "LABEL"]
    assert parsed[1].value == ("NAME", quoted)
    assert dockerfile_word(quoted) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_dockerfile_sh_quote_keeps_the_run_line_whole(value: str) -> None:
    parsed = dockerfile.parse_string(
        f"FROM scratch\nRUN printf '%s' {quoting.dockerfile_sh_quote(value)}\nUSER 1000\n"
    )
    assert [c.cmd.upper() for c in parsed] == ["FROM", "RUN", "USER"]
    assert run_sh(parsed[1].value[0]) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_exec_form_is_json(value: str) -> None:
    text = quoting.dockerfile_exec_form(["/bin/echo", value])
    parsed = dockerfile.parse_string(f"FROM scratch\nRUN {text}\n")
    assert parsed[1].json and parsed[1].value == ("/bin/echo", value)
    assert json.loads(text) == ["/bin/echo", value]


def ps_verbatim(literal: str) -> tuple[str, str]:
    """Decode a PowerShell verbatim string at the start of `literal`: (value, rest). Per the
    language spec, any of ' U+2018 U+2019 U+201A U+201B opens/closes it, and two of them in a
    row stand for one literal quote character."""
    quotes = quoting.PS_SINGLE_QUOTES
    assert literal[0] in quotes
    out, i = [], 1
    while True:
        ch = literal[i]
        if ch in quotes:
            if i + 1 < len(literal) and literal[i + 1] in quotes:
                out.append(ch)
                i += 2
                continue
            return "".join(out), literal[i + 1 :]
        out.append(ch)
        i += 1


@pytest.mark.parametrize("value", [*HOSTILE, *NEWLINES])
def test_ps_quote_is_one_verbatim_string(value: str) -> None:
    decoded, rest = ps_verbatim(quoting.ps_quote(value) + "; Remove-Item x")
    assert decoded == value
    assert rest == "; Remove-Item x"


@given(st.text(alphabet=st.characters(exclude_characters="\x00"), max_size=40))
def test_ps_quote_roundtrips_any_text(value: str) -> None:
    assert ps_verbatim(quoting.ps_quote(value) + " ")[0] == value


def test_ps_block_comment_text_cannot_close_the_block() -> None:
    text = quoting.ps_block_comment_text("x #> Remove-Item C:\\ <# y\nz")
    assert "#>" not in text and "<#" not in text and "\n" not in text


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (
            "C:\\Program Files\\AMD\\ROCm\\6.4\\",
            'set "HIP_PATH=C:\\Program Files\\AMD\\ROCm\\6.4\\"',
        ),
        ("%PATH%;x", 'set "HIP_PATH=%%PATH%%;x"'),
        ("a & calc.exe | b ^ <c>", 'set "HIP_PATH=a & calc.exe | b ^ <c>"'),
    ],
)
def test_cmd_set_line(value: str, line: str) -> None:
    assert quoting.cmd_set_line("HIP_PATH", value) == line


@pytest.mark.parametrize("value", ['say "hi"', "a\nb", "a\rb"])
def test_cmd_set_line_refuses_what_ends_the_word(value: str) -> None:
    with pytest.raises(QuotingError):
        quoting.cmd_set_line("X", value)


@pytest.mark.parametrize("name", ["", "1X", "A-B", "A B", "A;B", "A=B", "$(x)", "A\nB"])
def test_env_name_refuses_what_is_not_a_name(name: str) -> None:
    with pytest.raises(QuotingError, match="not a valid environment variable name"):
        quoting.env_name(name)


def test_comment_text_is_one_line() -> None:
    assert quoting.comment_text("a\nRUN x\rb\tc\u2028d") == "a RUN x b c d"


# --- the real engine ---------------------------------------------------------------------------

BASE = "debian:bookworm-slim"
VALUES = [v for v in HOSTILE if v]  # docker drops an empty LABEL the same way as a missing one


@pytest.fixture(scope="module")
def hostile_image(docker_client: Any) -> Any:
    lines = [f"FROM {BASE}"]
    for i, value in enumerate(VALUES):
        lines.append(f"ENV V{i}={quoting.dockerfile_quote(value)}")
        lines.append(f"LABEL l{i}={quoting.dockerfile_quote(value)}")
    lines.append("RUN mkdir /out")
    for i, value in enumerate(VALUES):
        lines.append(f"RUN printf '%s' {quoting.dockerfile_sh_quote(value)} > /out/{i}")
    # If any value had become code, this file would exist.
    lines.append("RUN test ! -e /tmp/pwned")
    dockerfile = ("\n".join(lines) + "\n").encode()
    image, _logs = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile), rm=True, forcerm=True, network_mode="host"
    )
    try:
        yield image
    finally:
        docker_client.images.remove(image.id, force=True)


def test_env_and_label_values_arrive_verbatim(hostile_image: Any) -> None:
    config = hostile_image.attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    for i, value in enumerate(VALUES):
        assert env[f"V{i}"] == value
        assert config["Labels"][f"l{i}"] == value


def test_run_words_arrive_verbatim(docker_client: Any, hostile_image: Any) -> None:
    script = "; ".join(f"cat /out/{i}; printf '\\0'" for i in range(len(VALUES)))
    # detach + wait + logs: with remove=True, docker-py on engine 20.10 sometimes returns the
    # logs of a container that exited too fast as empty (seen here), which would be a flake.
    container = docker_client.containers.run(
        hostile_image.id, ["sh", "-c", script], detach=True, network_mode="none"
    )
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0
        out = container.logs(stdout=True, stderr=False)
    finally:
        container.remove(force=True)
    assert out.decode().split("\0")[:-1] == VALUES

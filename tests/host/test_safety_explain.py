"""explain on hostile input (issue 13, fault 9): patterns linear on long lines, input capped,
standard input decoded with replacement. Real `envbuilder explain` processes fed through pipes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from envbuilder.core.errors import CompatDataError
from envbuilder.host import explain

MB = 1 << 20


def run_explain(
    *args: str, stdin: bytes, env: dict[str, str] | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "explain", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _literal_prefix(pattern: str) -> str:
    """The pattern's text up to its first regex operator: what a search finds over and over."""
    return re.split(r"[\\.\[\](){}*+?|^$]", pattern, maxsplit=1)[0]


def shipped_patterns() -> list[str]:
    return [p.pattern for e in explain.load_errors() for p in (*e.patterns, *e.requires)]


@pytest.mark.timeout(20)  # a guard against a hang (the issue: 345 s), not a speed claim
def test_one_megabyte_kfd_line_completes() -> None:
    # '/dev/kfd.*Permission denied' rescanned the rest of the line from every '/dev/kfd'.
    line = "/dev/kfd" * (MB // 8)
    proc = run_explain("-", stdin=line.encode())
    assert proc.returncode == 1 and b"Not a known message" in proc.stdout
    proc = run_explain("-", stdin=(line + " Permission denied").encode())
    assert proc.returncode == 0 and b"/dev/kfd" in proc.stdout


@pytest.mark.timeout(20)
def test_dense_lines_of_every_pattern_prefix_complete() -> None:
    """For each shipped pattern, a 256 KB line of its leading text repeated: every occurrence
    starts a match attempt that fails. A pattern with an unbounded gap rescans the rest of the
    line each time (quadratic: minutes); bounded ones finish in well under a second each."""
    for pattern in shipped_patterns():
        prefix = _literal_prefix(pattern) or pattern[:1]
        line = (prefix * (256 * 1024 // len(prefix) + 1))[: 256 * 1024]
        explain.match_all(line)  # completes; the result depends on the pattern


def test_every_shipped_pattern_is_linear() -> None:
    for e in explain.load_errors():
        for p in (*e.patterns, *e.requires):
            assert explain.backtracking_risk(p.pattern) is None, (e.id, p.pattern)


@pytest.mark.parametrize(
    ("pattern", "risk"),
    [
        ("/dev/kfd.*Permission denied", "unbounded repeat '*'"),
        ("a+b", "unbounded repeat '+'"),
        ("x{2,}", "unbounded repeat '{2,}'"),
        ("(ab){3}", "repeated group"),
        ("(a|b)*", "repeated group"),
    ],
)
def test_patterns_that_can_backtrack_are_refused(pattern: str, risk: str) -> None:
    entry = {
        "id": "x",
        "title": "t",
        "cause": "c",
        "fix": "f",
        "sources": ["s"],
        "patterns": ["fine", pattern],
    }
    with pytest.raises(CompatDataError, match=re.escape(risk)) as exc:
        explain.parse_errors({"error": [entry]})
    assert "must take linear time" in str(exc.value) and "[[error]] x" in str(exc.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "/dev/kfd.{0,80}Permission denied",
        r"libhsa\.so[.0-9]{0,16}:",
        r"a\*b",
        "[*+]",
        "[]*]",
        "(ab)?",
        r"\d{4}",
    ],
)
def test_bounded_patterns_are_accepted(pattern: str) -> None:
    assert explain.backtracking_risk(pattern) is None


def test_bounded_kfd_pattern_still_matches_the_real_messages() -> None:
    for message in (
        "Unable to open /dev/kfd read-write: Permission denied",
        "open(/dev/kfd) failed: Permission denied (errno 13)",
        "hsa api call failure at: /dev/kfd: Permission denied",
    ):
        found = explain.match(message)
        assert found is not None and found.id == "kfd-permission", message


def test_non_utf8_stdin_is_decoded_with_replacement() -> None:
    # PYTHONIOENCODING=utf-8 makes sys.stdin strict: a text read raised UnicodeDecodeError.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    log = b"\xff\xfe\x00garbage \x80\x81\nRuntimeError: No HIP GPUs are available\n\xc3("
    proc = run_explain("-", stdin=log, env=env)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr and b"No HIP GPUs" in proc.stdout
    proc = run_explain("--json", "-", stdin=b"\xff\xfe only junk \x80", env=env)
    assert proc.returncode == 1 and json.loads(proc.stdout) == {
        "command": "explain",
        "ok": False,
        "known": False,
        "matches": [],
    }


@pytest.mark.timeout(60)
def test_input_over_the_cap_is_refused() -> None:
    cap = explain.MAX_INPUT_BYTES
    ok = run_explain("-", stdin=b"x" * (cap - 1) + b"\n", timeout=60)
    assert ok.returncode == 1 and b"Not a known message" in ok.stdout  # exactly the cap: read
    over = run_explain("-", stdin=b"x" * cap + b"\n", timeout=60)
    assert over.returncode == 2
    err = over.stderr.decode()
    assert f"standard input is over {cap >> 20} MiB" in err and "tail -c" in err
    assert "Traceback" not in err and over.stdout == b""


def test_argument_over_the_cap_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # (in-process: the OS limits one argv string to far less than the cap)
    from envbuilder.commands._cli import main

    assert main(["explain", "é" * (explain.MAX_INPUT_BYTES // 2 + 1)]) == 2
    assert "the message is over" in capsys.readouterr().err

"""Issue 34's CLI conventions: a command line that does not parse gives the JSON error object
under --json; --color auto|always|never with NO_COLOR and FORCE_COLOR; `init` warns about the
spec of a folder above that the new one hides, and its comments cite public sources only."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.commands._cli import CommandLineError, json_asked, main, requested_command
from envbuilder.core.compatload import load_compat
from envbuilder.core.ui import UI, color_wanted
from envbuilder.spec.citations import FALLBACK, PRIVATE_NOTES, public_citation, split_parts
from envbuilder.spec.starter import OSES, Request, candidates, spec_text

ROOT = Path(__file__).resolve().parents[2]
CLI_SCHEMA = json.loads(
    (ROOT / "envbuilder" / "data" / "schemas" / "cli.schema.json").read_text(encoding="utf-8")
)
RED = "\x1b[31m"


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    with pytest.raises(CommandLineError) as exc:
        main(argv)
    assert exc.value.code == 2  # what argparse's own error exits with
    out, err = capsys.readouterr()
    assert "usage: envbuilder" in err and "error: " in err  # argparse's message, as before
    return out, err


@pytest.mark.parametrize(
    ("argv", "command", "says"),
    [
        (["check", "--json", "--bogus"], "check", "unrecognized arguments: --bogus"),
        (["lock", "--json", "--env"], "lock", "expected one argument"),
        (["--json", "nosuch"], None, "invalid choice: 'nosuch'"),
        (["compare", "--json", "-"], "compare", "the following arguments are required"),
        (["compare", "a.json", "--json=-", "--nope"], "compare", "unrecognized arguments"),
    ],
)
def test_a_usage_error_under_json_is_the_error_object(
    argv: list[str], command: str | None, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = _usage_error(argv, capsys)
    obj: dict[str, Any] = json.loads(out)
    jsonschema.validate(obj, CLI_SCHEMA, cls=jsonschema.Draft202012Validator)
    assert obj["command"] == command and obj["ok"] is False
    assert obj["error"]["kind"] == "UsageError" and obj["error"]["exit_code"] == 2
    assert says in obj["error"]["message"]


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--bogus"],
        ["compare", "a.json", "--json"],  # compare's --json takes a file: not asked for stdout
        ["run", "--env", "cpu", "--", "python", "--json", "--x"],  # CMD's own words
    ],
)
def test_no_json_unless_asked(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    if argv[0] == "run":
        assert not json_asked(argv)
        return
    out, _ = _usage_error(argv, capsys)
    assert out == ""


def test_color_value_is_not_the_command() -> None:
    assert requested_command(["--color", "never", "check"]) == "check"
    assert requested_command(["--color=never", "-q", "lock"]) == "lock"


@pytest.mark.parametrize(
    ("choice", "environ", "tty", "want"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # no-color.org: an empty value is unset
        ("auto", {"FORCE_COLOR": "1"}, False, True),
        ("auto", {"FORCE_COLOR": ""}, False, False),
        ("auto", {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
        ("always", {"NO_COLOR": "1"}, False, True),
        ("never", {"FORCE_COLOR": "1"}, True, False),
    ],
)
def test_color_wanted(
    choice: str, environ: dict[str, str], tty: bool, want: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", "xterm")

    class Stream:
        def isatty(self) -> bool:
            return tty

    assert color_wanted(choice, Stream(), environ) is want  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "environ", "red"),
    [
        (["fleet", "/nonexistent-job"], {"FORCE_COLOR": "1"}, True),
        (["--color", "never", "fleet", "/nonexistent-job"], {"FORCE_COLOR": "1"}, False),
        (["fleet", "/nonexistent-job", "--color", "always"], {"NO_COLOR": "1"}, True),
        (["fleet", "/nonexistent-job"], {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
        (["fleet", "/nonexistent-job"], {}, False),  # capsys' stderr is no terminal
    ],
)
def test_error_lines_are_coloured_as_asked(
    argv: list[str],
    environ: dict[str, str],
    red: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "error: /nonexistent-job" in err
    assert (RED in err) is red


def test_the_ui_default_is_auto() -> None:
    assert UI().color == "auto"


# --- init ------------------------------------------------------------------------------------


def _init(spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    spec.parent.mkdir(parents=True, exist_ok=True)
    code = main(["init", "--gpu", "cpu", "--os", "linux", "--json", "--spec", str(spec)])
    out, err = capsys.readouterr()
    obj: dict[str, Any] = json.loads(out)
    jsonschema.validate(obj, CLI_SCHEMA, cls=jsonschema.Draft202012Validator)
    return code, obj, err


def test_init_warns_about_a_spec_it_hides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, obj, err = _init(tmp_path / "environments.toml", capsys)
    assert code == 0 and obj["shadows"] is None and "warning" not in err
    code, obj, err = _init(tmp_path / "sub" / "deeper" / "environments.toml", capsys)
    assert code == 0 and obj["shadows"] == str(tmp_path / "environments.toml")
    assert f"warning: {tmp_path / 'environments.toml'} is in a folder above" in err


def test_init_under_another_name_hides_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _init(tmp_path / "environments.toml", capsys)
    code, obj, err = _init(tmp_path / "sub" / "other.toml", capsys)
    assert code == 0 and obj["shadows"] is None and "warning" not in err


def _all_sources(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["source"]] if isinstance(node.get("source"), str) else []
        return own + [s for v in node.values() for s in _all_sources(v)]
    if isinstance(node, list):
        return [s for v in node for s in _all_sources(v)]
    return []


SOURCES = [
    s
    for path in sorted((ROOT / "envbuilder" / "data").glob("*.toml"))
    for s in _all_sources(tomllib.loads(path.read_text(encoding="utf-8")))
]


def _private(text: str) -> list[str]:
    marks = [*PRIVATE_NOTES, "this workplace", "this machine"]
    return [m for m in marks if m in text]


def test_the_data_has_private_citations_to_drop() -> None:
    """What the filter is for: without it, these reach a user's file."""
    assert any(_private(s) for s in SOURCES)


@pytest.mark.parametrize("source", [s for s in SOURCES if _private(s)])
def test_public_citation_drops_private_notes(source: str) -> None:
    cited = public_citation(source)
    assert _private(cited) == []
    kept = [p for p in split_parts(source) if not _private(p)]
    assert cited == ("; ".join(kept) if kept else FALLBACK)


def test_split_keeps_a_semicolon_inside_parentheses() -> None:
    assert split_parts("a (b; c); rocm-reference.md (x; y); d") == [
        "a (b; c)",
        "rocm-reference.md (x; y)",
        "d",
    ]


@pytest.mark.parametrize("host_os", OSES)
@pytest.mark.parametrize("gpu", [None, *(g.gfx for g in load_compat().gpus)])
def test_starter_comments_cite_public_sources(gpu: str | None, host_os: str) -> None:
    first = next(iter(candidates(Request(gpu, host_os))), None)  # type: ignore[arg-type]
    if first is None:
        pytest.skip(
            f"no candidate for {gpu} on {host_os}: init refuses it (tests/commands/test_init.py)"
        )
    comments = "\n".join(line for line in spec_text(first).splitlines() if line.startswith("#"))
    assert _private(comments) == []

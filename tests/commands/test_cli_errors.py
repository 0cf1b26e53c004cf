"""A user's mistake is one clear line and exit 1 (failure) or 2 (usage), never a traceback.

Each case runs `envbuilder.commands._cli.main` on a copy of the shipped spec (and, where the case
needs one, its lock) in a temp dir. Only cheap paths: every case fails before anything is built.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envbuilder.commands._cli import main
from envbuilder.core.errors import UsageError
from envbuilder.image.engine import registry_repository

ROOT = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path, locked: bool) -> Path:
    """A project dir holding the shipped spec, and its lockfiles/ when `locked`."""
    shutil.copy(ROOT / "environments.toml", tmp_path / "environments.toml")
    if locked:
        shutil.copytree(ROOT / "lockfiles", tmp_path / "lockfiles")
    return tmp_path / "environments.toml"


def _corrupt_lock(spec: Path) -> None:
    (spec.parent / "lockfiles" / "cpu.lock.toml").write_text("garbage = [\n")


def _edit_pylock(spec: Path) -> None:
    (spec.parent / "lockfiles" / "pylock.cpu-docker.toml").write_text("edited = true\n")


def _forget_push(spec: Path) -> None:
    lock = spec.parent / "lockfiles" / "cpu.lock.toml"
    lines = lock.read_text().splitlines(keepends=True)
    lock.write_text("".join(line for line in lines if not line.startswith("repo_digest")))


def _reports(spec: Path) -> None:
    (spec.parent / "bad.json").write_text("not json")
    (spec.parent / "other.json").write_text(json.dumps({"checks": []}))
    (spec.parent / "list.json").write_text("[1, 2]")


# (id, argv with {spec} and {dir}, needs the lock, setup, exit code, words the message holds)
CASES = [
    (
        "unknown-env",
        ["build", "--target", "docker", "--env", "nosuch"],
        False,
        None,
        2,
        "no environment 'nosuch'",
    ),
    (
        "env-without-target",
        ["build", "--target", "windows", "--env", "cpu"],
        False,
        None,
        2,
        "has no target 'windows'",
    ),
    (
        "spec-missing",
        ["build", "--target", "docker", "--spec", "{dir}/nope.toml"],
        False,
        None,
        1,
        "not found",
    ),
    (
        "spec-is-dir",
        ["validate", "--target", "docker", "--spec", "{dir}"],
        False,
        None,
        1,
        "is a folder",
    ),
    ("render-spec-is-dir", ["render", "--spec", "{dir}"], False, None, 1, "is a folder"),
    (
        "lock-missing",
        ["build", "--target", "docker", "--env", "cpu"],
        False,
        None,
        1,
        "envbuilder lock --env cpu",
    ),
    (
        "lock-corrupt",
        ["validate", "--target", "docker", "--env", "cpu"],
        True,
        _corrupt_lock,
        1,
        "not valid TOML",
    ),
    (
        "pylock-edited",
        ["build", "--target", "docker", "--env", "cpu"],
        True,
        _edit_pylock,
        1,
        "does not match the sha256",
    ),
    (
        "validate-before-build-venv",
        ["validate", "--target", "native", "--env", "cpu"],
        True,
        None,
        1,
        "build it first",
    ),
    (
        "validate-before-build-wsl2",
        ["validate", "--target", "wsl2", "--env", "cpu"],
        True,
        None,
        1,
        "does not exist",
    ),
    (
        "push-bad-registry",
        ["push", "--env", "cpu", "--registry", "bad registry//"],
        True,
        None,
        2,
        "not a valid registry path",
    ),
    (
        "push-upper-case",
        ["push", "--env", "cpu", "--registry", "Host:5000/ML"],
        True,
        None,
        2,
        "in lower case",
    ),
    ("pull-no-digest", ["pull", "--env", "cpu"], True, _forget_push, 1, "records no pushed image"),
    (
        "compare-missing",
        ["compare", "{dir}/a.json", "{dir}/b.json"],
        False,
        None,
        1,
        "no such report",
    ),
    (
        "compare-not-json",
        ["compare", "{dir}/bad.json", "{dir}/other.json"],
        False,
        _reports,
        1,
        "not valid JSON",
    ),
    (
        "compare-not-report",
        ["compare", "{dir}/other.json", "{dir}/other.json"],
        False,
        _reports,
        1,
        "not a probe report",
    ),
    (
        "compare-json-list",
        ["compare", "{dir}/list.json", "{dir}/other.json"],
        False,
        _reports,
        1,
        "not a probe report",
    ),
    ("compare-folder", ["compare", "{dir}", "{dir}/other.json"], False, _reports, 1, "is a folder"),
    ("compare-one", ["compare", "{dir}/other.json"], False, _reports, 2, "at least two reports"),
    (
        "probe-json-folder",
        ["probe", "--expect", "cpu", "--json", "{dir}"],
        False,
        None,
        2,
        "is a folder",
    ),
    (
        "probe-lock-missing",
        ["probe", "--expect", "cpu", "--lock", "{dir}/nope.toml"],
        False,
        None,
        2,
        "no such file",
    ),
    (
        "validate-repeat-0",
        ["validate", "--target", "docker", "--repeat", "0"],
        False,
        None,
        2,
        "--repeat must be at least 1",
    ),
    ("explain-blank", ["explain", "  \n"], False, None, 2, "empty"),
]

ARGPARSE_CASES = [
    (["probe", "--label", "bad"], "--label wants key=value"),
    (["probe", "--repeat", "0"], "must be at least 1"),
    (["probe", "--level", "bogus"], "invalid choice: 'bogus'"),
    (["push", "--env", "cpu"], "arguments are required: --registry"),
    (["explain", ""], "an empty value"),
]


def _message(err: str) -> str:
    """The error message on stderr, checked to be short (the message, at most one more line:
    the spec's finding or the fix) and to start with "error:" -- never a traceback."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), err
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("argv", "needs_lock", "setup", "code", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_mistake_is_one_clear_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needs_lock: bool,
    setup: object,
    code: int,
    words: str,
) -> None:
    spec = _project(tmp_path, needs_lock)
    if callable(setup):
        setup(spec)
    args = [a.format(spec=spec, dir=tmp_path) for a in argv]
    if "--spec" not in args and argv[0] not in ("compare", "explain", "probe"):
        args += ["--spec", str(spec)]
    assert main(args) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in out
    assert words in _message(err)


@pytest.mark.parametrize(("argv", "words"), ARGPARSE_CASES, ids=lambda v: str(v))
def test_bad_option_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    words: str,
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"envbuilder {argv[0]}: error: " in err and words in err


def test_dead_docker_socket_says_how_to_start_the_engine(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _project(tmp_path, locked=True)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    assert main(["build", "--target", "docker", "--env", "cpu", "--spec", str(spec)]) == 1
    message = _message(capsys.readouterr().err)
    assert message.startswith("error: cannot reach the Docker engine at unix:///nonexistent")
    assert "point DOCKER_HOST at a running engine" in message


def test_unreachable_ssh_engine_is_one_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ssh:// goes through the system's ssh client (docker[ssh]); nothing listens on port 1.
    spec = _project(tmp_path, locked=True)
    monkeypatch.setenv("DOCKER_HOST", "ssh://nobody@127.0.0.1:1")
    assert main(["build", "--target", "docker", "--env", "cpu", "--spec", str(spec)]) == 1
    message = _message(capsys.readouterr().err)
    assert message.startswith("error: cannot reach the Docker engine at ssh://nobody@127.0.0.1:1")
    assert "paramiko" not in message


@pytest.mark.parametrize(
    "registry",
    [
        "127.0.0.1:5000",
        "127.0.0.1:5000/envbuilder-ci",
        "registry.example.com/ml/",
        "localhost:5000/a/b_c",
        "ghcr.io/my-org/sub.dir",
        "myuser",
    ],
)
def test_valid_registries_pass(registry: str) -> None:
    assert registry_repository(registry, "cpu-wsl2") == f"{registry.rstrip('/')}/cpu-wsl2"


@pytest.mark.parametrize(
    "registry",
    [
        "https://host/x",
        "host/x@sha256:ab",
        "host/UPPER",
        "two words/x",
        "host//x",
        "host:port/x",
        "-host/x",
    ],
)
def test_invalid_registries_are_usage_errors(registry: str) -> None:
    with pytest.raises(UsageError, match="--registry"):
        registry_repository(registry, "cpu")


def test_check_unknown_env_is_a_usage_error_even_when_the_spec_has_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Filtering by an unknown name used to hide every env finding and report "ok" (exit 0).
    spec = tmp_path / "environments.toml"
    spec.write_text(
        '[env.x]\naccelerator = "cpu"\npython = "3.11"\npackages = ["numpy"]\n'
        'targets = ["native"]\nrccl = { RCCL_ALGO = "Ring" }\n'
    )
    assert main(["check", "--spec", str(spec), "--env", "nosuch"]) == 2
    assert "no environment 'nosuch'; known: x" in capsys.readouterr().err
    assert main(["check", "--spec", str(spec), "--env", "x"]) == 1
    assert "RCCL_ALGO is not read by RCCL" in capsys.readouterr().out

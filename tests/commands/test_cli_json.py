"""`--json` on every command that prints results (issue 17): stdout holds exactly one JSON
object (json.loads of the whole stdout), of the shape envbuilder/data/schemas/cli.schema.json gives
(doctor, probe and compare: their own documents), with the exit code the command has without
--json; an error gives the error object instead, and the `error:` line on stderr still.

Every command runs as a real process (`python -m envbuilder`) on real files: the shipped spec and
locks copied to a temp folder, a small env of two local wheels (offline: lock, build of a native
venv, validate), and for push/pull a tiny image on the real Docker engine and local registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from shipped import copy_shipped, project_parts
from test_lock_support import FAKE_INDEX_URL, make_wheel

from envbuilder.commands._cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "envbuilder" / "data" / "schemas"
CLI_SCHEMA = json.loads((SCHEMAS / "cli.schema.json").read_text(encoding="utf-8"))

SMALL_SPEC = """
[indexes.fake]
url = "{url}"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu", "tinydep==2.0"]
index_pins = {{ tinytorch = "fake", tinydep = "fake" }}
targets = ["native"]
"""


@dataclass(frozen=True)
class Result:
    code: int
    obj: dict[str, Any]
    stderr: str


def run_json(
    cwd: Path,
    *argv: str,
    env: dict[str, str] | None = None,
    schema: dict[str, Any] | None = CLI_SCHEMA,
) -> Result:
    """Run `envbuilder ARGV` in `cwd`; stdout must be one JSON object (valid against `schema`)."""
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    try:
        obj = json.loads(proc.stdout)  # one document: a second object would not parse
    except ValueError as exc:
        raise AssertionError(
            f"stdout is not one JSON object ({exc}):\n{proc.stdout}\nstderr:\n{proc.stderr}"
        ) from None
    assert isinstance(obj, dict), proc.stdout
    if schema is not None:
        jsonschema.validate(obj, schema, cls=jsonschema.Draft202012Validator)
    return Result(proc.returncode, obj, proc.stderr)


def _copy_shipped(dest: Path, rendered: bool = True) -> Path:
    """The shipped spec and lockfiles (and rendered folders) in `dest`; returns `dest`."""
    return copy_shipped(dest, project_parts() if rendered else ("environments.toml", "lockfiles"))


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return _copy_shipped(tmp_path / "shipped")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(project folder, environment): a spec whose one env resolves offline from a folder of
    two wheels; not locked yet."""
    root = tmp_path_factory.mktemp("small")
    mirror = root / "mirror"
    make_wheel(mirror, "tinytorch", "1.0+cpu", requires=("tinydep",))
    make_wheel(mirror, "tinydep", "2.0")
    project = root / "project"
    project.mkdir()
    (project / "environments.toml").write_text(
        SMALL_SPEC.format(url=FAKE_INDEX_URL, mirror=mirror), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILDER_MIRROR_")}
    env["ENVBUILDER_CACHE"] = str(root / "cache")
    return project, env


# --- every command has it ------------------------------------------------------------------------


#: Commands without --json, and why: their output is for a shell to read.
NO_JSON = {"completion": "prints a completion script, which the shell sources"}


@pytest.mark.parametrize("name", [n for n in COMMANDS if n not in NO_JSON])
def test_every_command_takes_json(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", name, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--json" in proc.stdout


# --- check ---------------------------------------------------------------------------------------


def test_check_json(shipped: Path) -> None:
    ok = run_json(shipped, "check", "--json")
    assert ok.code == 0 and ok.obj["ok"] is True
    assert ok.obj["envs"] == ["cpu", "rocm714", "mi300x"]
    assert [(m["env"], m["rocm"], m["install_model"]) for m in ok.obj["install_models"]] == [
        ("rocm714", "7.14.1", "pip-sdk"),
        ("mi300x", "10.1.0", "pip-sdk"),
    ]
    spec = shipped / "environments.toml"
    spec.write_text(spec.read_text().replace('python = "3.11"', "python = 3.11", 1))
    bad = run_json(shipped, "check", "--json")
    assert bad.code == 1 and bad.obj["ok"] is False
    assert any(f["severity"] == "error" for f in bad.obj["findings"])


# --- lock ----------------------------------------------------------------------------------------


def test_lock_with_nothing_to_do(shipped: Path) -> None:
    result = run_json(shipped, "lock", "--env", "cpu", "--json")
    assert result.code == 0
    assert result.obj == {
        "command": "lock",
        "check": False,
        "ok": True,
        "envs": [
            {
                "env": "cpu",
                "ok": True,
                "status": "current",
                "resolved": [],
                "written": [],
                "removed": [],
                "warnings": [],
                "changes": [],
                "error": None,
            }
        ],
    }


def test_lock_check_json(shipped: Path) -> None:
    current = run_json(shipped, "lock", "--check", "--json")
    assert current.code == 0 and current.obj["check"] is True and current.obj["ok"] is True
    by_env = {e["env"]: e for e in current.obj["envs"]}
    assert by_env["cpu"] == {"env": "cpu", "ok": True, "stale": [], "notes": []}
    assert by_env["rocm714"]["notes"]  # never locked: a note, not a failure
    (shipped / "lockfiles" / "pylock.cpu-docker.toml").write_text("edited = true\n")
    stale = run_json(shipped, "lock", "--check", "--json")
    assert stale.code == 1 and stale.obj["ok"] is False
    cpu = next(e for e in stale.obj["envs"] if e["env"] == "cpu")
    assert cpu["ok"] is False and cpu["stale"]


def test_lock_writes_then_is_current(small: tuple[Path, dict[str, str]]) -> None:
    project, env = small
    first = run_json(project, "lock", "--json", env=env)
    assert first.code == 0, first.stderr
    entry = first.obj["envs"][0]
    assert entry["status"] == "written" and entry["resolved"] == ["native"]
    assert sorted(entry["written"]) == [
        "lockfiles/pylock.small-native.toml",
        "lockfiles/small.lock.toml",
    ]
    again = run_json(project, "lock", "--json", env=env)
    assert again.obj["envs"][0]["status"] == "current"


# --- render --------------------------------------------------------------------------------------


def test_render_json(shipped: Path) -> None:
    current = run_json(shipped, "render", "--check", "--json")
    assert current.code == 0 and current.obj["ok"] is True and current.obj["unchanged"]
    gone = "dockerfiles/cpu/Dockerfile"
    (shipped / gone).unlink()
    stale = run_json(shipped, "render", "--check", "--json")
    assert stale.code == 1 and stale.obj["ok"] is False and stale.obj["missing"] == [gone]
    assert not (shipped / gone).exists()  # --check writes nothing
    wrote = run_json(shipped, "render", "--json")
    assert wrote.code == 0 and wrote.obj["check"] is False and wrote.obj["written"] == [gone]


# --- build and validate (a native venv of the small env) ---------------------------------------


def test_build_and_validate_json(small: tuple[Path, dict[str, str]]) -> None:
    project, env = small
    assert run_json(project, "lock", "--json", env=env).code == 0
    built = run_json(project, "build", "--target", "native", "--env", "small", "--json", env=env)
    assert built.code == 0, built.stderr
    venv = project / ".envbuilder" / "venvs" / "small-native"
    assert built.obj["artifacts"] == [
        {
            "env": "small",
            "target": "native",
            "reference": str(venv),
            "digest": None,
            "state": "built",
            "sbom": str(project / "reports" / "small.native.cdx.json"),
        }
    ]
    assert (
        json.loads((project / "reports" / "small.native.cdx.json").read_text())["bomFormat"]
        == "CycloneDX"
    )
    again = run_json(project, "build", "--target", "native", "--env", "small", "--json", env=env)
    assert again.obj["artifacts"][0]["state"] == "up to date"
    # The venv has no torch: the probe fails, and validate exits 1 with ok false.
    checked = run_json(
        project, "validate", "--target", "native", "--env", "small", "--json", env=env
    )
    report = project / "reports" / "small.native.json"
    assert checked.obj["reports"] == [
        {"env": "small", "target": "native", "status": "fail", "report": str(report)}
    ]
    assert checked.code == 1 and checked.obj["ok"] is False
    assert json.loads(report.read_text())["status"] == "fail"


# --- push and pull (a tiny image on the real engine and the local registry) ---------------------

#: The smallest image the docker target accepts: the lock label, nothing installed.
TINY_DOCKERFILE = """\
FROM debian:bookworm-slim
COPY envbuilder/ /tmp/envbuilder/
ARG ENVBUILDER_LOCK_SHA256
LABEL org.envbuilder.lock-sha256=$ENVBUILDER_LOCK_SHA256
"""


def test_build_push_pull_docker_json(tmp_path: Path, docker_client: Any, registry: str) -> None:
    from test_docker_target import make_project

    project = make_project(tmp_path / "demo", dockerfile=TINY_DOCKERFILE).root
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text("{}")
    env = {**os.environ, "DOCKER_CONFIG": str(config), "ENVBUILDER_CACHE": str(tmp_path / "c")}
    built = run_json(project, "build", "--target", "docker", "--env", "demo", "--json", env=env)
    assert built.code == 0, built.stderr
    artifact = built.obj["artifacts"][0]
    tag, image_id = artifact["reference"], artifact["digest"]
    try:
        assert tag.startswith("envbuilder/demo:") and image_id.startswith("sha256:")
        repository = f"{registry}/envbuilder-p3-json"
        pushed = run_json(
            project, "push", "--env", "demo", "--registry", repository, "--json", env=env
        )
        assert pushed.code == 0, pushed.stderr
        entry = pushed.obj["pushed"][0]
        assert entry["reference"].startswith(f"{repository}/demo@sha256:")
        assert entry["reference"].endswith(entry["digest"])
        docker_client.images.remove(tag)  # pull must bring the tag back
        pulled = run_json(project, "pull", "--env", "demo", "--json", env=env)
        assert pulled.code == 0, pulled.stderr
        assert pulled.obj["pulled"] == [
            {"env": "demo", "target": "docker", "reference": image_id, "digest": image_id}
        ]
        assert docker_client.images.get(tag).id == image_id
    finally:
        docker_client.images.remove(image_id, force=True)


# --- compare, probe, doctor, explain -------------------------------------------------------------


def test_compare_json_to_stdout(tmp_path: Path) -> None:
    reports = [
        str(ROOT / "tests" / "data" / "compare" / n) for n in ("cpu.docker.json", "cpu.native.json")
    ]
    to_file = tmp_path / "c.json"
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "compare", *reports, "--json", str(to_file)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "baseline:" in proc.stdout  # the table, as before
    result = run_json(tmp_path, "compare", *reports, "--json", "-", schema=None)
    assert result.code == 0
    assert result.obj == json.loads(to_file.read_text())  # the same document as the file
    assert not (tmp_path / "-").exists()


def test_compare_write_error_gives_one_error_object(tmp_path: Path) -> None:
    """The comparison is printed after the files are written: a file that cannot be written
    gives the error object alone, not the result and then an error."""
    reports = [
        str(ROOT / "tests" / "data" / "compare" / n) for n in ("cpu.docker.json", "cpu.native.json")
    ]
    (tmp_path / "in-the-way").write_text("a file where a folder should be")
    result = run_json(
        tmp_path,
        "compare",
        *reports,
        "--json",
        "-",
        "--markdown",
        str(tmp_path / "in-the-way" / "c.md"),
    )
    assert result.code == 1
    assert result.obj["command"] == "compare" and result.obj["error"]["exit_code"] == 1
    assert "in-the-way" in result.obj["error"]["message"]
    assert "error:" in result.stderr


def test_probe_json_to_stdout(tmp_path: Path) -> None:
    schema = json.loads((SCHEMAS / "probe-report.schema.json").read_text(encoding="utf-8"))
    result = run_json(
        tmp_path, "probe", "--expect", "cpu", "--only", "device", "--json", "-", schema=schema
    )
    assert result.code == (0 if result.obj["status"] == "pass" else 1)
    assert result.obj["options"]["only"] == ["device"]
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_doctor_json(tmp_path: Path) -> None:
    schema = json.loads((SCHEMAS / "doctor.schema.json").read_text(encoding="utf-8"))
    result = run_json(tmp_path, "doctor", "--json", schema=schema)
    assert result.code == (1 if result.obj["status"] == "fail" else 0)


def test_explain_json(tmp_path: Path) -> None:
    known = run_json(tmp_path, "explain", "--json", "RuntimeError: No HIP GPUs are available")
    assert known.code == 0 and known.obj["ok"] is True and known.obj["matches"]
    unknown = run_json(tmp_path, "explain", "--json", "nothing anyone has seen")
    assert unknown.code == 1 and unknown.obj["known"] is False
    listed = run_json(tmp_path, "explain", "--list", "--json")
    assert listed.code == 0 and len(listed.obj["messages"]) > 10


# --- errors --------------------------------------------------------------------------------------

ERRORS: list[tuple[Sequence[str], int, str, str]] = [
    (
        ["build", "--target", "docker", "--env", "nosuch", "--json"],
        2,
        "UsageError",
        "no environment 'nosuch'",
    ),
    (["lock", "--json", "--spec", "missing.toml"], 1, "SpecError", "not found"),
    (["lock", "--check", "--upgrade", "--json"], 2, "UsageError", "--check cannot be combined"),
    (
        ["render", "--json", "--env", "cpu", "--target", "windows"],
        2,
        "UsageError",
        "has none of the targets",
    ),
    (["explain", "--json"], 2, "UsageError", "give a MESSAGE"),
    (
        ["probe", "--expect", "cpu", "--lock", "none.toml", "--json", "-"],
        2,
        "UsageError",
        "no such file",
    ),
]


@pytest.mark.parametrize(
    ("argv", "code", "kind", "words"), ERRORS, ids=[" ".join(a[:2]) for a, *_ in ERRORS]
)
def test_an_error_is_one_error_object(
    shipped: Path, argv: Sequence[str], code: int, kind: str, words: str
) -> None:
    result = run_json(shipped, *argv)
    assert result.code == code
    assert result.obj["ok"] is False and result.obj["command"] == argv[0]
    assert result.obj["error"]["kind"] == kind
    assert result.obj["error"]["exit_code"] == code
    assert words in result.obj["error"]["message"]
    assert f"error: {result.obj['error']['message']}" in result.stderr


def test_without_json_an_error_prints_nothing_on_stdout(shipped: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envbuilder", "build", "--target", "docker", "--env", "nosuch"],
        cwd=shipped,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""

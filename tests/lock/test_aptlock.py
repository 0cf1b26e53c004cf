"""apt versions in the lock (envbuilder.lock.apt): which stages install what, the resolution in a
container of the pinned base, the lock's tables, `lock --check`, rendering `pkg=version`, and a
build whose locked version the archive no longer serves."""

from __future__ import annotations

import dataclasses
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from test_lock_support import make_wheel, write_spec

from envbuilder.commands._cli import main
from envbuilder.core.errors import BuildError, LockError
from envbuilder.core.project import Project
from envbuilder.lock import apt as aptlock
from envbuilder.lock import aptsnapshot, lockfile, resolve
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry

ROOT = Path(__file__).resolve().parents[2]
BASE = "debian:bookworm-slim"

#: `apt-get install --simulate` as bookworm prints it (trimmed), inside resolve_script's marks.
SIMULATED = """\
### envbuilder installed
libc6 2.36-9+deb12u9 ii
python3-old 1.0 rc
ca-certificates 20230311 ii
### envbuilder stage docker/runtime
Reading package lists...
The following NEW packages will be installed:
  libpython3.11-minimal python3 python3.11-minimal
Inst libc6 [2.36-9+deb12u9] (2.36-9+deb12u10 Debian:12.12/stable [amd64])
Inst libpython3.11-minimal (3.11.2-6+deb12u6 Debian-Security:12/stable-security [amd64])
Inst python3.11-minimal (3.11.2-6+deb12u6 Debian:12.12/stable [amd64])
Inst python3 (3.11.2-1+b1 Debian:12.12/stable [amd64])
Conf python3 (3.11.2-1+b1 Debian:12.12/stable [amd64])
### envbuilder stage docker/build
Inst libc6 [2.36-9+deb12u9] (2.36-9+deb12u10 Debian:12.12/stable [amd64])
Inst libpython3.11-minimal (3.11.2-6+deb12u6 Debian-Security:12/stable-security [amd64])
Inst python3.11-minimal (3.11.2-6+deb12u6 Debian:12.12/stable [amd64])
Inst python3 (3.11.2-1+b1 Debian:12.12/stable [amd64])
Inst python3-venv (3.11.2-1+b1 Debian:12.12/stable [amd64])
"""

STAGES = [
    aptlock.AptStage("runtime", (), ("python3", "ca-certificates")),
    aptlock.AptStage("build", ("runtime",), ("python3", "python3-venv")),
]


def test_stages_of_the_shipped_plans() -> None:
    env = load_spec(ROOT / "environments.toml").env("cpu")
    assert aptlock.plan_apt_stages(env, "docker") == [
        aptlock.AptStage("runtime", (), ("python3",)),
        aptlock.AptStage("build", ("runtime",), ("python3", "python3-venv")),
    ]
    wsl = aptlock.plan_apt_stages(env, "wsl2")
    assert [s.name for s in wsl] == ["rootfs", "build"]
    assert {"ca-certificates", "systemd"} <= set(wsl[0].packages)
    assert aptlock.plan_apt_stages(env, "native") == []


def test_each_stage_pins_what_it_adds_and_what_it_names() -> None:
    pins = aptlock.parse_resolution(SIMULATED, {"docker": STAGES})["docker"]
    assert pins["runtime"] == {
        "ca-certificates": "20230311",  # named, already in the base: its installed version
        "libc6": "2.36-9+deb12u10",  # an upgrade of a base package is pinned too
        "libpython3.11-minimal": "3.11.2-6+deb12u6",
        "python3": "3.11.2-1+b1",
        "python3.11-minimal": "3.11.2-6+deb12u6",
    }
    # The build stage adds python3-venv; python3 (installed by runtime) keeps its version.
    assert pins["build"] == {"python3": "3.11.2-1+b1", "python3-venv": "3.11.2-1+b1"}


def test_a_package_apt_cannot_resolve_is_an_error() -> None:
    stages = [aptlock.AptStage("runtime", (), ("no-such-package",))]
    with pytest.raises(LockError, match="no version of no-such-package"):
        aptlock.parse_resolution(SIMULATED, {"docker": stages})


def test_coverage() -> None:
    pins = {
        "runtime": {"python3": "1", "ca-certificates": "2"},
        "build": {"python3": "1", "python3-venv": "1"},
    }
    assert aptlock.coverage_problem(STAGES, pins) is None
    assert "stage 'build' are not locked" in str(
        aptlock.coverage_problem(STAGES, {"runtime": pins["runtime"]})
    )
    assert "installs python3-venv" in str(
        aptlock.coverage_problem(STAGES, {**pins, "build": {"python3": "1"}})
    )
    assert "which the plan lacks" in str(aptlock.coverage_problem(STAGES, {**pins, "x": {}}))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"runtime": {"Python3": "1"}}, "'Python3' is not a Debian package name"),
        ({"runtime": {"python3": "1 && rm -rf /"}}, "is not a Debian version"),
        ({"runtime": {"python3": 3}}, "is not a Debian version"),
        ({"Run time": {"python3": "1"}}, "must be a stage name"),
        ("python3", "must be a table of stages"),
    ],
)
def test_lock_tables_are_checked(table: object, message: str) -> None:
    with pytest.raises(LockError, match=message):
        aptlock.parse_apt_table(table, "cpu.lock.toml: targets.docker")


def test_lock_round_trip_with_apt_tables() -> None:
    lock = lockfile.read_env_lock(ROOT / "lockfiles" / "cpu.lock.toml")
    assert lock.targets["docker"].apt["runtime"]["python3"]  # the committed lock pins it
    again = lockfile.parse_env_lock(tomllib.loads(lockfile.dump_env_lock(lock).decode()), "x")
    assert again == lock
    text = lockfile.dump_env_lock(lock).decode()
    assert "[targets.docker.apt.runtime]\n" in text and '"python3.11" = "' in text


def test_unserved_version_message_names_the_package() -> None:
    apt_said = BuildError(
        "docker build failed at step 4/20 (RUN apt-get ...): returned 100\n"
        "  last output of that step:\n"
        "    E: Version '3.11.2-1+gone' for 'python3' was not found"
    )
    explained = str(aptlock.explain_build_failure(apt_said, "cpu", "docker"))
    assert explained.startswith(
        "cpu/docker: the package archive no longer serves python3 "
        "3.11.2-1+gone, which lockfiles/cpu.lock.toml pins"
    )
    assert "envbuilder lock --env cpu --refresh-apt" in explained
    other = BuildError("docker build failed at step 9/20: exit 1")
    assert aptlock.explain_build_failure(other, "cpu", "docker") is other


# ----------------------------------------------------------------------------- engine + archive


@pytest.mark.network
def test_resolve_in_a_container_of_the_base(docker_client: Any) -> None:
    env = load_spec(ROOT / "environments.toml").env("cpu")
    stages = aptlock.plan_apt_stages(env, "docker")
    pins = aptlock.resolve_apt(docker_client, BASE, {"docker": stages, "none": []}, {})
    assert pins["none"] == {}
    runtime, build = pins["docker"]["runtime"], pins["docker"]["build"]
    assert {"python3", "python3.11", "libpython3.11-stdlib"} <= set(runtime)
    assert build["python3"] == runtime["python3"] and "python3-venv" in build
    assert not set(build) - {"python3"} & set(runtime)  # build adds only what is new


def _apt_project(root: Path) -> Project:
    mirror = root / "mirror"
    make_wheel(mirror, "tinytorch", "1.0+cpu")
    return write_spec(
        root / "proj",
        f"""
[indexes.fake]
url = "https://wheels.example.invalid/whl/fake"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu"]
index_pins = {{ tinytorch = "fake" }}
targets = ["docker"]

[env.small.docker]
base = "{BASE}"
""",
    )


@pytest.mark.network
def test_lock_records_apt_versions_and_check_requires_them(
    docker_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _apt_project(tmp_path)
    spec = str(project.spec_path)
    assert main(["-q", "lock", "--spec", spec]) == 0
    lock_path = project.env_lock("small")
    lock = lockfile.read_env_lock(lock_path)
    assert set(lock.targets["docker"].apt) == {"runtime", "build"}
    assert main(["-q", "lock", "--spec", spec, "--check"]) == 0
    assert main(["-q", "render", "--spec", spec]) == 0
    rendered = registry.get("docker").rendered_folder(project, "small")
    dockerfile = (rendered / "Dockerfile").read_text()
    assert f"python3={lock.targets['docker'].apt['runtime']['python3']} \\" in dockerfile

    # A lock without them (an older envbuilder) is stale; `lock` writes them again. (An edit by
    # hand would not match targets.docker.apt_sha256: test_safety_lock.py.)
    text = lock_path.read_text()
    docker = lock.targets["docker"]
    without = dataclasses.replace(docker, apt={"runtime": docker.apt["runtime"]})
    lockfile.write_env_lock(
        project, dataclasses.replace(lock, targets={**lock.targets, "docker": without})
    )
    capsys.readouterr()
    assert main(["-q", "lock", "--spec", spec, "--check"]) == 1
    assert (
        "small/docker: the apt packages of stage 'build' are not locked" in capsys.readouterr().out
    )
    assert main(["-q", "lock", "--spec", spec]) == 0
    assert lock_path.read_text() == text
    # --refresh-apt resolves them again on the same base (the archive did not move meanwhile).
    assert main(["-q", "lock", "--spec", spec, "--refresh-apt"]) == 0
    assert lock_path.read_text() == text
    assert main(["-q", "lock", "--spec", spec, "--check", "--refresh-apt"]) == 2
    assert main(["-q", "lock", "--spec", spec, "--refresh-apt", "--no-base-digest"]) == 2


@pytest.mark.slow
@pytest.mark.network
def test_build_fails_naming_a_version_the_archive_no_longer_serves(
    docker_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cpu"
    root.mkdir()
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    spec = str(root / "environments.toml")
    lock_path = root / "lockfiles" / "cpu.lock.toml"
    version = lockfile.read_env_lock(lock_path).targets["docker"].apt["runtime"]["python3"]
    gone = version + "~gone"
    # the pin as a lock of that time recorded it (its digest too: a hand edit is refused)
    lock = lockfile.read_env_lock(lock_path)
    docker = lock.targets["docker"]
    apt = {**docker.apt, "runtime": {**docker.apt["runtime"], "python3": gone}}
    lockfile.write_env_lock(
        Project.from_spec(spec),
        dataclasses.replace(
            lock, targets={**lock.targets, "docker": dataclasses.replace(docker, apt=apt)}
        ),
    )
    assert main(["-q", "render", "--spec", spec, "--env", "cpu", "--target", "docker"]) == 0
    assert f"'python3={gone}'" in (root / "dockerfiles" / "cpu" / "Dockerfile").read_text()
    capsys.readouterr()
    assert main(["-q", "build", "--spec", spec, "--target", "docker", "--env", "cpu"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    # The shipped cpu image reads the snapshot archive of its lock's time (aptsnapshot).
    assert "the snapshot archive apt reads (http://snapshot.debian.org/archive/debian/" in err
    assert f"does not serve python3 {gone}, which lockfiles/cpu.lock.toml pins" in err
    assert "envbuilder lock --env cpu --refresh-apt" in err


_PIN_LINE = re.compile(r"^\s+'?[a-z0-9][a-z0-9.+-]*=[^ ]+'? \\$")


def _apt_lines(project: Project, spec: str) -> tuple[list[str], list[str]]:
    """The rendered Dockerfile's apt pin lines and snapshot source lines."""
    assert main(["-q", "render", "--spec", spec]) == 0
    text = (registry.get("docker").rendered_folder(project, "small") / "Dockerfile").read_text()
    lines = text.splitlines()
    return [x for x in lines if _PIN_LINE.match(x)], [x for x in lines if "snapshot." in x]


@pytest.mark.network
def test_a_relock_that_keeps_the_apt_pins_keeps_their_snapshot(
    docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: a bump moves source_date_epoch (a newer wheel locked); the apt pins still fit,
    so they are not resolved again and the lock keeps the moment they were resolved in
    (apt_epoch): the image's apt steps, snapshot sources included, render as before."""
    project = _apt_project(tmp_path)
    spec = str(project.spec_path)
    first = 1795456873  # the shipped cpu lock's time: the snapshot replica serves it
    monkeypatch.setattr(resolve, "source_date_epoch", lambda _pylocks: first)
    assert main(["-q", "lock", "--spec", spec]) == 0
    pins, sources = _apt_lines(project, spec)
    assert pins and sources and all(aptsnapshot.timestamp(first) in x for x in sources)

    resolved: list[str] = []
    real = aptlock.resolve_apt

    def counted(client: Any, base: str, *rest: Any) -> dict[str, dict[str, dict[str, str]]]:
        resolved.append(base)
        return real(client, base, *rest)

    monkeypatch.setattr(aptlock, "resolve_apt", counted)
    monkeypatch.setattr(resolve, "source_date_epoch", lambda _pylocks: first + 86400)
    assert main(["-q", "lock", "--spec", spec, "--upgrade-package", "tinytorch"]) == 0
    lock = lockfile.read_env_lock(project.env_lock("small"))
    assert (lock.source_date_epoch, lock.apt_epoch, resolved) == (first + 86400, first, [])
    assert "apt_epoch = 1795456873" in project.env_lock("small").read_text()
    assert _apt_lines(project, spec) == (pins, sources)

    # Resolving the pins again (here --refresh-apt) moves them to the new time.
    assert main(["-q", "lock", "--spec", spec, "--refresh-apt"]) == 0
    lock = lockfile.read_env_lock(project.env_lock("small"))
    assert resolved and lock.apt_epoch is None and lock.apt_snapshot_epoch == first + 86400
    assert all(aptsnapshot.timestamp(first + 86400) in x for x in _apt_lines(project, spec)[1])

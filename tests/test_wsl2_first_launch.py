"""What validation takes from a `.wsl` before running the probe: the oobe command WSL runs at the
first launch, and the user WSL then starts as (small tars made with tests/test_wsltar.py's
helpers; the Docker run of the same is in tests/test_wsl2_docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_wsltar import BAKED_USER, PASSWD, WSL_CONF, M, build, rootfs  # tests/ is on sys.path

from envbuilder.errors import ValidationError
from envbuilder.targets import wsl2


def with_files(files: dict[str, bytes]) -> list[M]:
    """rootfs() with these members (path -> content) replaced."""
    return [m for m in rootfs() if m.name not in files] + [M(n, d) for n, d in files.items()]


def test_modern_format_starts_as_the_uid_the_oobe_command_creates(tmp_path: Path) -> None:
    launch = wsl2.first_launch(build(tmp_path, rootfs()).path)
    assert launch == wsl2.FirstLaunch("/usr/lib/wsl/oobe.sh", "1000")


def test_a_user_already_in_passwd_is_named(tmp_path: Path) -> None:
    path = build(tmp_path, with_files({"etc/passwd": PASSWD + BAKED_USER})).path
    assert wsl2.first_launch(path) == wsl2.FirstLaunch("/usr/lib/wsl/oobe.sh", "envbuilder")


def test_wsl_conf_default_user_wins(tmp_path: Path) -> None:
    conf = WSL_CONF + b"[user]\ndefault = someone\n"
    path = build(tmp_path, with_files({"etc/wsl.conf": conf})).path
    assert wsl2.default_user(path) == "someone"


def test_no_default_uid_starts_as_root(tmp_path: Path) -> None:
    conf = b"[oobe]\ncommand = /usr/lib/wsl/oobe.sh\n"
    path = build(tmp_path, with_files({"etc/wsl-distribution.conf": conf})).path
    assert wsl2.first_launch(path) == wsl2.FirstLaunch("/usr/lib/wsl/oobe.sh", "root")


def test_user_of_uid_after_the_first_launch() -> None:
    assert wsl2.user_of_uid(PASSWD + BAKED_USER, 1000) == "envbuilder"
    with pytest.raises(ValidationError, match="no user with uid 1000 after its first launch"):
        wsl2.user_of_uid(PASSWD, 1000)


def test_oobe_command_runs_through_sh() -> None:
    assert wsl2.first_launch_argv("/usr/lib/wsl/oobe.sh --quiet") == (
        "/bin/sh", "-c", "/usr/lib/wsl/oobe.sh --quiet")

"""What validation takes from a `.wsl` before running the probe: the oobe command WSL runs at the
first launch, and the user WSL then starts as (small tars made with tests/image/test_wsl_image.py's
helpers; the Docker run of the same is in tests/builders/test_wsl2_docker.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from test_wsl_image import BAKED_USER, PASSWD, WSL_CONF, M, build, rootfs  # tests/ is on sys.path

from envbuilder.builders import wsl2_run
from envbuilder.core.errors import ValidationError
from envbuilder.host import wslexe


def with_files(files: dict[str, bytes]) -> list[M]:
    """rootfs() with these members (path -> content) replaced."""
    return [m for m in rootfs() if m.name not in files] + [M(n, d) for n, d in files.items()]


def test_modern_format_starts_as_the_uid_the_oobe_command_creates(tmp_path: Path) -> None:
    launch = wsl2_run.first_launch(build(tmp_path, rootfs()).path)
    assert launch == wsl2_run.FirstLaunch("/usr/lib/wsl/oobe.sh", "1000")


def test_a_user_already_in_passwd_is_named(tmp_path: Path) -> None:
    path = build(tmp_path, with_files({"etc/passwd": PASSWD + BAKED_USER})).path
    assert wsl2_run.first_launch(path) == wsl2_run.FirstLaunch("/usr/lib/wsl/oobe.sh", "envbuilder")


def test_wsl_conf_default_user_wins(tmp_path: Path) -> None:
    conf = WSL_CONF + b"[user]\ndefault = someone\n"
    path = build(tmp_path, with_files({"etc/wsl.conf": conf})).path
    assert wsl2_run.default_user(path) == "someone"


def test_no_default_uid_starts_as_root(tmp_path: Path) -> None:
    conf = b"[oobe]\ncommand = /usr/lib/wsl/oobe.sh\n"
    path = build(tmp_path, with_files({"etc/wsl-distribution.conf": conf})).path
    assert wsl2_run.first_launch(path) == wsl2_run.FirstLaunch("/usr/lib/wsl/oobe.sh", "root")


def test_user_of_uid_after_the_first_launch() -> None:
    assert wsl2_run.user_of_uid(PASSWD + BAKED_USER, 1000) == "envbuilder"
    with pytest.raises(ValidationError, match="no user with uid 1000 after its first launch"):
        wsl2_run.user_of_uid(PASSWD, 1000)


def test_oobe_command_runs_through_sh() -> None:
    assert wsl2_run.first_launch_argv("/usr/lib/wsl/oobe.sh --quiet") == (
        "/bin/sh",
        "-c",
        "/usr/lib/wsl/oobe.sh --quiet",
    )


# --- the Windows engine, with the recording stand-in for wsl.exe (as tests/host/test_wslexe.py) ---


class RecordingWsl:
    """Records wsl.exe command lines; the distro's /etc/passwd has the user after the first
    launch; the first-launch command exits with `oobe_exit`."""

    def __init__(self, oobe_exit: int = 0) -> None:
        self.oobe_exit = oobe_exit
        self.calls: list[list[str]] = []

    def __call__(
        self, argv: Sequence[str], stdin: bytes | None, timeout: float | None
    ) -> wslexe.Completed:
        self.calls.append(list(argv))
        if argv[-3:] == ["/bin/sh", "-c", "/usr/lib/wsl/oobe.sh"]:
            return wslexe.Completed(self.oobe_exit, b"", b"useradd: failure" * self.oobe_exit)
        if argv[-2:] == ["cat", "/etc/passwd"]:
            return wslexe.Completed(0, PASSWD + BAKED_USER, b"")
        if "cat" in argv:
            return wslexe.Completed(0, b'{"status": "pass"}', b"")
        return wslexe.Completed(0, b"", b"")


def test_wsl_engine_runs_the_first_launch_as_root_then_the_probe_as_the_user() -> None:
    wsl = RecordingWsl()
    engine = wsl2_run.WslEngine(wslexe.WslExe("wsl.exe", wsl), "envbuilder-cpu")
    engine.first_launch("/usr/lib/wsl/oobe.sh", lambda *a: None)
    run = wsl2_run.ProbeRun(("/bin/sh", "-lc", "true"), {"/tmp/envbuilder/probe.pyz": b"zip"})
    code, _output, report = engine.run(run, "1000", lambda *a: None)
    assert (code, report) == (0, b'{"status": "pass"}')
    assert wsl.calls[0] == [
        "wsl.exe",
        "--distribution",
        "envbuilder-cpu",
        "--user",
        "root",
        "--exec",
        "/bin/sh",
        "-c",
        "/usr/lib/wsl/oobe.sh",
    ]
    probe = next(c for c in wsl.calls if c[-3:] == ["/bin/sh", "-lc", "true"])
    assert probe[:5] == ["wsl.exe", "--distribution", "envbuilder-cpu", "--user", "envbuilder"]


def test_wsl_engine_describes_itself_for_the_report() -> None:
    """The report's `engine` object on Windows: wsl and its version (none from an inbox WSL,
    whose `wsl --version` fails: RecordingWsl prints nothing)."""
    engine = wsl2_run.WslEngine(wslexe.WslExe("wsl.exe", RecordingWsl()), "envbuilder-cpu")
    assert engine.describe() == {"product": "wsl", "version": ""}


def test_wsl_engine_failing_first_launch_is_a_validation_error() -> None:
    engine = wsl2_run.WslEngine(
        wslexe.WslExe("wsl.exe", RecordingWsl(oobe_exit=1)), "envbuilder-cpu"
    )
    with pytest.raises(ValidationError, match=r"(?s)failed \(exit 1\).*useradd: failure"):
        engine.first_launch("/usr/lib/wsl/oobe.sh", lambda *a: None)

"""envbuilder.host.wslexe: the command lines given to wsl.exe and how its output is read.

wsl.exe cannot run here (Linux): a recording runner stands in for it -- the one stand-in the
project allows. Its canned outputs are what wsl.exe prints: UTF-16LE for its own messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from envbuilder.core.errors import EngineError, UsageError
from envbuilder.host import wslexe

EXE = r"C:\Windows\System32\wsl.exe"
VERSION_244 = (
    "WSL version: 2.4.4.0\r\nKernel version: 5.15.167.4-1\r\nWSLg version: 1.0.65\r\n"
    "MSRDC version: 1.2.5620\r\nDirect3D version: 1.611.1-81528511\r\n"
    "Windows version: 10.0.26100.2605\r\n"
)


def utf16(text: str) -> bytes:
    return text.encode("utf-16-le")


class FakeWsl:
    """Records calls; answers from a table keyed by the second argument (the wsl option)."""

    def __init__(self, version: str | None = VERSION_244, distros: Sequence[str] = ()) -> None:
        self.version = version
        self.distros = list(distros)
        self.calls: list[tuple[list[str], bytes | None]] = []

    def __call__(
        self, argv: Sequence[str], stdin: bytes | None, timeout: float | None
    ) -> wslexe.Completed:
        argv = list(argv)
        self.calls.append((argv, stdin))
        option = argv[1]
        if option == "--version":
            if self.version is None:  # the inbox wsl.exe: prints usage, fails
                return wslexe.Completed(-1, utf16("Usage: wsl.exe [Argument]..."), b"")
            return wslexe.Completed(0, utf16(self.version), b"")
        if option == "--list":
            if not self.distros:
                return wslexe.Completed(
                    -1,
                    utf16("Windows Subsystem for Linux has no installed distributions.\r\n"),
                    b"",
                )
            return wslexe.Completed(0, utf16("".join(f"{d}\r\n" for d in self.distros)), b"")
        if option == "--unregister":
            self.distros.remove(argv[2])
            return wslexe.Completed(0, utf16("The operation completed successfully.\r\n"), b"")
        if option in ("--install", "--import"):
            self.distros.append(
                argv[argv.index("--name") + 1] if option == "--install" else argv[2]
            )
            return wslexe.Completed(0, b"", b"")
        if option == "--distribution":
            return wslexe.Completed(0, b'{"status": "pass"}' if "cat" in argv else b"", b"")
        raise AssertionError(f"unexpected wsl.exe call: {argv}")

    def options(self) -> list[str]:
        return [argv[1] for argv, _ in self.calls]


# ----------------------------------------------------------------------------- parsing


def test_decode_utf16le_with_and_without_bom() -> None:
    assert wslexe.decode_output(utf16("Ubuntu\r\n")) == "Ubuntu\r\n"
    assert wslexe.decode_output(b"\xff\xfe" + utf16("cpu\r\n")) == "cpu\r\n"


def test_decode_utf8_when_wsl_utf8_is_set() -> None:
    assert wslexe.decode_output(b"WSL version: 2.4.4.0\n") == "WSL version: 2.4.4.0\n"
    assert wslexe.decode_output(b"") == ""


def test_parse_version_english_and_localized() -> None:
    assert wslexe.parse_version(VERSION_244) == (2, 4, 4, 0)
    assert wslexe.parse_version("WSL-Version: 2.3.26.0\r\nKernelversion: 5.15\r\n") == (2, 3, 26, 0)
    assert wslexe.parse_version("Version de WSL : 2.5.10.0") == (2, 5, 10, 0)
    assert wslexe.parse_version("Usage: wsl.exe [Argument]") is None


@pytest.mark.parametrize(
    ("version", "modern"),
    [
        ((2, 4, 4, 0), True),
        ((2, 4, 4), True),
        ((2, 5, 1, 0), True),
        ((3, 0, 0), True),
        ((2, 4, 3, 9), False),
        ((2, 3, 26, 0), False),
        ((1, 2, 5, 0), False),
    ],
)
def test_is_modern(version: tuple[int, ...], modern: bool) -> None:
    assert wslexe.is_modern(version) is modern


def test_parse_distro_list_from_utf16_output() -> None:
    raw = utf16("Ubuntu-24.04\r\nenvbuilder-cpu\r\n\r\n")
    assert wslexe.parse_distro_list(wslexe.decode_output(raw)) == ["Ubuntu-24.04", "envbuilder-cpu"]


@pytest.mark.parametrize("name", ["envbuilder-cpu", "rocm64", "Ubuntu-24.04", "a_b.c"])
def test_valid_distro_names(name: str) -> None:
    assert wslexe.check_distro_name(name) == name


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 65, "a/b", "ü"])
def test_invalid_distro_names(name: str) -> None:
    with pytest.raises(UsageError, match="not a valid WSL distro name"):
        wslexe.check_distro_name(name)


# ----------------------------------------------------------------------------- command lines


def test_install_command_line() -> None:
    assert wslexe.install_cmd(EXE, r"C:\dist\cpu.wsl", "envbuilder-cpu", r"C:\WSL\cpu") == [
        EXE,
        "--install",
        "--from-file",
        r"C:\dist\cpu.wsl",
        "--name",
        "envbuilder-cpu",
        "--location",
        r"C:\WSL\cpu",
        "--no-launch",
    ]


def test_import_command_line() -> None:
    assert wslexe.import_cmd(EXE, "envbuilder-cpu", r"C:\WSL\cpu", r"C:\dist\cpu.wsl") == [
        EXE,
        "--import",
        "envbuilder-cpu",
        r"C:\WSL\cpu",
        r"C:\dist\cpu.wsl",
        "--version",
        "2",
    ]


def test_run_command_line_has_no_shell_in_between() -> None:
    argv = ["/opt/venv/bin/python", "/tmp/envbuilder/probe.pyz", "--label", "a=b c"]
    assert wslexe.run_cmd(EXE, "cpu", "envbuilder", argv) == [
        EXE,
        "--distribution",
        "cpu",
        "--user",
        "envbuilder",
        "--exec",
        *argv,
    ]


def test_other_command_lines() -> None:
    assert wslexe.version_cmd(EXE) == [EXE, "--version"]
    assert wslexe.list_cmd(EXE) == [EXE, "--list", "--quiet"]
    assert wslexe.unregister_cmd(EXE, "cpu") == [EXE, "--unregister", "cpu"]
    assert wslexe.get_file_argv("/tmp/r.json") == ["cat", "/tmp/r.json"]
    assert wslexe.put_file_argv("/tmp/x y")[-1] == "/tmp/x y"  # a path with a space stays one


# ----------------------------------------------------------------------------- the engine


def test_install_on_modern_wsl() -> None:
    fake = FakeWsl()
    way = wslexe.WslExe(EXE, fake).install(r"C:\d\cpu.wsl", "cpu", r"C:\WSL\cpu")
    assert way == "install"
    assert fake.options() == ["--version", "--list", "--install"]
    assert fake.calls[-1][0] == wslexe.install_cmd(EXE, r"C:\d\cpu.wsl", "cpu", r"C:\WSL\cpu")


def test_install_on_older_wsl_imports() -> None:
    fake = FakeWsl(version="WSL version: 2.3.26.0\r\n")
    way = wslexe.WslExe(EXE, fake).install(r"C:\d\cpu.wsl", "cpu", r"C:\WSL\cpu")
    assert way == "import"
    assert fake.calls[-1][0] == wslexe.import_cmd(EXE, "cpu", r"C:\WSL\cpu", r"C:\d\cpu.wsl")


def test_older_wsl_refused_when_import_not_allowed() -> None:
    fake = FakeWsl(version="WSL version: 2.3.26.0\r\n")
    with pytest.raises(EngineError, match=r"older than 2.4.4.*wsl --update"):
        wslexe.WslExe(EXE, fake).install("f.wsl", "cpu", "loc", allow_import=False)
    assert "--install" not in fake.options() and "--import" not in fake.options()


def test_inbox_wsl_without_version_is_a_clear_error() -> None:
    with pytest.raises(EngineError, match="wsl --update"):
        wslexe.WslExe(EXE, FakeWsl(version=None)).install("f.wsl", "cpu", "loc")


def test_existing_distro_is_refused() -> None:
    fake = FakeWsl(distros=["Ubuntu", "CPU"])
    with pytest.raises(EngineError, match=r"already exists.*--replace"):
        wslexe.WslExe(EXE, fake).install("f.wsl", "cpu", "loc")  # names are case-insensitive
    assert "--install" not in fake.options()


def test_replace_unregisters_first() -> None:
    fake = FakeWsl(distros=["cpu"])
    wslexe.WslExe(EXE, fake).install("f.wsl", "cpu", "loc", replace=True)
    assert fake.options() == ["--version", "--list", "--unregister", "--install"]


def test_failed_install_reports_wsl_message() -> None:
    def failing(
        argv: Sequence[str], stdin: bytes | None, timeout: float | None
    ) -> wslexe.Completed:
        if argv[1] == "--install":
            return wslexe.Completed(1, utf16("Error code: Wsl/InstallDistro/E_INVALIDARG\r\n"), b"")
        return FakeWsl()(argv, stdin, timeout)

    with pytest.raises(EngineError, match="E_INVALIDARG"):
        wslexe.WslExe(EXE, failing).install("f.wsl", "cpu", "loc")


def test_files_travel_through_stdin_and_stdout() -> None:
    fake = FakeWsl(distros=["cpu"])
    wsl = wslexe.WslExe(EXE, fake)
    wsl.put_file("cpu", "/tmp/envbuilder/probe.pyz", b"PK\x03\x04zip")
    argv, stdin = fake.calls[-1]
    assert argv[:6] == [EXE, "--distribution", "cpu", "--user", "root", "--exec"]
    assert stdin == b"PK\x03\x04zip"
    assert wsl.get_file("cpu", "/tmp/r.json") == b'{"status": "pass"}'


def test_missing_wsl_exe_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineError, match=r"wsl\.exe was not found"):
        wslexe.find_wsl_exe()


def test_subprocess_runner_missing_program() -> None:
    with pytest.raises(EngineError, match="cannot run"):
        wslexe.subprocess_runner(["/nonexistent/wsl.exe", "--version"], None, 5)

"""The nox sessions find or fetch their Python (issue 34): noxfile.session_python, with the
PATH lookup and uv's answers stubbed (a real `uv python install` downloads)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

NOXFILE = Path(__file__).resolve().parent.parent / "noxfile.py"


def _noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("envbuilder_noxfile", NOXFILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOX = _noxfile()
UV_PYTHON = "/home/me/.local/share/uv/python/cpython-3.11.14-linux-x86_64-gnu/bin/python3.11"


class FakeUv:
    """uv's `python find` / `python install`: finds nothing until an install succeeded."""

    def __init__(self, installed: bool, can_install: bool) -> None:
        self.installed, self.can_install = installed, can_install
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str | None:
        self.calls.append(argv[1:])
        if argv[1:3] == ["python", "install"] and self.can_install:
            self.installed = True
        return UV_PYTHON if argv[1:3] == ["python", "find"] and self.installed else None


def _which(*present: str) -> object:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_the_variable_wins() -> None:
    uv = FakeUv(installed=True, can_install=True)
    got = NOX.session_python({"ENVBUILDER_NOX_PYTHON": "3.12"}, _which("python3.11", "uv"), uv)
    assert got == "3.12" and uv.calls == []


def test_python311_on_path_is_used_as_before() -> None:
    uv = FakeUv(installed=True, can_install=True)
    assert NOX.session_python({}, _which("python3.11", "uv"), uv) == "3.11" and uv.calls == []


def test_uv_finds_its_own_python() -> None:
    uv = FakeUv(installed=True, can_install=True)
    assert NOX.session_python({}, _which("uv"), uv) == UV_PYTHON
    assert uv.calls == [["python", "find", "3.11"]]


def test_uv_fetches_a_missing_python(capsys: pytest.CaptureFixture[str]) -> None:
    uv = FakeUv(installed=False, can_install=True)
    assert NOX.session_python({}, _which("uv"), uv) == UV_PYTHON
    assert ["python", "install", "3.11"] in uv.calls
    assert "uv fetches it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("present", "says"),
    [(("uv",), "uv could not fetch it"), ((), "install uv (https://docs.astral.sh/uv/)")],
)
def test_a_hint_when_no_python_can_be_had(
    present: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uv = FakeUv(installed=False, can_install=False)
    assert NOX.session_python({}, _which(*present), uv) == "3.11"
    err = capsys.readouterr().err
    assert says in err and "ENVBUILDER_NOX_PYTHON=3.12" in err

"""explain: the known messages of issue 9 (and real tool outputs) map to cause, fix, sources."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest

from envbuilder.commands._cli import main
from envbuilder.core.errors import CompatDataError
from envbuilder.host import explain

DOCTOR_DATA = Path(__file__).parents[1] / "data" / "doctor"

# The six messages issue 9 lists, as users see them (full lines where tools print more).
KNOWN = [
    ("RuntimeError: HIP error: HIP_ERROR_OUT_OF_MEMORY", "hip-out-of-memory"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB", "hip-out-of-memory"),
    ("RuntimeError: No HIP GPUs are available", "no-hip-gpus"),
    ("Unable to open /dev/kfd read-write: Permission denied", "kfd-permission"),
    ("E: Unable to locate package hsa-runtime-rocr4wsl-amdgpu", "no-wsl-runtime-package"),
    ((DOCTOR_DATA / "rocminfo-wsl-unsupported-gpu.txt").read_text(), "wsl-unsupported-gpu"),
    ((DOCTOR_DATA / "rocm-smi-wsl.txt").read_text(), "smi-no-amdgpu-module"),
    ("ERROR:root:Driver not initialized (amdgpu not found in modules)", "smi-no-amdgpu-module"),
]


@pytest.mark.parametrize(("message", "entry"), KNOWN)
def test_known_messages(message: str, entry: str) -> None:
    found = explain.match(message)
    assert found is not None and found.id == entry
    assert found.cause and found.fix and found.sources
    assert all(s.startswith("https://") or s.endswith(".md") for s in found.sources)


def test_specific_entry_wins_over_generic() -> None:
    # The same HSA error without "unsupported GPU" is the generic entry ...
    generic = "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed"
    assert explain.match(generic).id == "hsa-out-of-resources"  # type: ignore[union-attr]
    # ... and a driver that is not loaded is that, not the generic HSA failure that follows it.
    text = (DOCTOR_DATA / "rocminfo-rock-not-loaded.txt").read_text()
    assert explain.match(text).id == "rock-not-loaded"  # type: ignore[union-attr]
    assert [e.id for e in explain.match_all(text)] == ["rock-not-loaded", "hsa-out-of-resources"]


def test_unknown_message() -> None:
    assert explain.match("everything is fine") is None


def test_cli_known_unknown_stdin_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["explain", "RuntimeError: No HIP GPUs are available"]) == 0
    out = capsys.readouterr().out
    assert (
        "cause:" in out
        and "fix:" in out
        and "https://github.com/ROCm/legacy-rocm-build/issues/4749" in out
    )
    assert main(["explain", "some other error"]) == 1
    assert "Not a known message" in capsys.readouterr().out
    monkeypatch.setattr(
        "sys.stdin",
        io.StringIO("log...\nE: Unable to locate package hsa-runtime-rocr4wsl-amdgpu\n"),
    )
    assert main(["explain", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["known"] and data["matches"][0]["id"] == "no-wsl-runtime-package"
    assert main(["explain", "--list"]) == 0
    assert "kfd-permission" in capsys.readouterr().out
    assert main(["explain"]) == 2


def test_every_shipped_entry_is_complete() -> None:
    entries = explain.load_errors()
    assert len(entries) >= 6 and len({e.id for e in entries}) == len(entries)
    for e in entries:
        assert e.patterns and e.title and e.cause and e.fix and e.sources


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "expected \\[\\[error\\]\\] tables"),
        (
            {
                "error": [
                    {
                        "id": "x",
                        "title": "t",
                        "cause": "c",
                        "fix": "f",
                        "sources": ["s"],
                        "patterns": ["("],
                    }
                ]
            },
            "bad patterns regex",
        ),
        (
            {
                "error": [
                    {
                        "id": "x",
                        "title": "t",
                        "cause": "c",
                        "fix": "f",
                        "sources": [],
                        "patterns": ["a"],
                    }
                ]
            },
            "sources must name at least one",
        ),
        (
            {
                "error": [
                    {
                        "id": "x",
                        "title": "t",
                        "cause": "c",
                        "fix": "f",
                        "sources": ["s"],
                        "patterns": ["a"],
                        "extra": 1,
                    }
                ]
            },
            "unknown keys",
        ),
        (
            {"error": [{"id": "x", "cause": "c", "fix": "f", "sources": ["s"], "patterns": ["a"]}]},
            "title must be a text",
        ),
    ],
)
def test_malformed_data_is_reported(data: dict[str, object], message: str) -> None:
    with pytest.raises(CompatDataError, match=message):
        explain.parse_errors(data)


def test_shipped_file_parses_with_tomllib() -> None:
    path = Path(explain.__file__).parent.parent / "data" / "errors.toml"
    assert len(tomllib.loads(path.read_text())["error"]) == len(explain.load_errors())

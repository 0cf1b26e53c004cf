"""`envbuilder probe`: the CLI runs the probe locally and passes its options through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_probe_unit import DATA, validate

from envbuilder.commands._cli import main


def test_envbuilder_probe_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "self.toml"
    subprocess.run([sys.executable, str(DATA / "make_pylock.py"), str(lock)], check=True)
    out = tmp_path / "reports" / "r.json"
    code = main(
        [
            "probe",
            "--expect",
            "cpu",
            "--only",
            "conformance",
            "--lock",
            str(lock),
            "--label",
            "env=cpu",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    validate(report)
    assert report["labels"] == {"env": "cpu"}
    assert report["options"]["only"] == ["conformance"]
    assert "result: PASS" in capsys.readouterr().out


def test_envbuilder_probe_failure_and_usage(tmp_path: Path) -> None:
    lock = tmp_path / "off.toml"
    subprocess.run(
        [sys.executable, str(DATA / "make_pylock.py"), str(lock), "--add", "absent-package==1"],
        check=True,
    )
    assert main(["probe", "--expect", "cpu", "--only", "conformance", "--lock", str(lock)]) == 1
    assert main(["probe", "--expect", "cpu", "--lock", str(tmp_path / "none.toml")]) == 2

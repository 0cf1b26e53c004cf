"""The probe as one zipapp file: runs where envbuilder is not installed, only torch is."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from test_probe_unit import DATA, validate

from envbuilder.probe import PROBE_VERSION, build_zipapp

MAKE_PYLOCK = DATA / "make_pylock.py"
TORCH = "torch==2.13.0"  # the CPU wheel the test suite uses (see noxfile.py)


@pytest.fixture(scope="session")
def zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_zipapp(tmp_path_factory.mktemp("zipapp") / "probe.pyz")


def test_zipapp_runs_and_reports(zipapp: Path, tmp_path: Path) -> None:
    version = subprocess.run(
        [sys.executable, str(zipapp), "--version"], capture_output=True, text=True, check=True
    )
    assert PROBE_VERSION in version.stdout
    lock = tmp_path / "self.toml"
    subprocess.run([sys.executable, str(MAKE_PYLOCK), str(lock)], check=True)
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(zipapp),
            "--expect",
            "cpu",
            "--only",
            "conformance",
            "--lock",
            str(lock),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    validate(json.loads(out.read_text()))


@pytest.fixture(scope="session")
def torch_only_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding torch (and its dependencies) and nothing of envbuilder.

    Made once per test session: pip takes torch from the machine's find-links folder when it
    is there, else from the configured index.
    """
    root = tmp_path_factory.mktemp("torch-only") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    python = root / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", TORCH], check=True, timeout=1200
    )
    return python


@pytest.mark.slow
def test_zipapp_quick_level_in_a_torch_only_venv(
    zipapp: Path, torch_only_venv: Path, tmp_path: Path
) -> None:
    python = str(torch_only_venv)
    absent = subprocess.run(
        [python, "-c", "import envbuilder"], capture_output=True, cwd=tmp_path, check=False
    )
    assert absent.returncode != 0, "envbuilder must not be importable in that venv"
    lock = tmp_path / "venv.pylock.toml"
    # The venv's own lock, without the installer's bootstrap packages (the documented rule).
    subprocess.run(
        [
            python,
            str(MAKE_PYLOCK),
            str(lock),
            "--drop",
            "pip",
            "--drop",
            "setuptools",
            "--drop",
            "wheel",
        ],
        check=True,
    )
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            python,
            str(zipapp),
            "--level",
            "quick",
            "--expect",
            "cpu",
            "--lock",
            str(lock),
            "--label",
            "target=venv",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    validate(report)
    assert {c["name"]: c["status"] for c in report["checks"]} == {
        "device": "pass",
        "topology": "skip",
        "latency": "pass",
        "matmul": "pass",
        "amp": "pass",
        "train": "pass",
        "collectives": "pass",
        "membw": "pass",
        "conformance": "pass",
    }
    assert report["fingerprint"]["torch"].startswith("2.13.0")


@pytest.mark.parametrize("mode", ["zipapp", "module"])
def test_working_directory_does_not_leak_into_checks(
    mode: str, zipapp: Path, tmp_path: Path
) -> None:
    """A .dist-info or an `envbuilder` folder in the working directory must neither count as
    installed nor shadow the probe's own code in the check children."""
    lock = tmp_path / "self.toml"
    subprocess.run([sys.executable, str(MAKE_PYLOCK), str(lock)], check=True)
    cwd = tmp_path / "cwd"
    meta = cwd / "stray_pkg-1.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: stray-pkg\nVersion: 1.0\n")
    shadow = cwd / "envbuilder" / "probe"
    shadow.mkdir(parents=True)
    (cwd / "envbuilder" / "__init__.py").write_text("")
    (shadow / "__init__.py").write_text("raise SystemExit('the shadow probe was imported')\n")
    entry = (
        [str(zipapp)]
        if mode == "zipapp"
        else [
            "-c",
            (
                f"import sys; sys.path[0] = {str(Path(__file__).parents[2])!r}; "
                "from envbuilder.probe.cli import main; sys.exit(main())"
            ),
        ]
    )
    proc = subprocess.run(
        [sys.executable, *entry, "--expect", "cpu", "--only", "conformance", "--lock", str(lock)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stray-pkg" not in proc.stdout

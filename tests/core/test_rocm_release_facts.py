"""What AMD's install page of a pip-SDK release says beyond the wheels (envbuilder/data/rocm.toml
host_driver, installers, pip_python), and `envbuilder check` naming the host's driver."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from envbuilder.commands._cli import main
from envbuilder.core.compatload import load_compat

ROOT = Path(__file__).resolve().parents[2]
CLI_SCHEMA = json.loads(
    (ROOT / "envbuilder/data/schemas/cli.schema.json").read_text(encoding="utf-8")
)
SPEC = """
[indexes.amd-rocm]
url = "https://repo.amd.com/rocm/whl-multi-arch/"

[env.rocm7140]
accelerator = "rocm"
rocm = "7.14.0"
gpu = "RX 7900 XTX"
python = "3.12"
packages = ["torch==2.12.0+rocm7.14.0"]
index_pins = { torch = "amd-rocm" }
targets = ["docker"]
"""


def test_the_7_14_0_row_holds_amds_install_page_facts() -> None:
    release = load_compat().rocm("7.14.0")
    assert release is not None and release.host_driver is not None
    assert "amdgpu-install 31.40.1" in release.host_driver and "26.6.4" in release.host_driver
    assert release.installers["runfile"].endswith("/rocm-rel-7.14/rocm-installer-7.14.0-7.run")
    assert release.installers["tarball"].endswith("therock-dist-linux-multiarch-7.14.0.tar.gz")
    assert release.pip_python["ubuntu-24.04"] == "3.12" and release.pip_python["windows"] == "3.12"


def test_check_names_the_driver_the_host_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "environments.toml"
    spec.write_text(SPEC, encoding="utf-8")
    assert main(["check", "--spec", str(spec)]) == 0
    err = capsys.readouterr().err
    assert "rocm7140: ROCm 7.14.0 installs through the pip SDK" in err
    assert "the host needs amdgpu-install 31.40.1" in err
    assert main(["check", "--spec", str(spec), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    jsonschema.validate(result, CLI_SCHEMA, cls=jsonschema.Draft202012Validator)
    (model,) = result["install_models"]
    assert model["host_driver"].startswith("amdgpu-install 31.40.1")


def test_the_7_14_1_and_10_0_0_rows_hold_amds_install_page_facts() -> None:
    """Issue 35 item 5 (the 10.0 runfile): AMD's install pages for 7.14.1 and 10.0.0 in
    ROCm/rocm-docs (cited in each row's comment) name their driver, runfile and tarball."""
    r7141 = load_compat().rocm("7.14.1")
    assert r7141 is not None and r7141.host_driver is not None
    assert r7141.host_driver.startswith("amdgpu-install 31.40.1") and "26.6.4" in r7141.host_driver
    assert r7141.installers["runfile"].endswith("/rocm-rel-7.14.1/rocm-installer-7.14.1-1.run")
    assert r7141.installers["tarball"].endswith("therock-dist-linux-multiarch-7.14.1.tar.gz")
    r1000 = load_compat().rocm("10.0.0")
    assert r1000 is not None and r1000.host_driver is not None
    assert r1000.host_driver.startswith("amdgpu-install 31.50 ") and "26.8.1" in r1000.host_driver
    assert r1000.installers["runfile"] == (
        "https://repo.radeon.com/rocm/installer/rocm-runfile-installer/rocm-rel-10.0/"
        "rocm-installer-10.0.0-4.run"
    )
    assert r1000.installers["tarball"].startswith("https://stable.repo.amd.com/rocm/core/tarball/")
    assert r1000.pip_python["ubuntu-26.04"] == "3.14" and r1000.pip_python["ubuntu-24.04"] == "3.12"
    rocm = (ROOT / "envbuilder/data/rocm.toml").read_text(encoding="utf-8")
    assert "200-install.rst@50600d8da151e4ca8ce7fec9f68fa3048cc5bd85" in rocm
    assert "200-install.rst@0c31064a09a061b708758cc5bc9f74a9ede6c14f" in rocm


def test_10_1_0_is_a_release_and_10_0_0_names_its_pytorch() -> None:
    """Issue 35 item 3: 10.1.0 is released (AMD's release notes); only the TheRock branch the
    replica builds from is a pre-release branch. 10.0.0's notes name PyTorch 2.13.0."""
    compat = load_compat()
    r1010 = compat.rocm("10.1.0")
    assert r1010 is not None and not r1010.unverified
    assert "release-notes.md@15846f3dbb5e4994c02b1146d2a206df639cc629" in r1010.source
    assert "release/bkc/therock-10.1-20260811" in r1010.source
    (row,) = [r for r in compat.torch_indexes("2.13.0") if r.rocm == "10.0.0"]
    assert "2.13.0" in row.versions
    assert "release-notes.md@ddea3eea963d7e17a9dc310108694df2e0cdbc00" in row.source

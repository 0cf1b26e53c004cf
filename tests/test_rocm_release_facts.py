"""What AMD's install page of a pip-SDK release says beyond the wheels (envbuilder/data/rocm.toml
host_driver, installers, pip_python), and `envbuilder check` naming the host's driver."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from envbuilder.commands._cli import main
from envbuilder.core.compatload import load_compat

ROOT = Path(__file__).resolve().parents[1]
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

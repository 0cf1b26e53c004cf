"""The release check (issue 24): the probe holds torch's build, its HIP version and the visible
GPUs' gfx targets against the env's locked ROCm release, as part of conformance.

Three parts: the comparison as pure functions on given facts (the ROCm and CUDA facts are those
public reports show, since this machine has no GPU); the options every builder and the batch
script pass (envbuilder.builders.probeargs, from the shipped spec and the compatibility data); and
real probe runs on this machine's CPU torch: cpu expectations pass and say so, ROCm expectations
fail.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from test_probe_run import by_name, make_lock, probe
from test_probe_unit import validate

from envbuilder.builders.probeargs import expectation_args, override_target, probe_args
from envbuilder.builders.proberun import probe_options
from envbuilder.core.compatload import _with_hip, load_compat
from envbuilder.core.errors import CompatDataError
from envbuilder.core.model import EnvSpec
from envbuilder.probe.expectation import (
    Expectation,
    compare_release,
    gfx_base,
    local_tag,
    starts_with,
)
from envbuilder.slurm.script import default_probe_args
from envbuilder.spec.load import load_spec
from envbuilder.targets.base import ValidateOptions

REPO = Path(__file__).resolve().parents[2]

ROCM714 = Expectation("rocm", "7.14.1", "7.14", ("gfx1100",))


def _rocm_facts(
    torch_version: str = "2.12.0+rocm7.14.1",
    hip: str | None = "7.14.60850-0000000",
    gfx: tuple[str | None, ...] = ("gfx1100",),
) -> dict[str, Any]:
    """The device check's facts of a ROCm torch (HIP string as public 7.14 reports show it)."""
    devices = [
        {"index": i, "name": "AMD Radeon RX 7900 XTX", "gfx": g, "memory_bytes": 1 << 34}
        for i, g in enumerate(gfx)
    ]
    return {"torch": torch_version, "hip": hip, "cuda": None, "devices": devices}


def _cuda_facts(torch_version: str = "2.11.0+cu130", count: int = 1) -> dict[str, Any]:
    devices = [
        {"index": i, "name": "NVIDIA H200", "gfx": None, "memory_bytes": 150 << 30}
        for i in range(count)
    ]
    return {"torch": torch_version, "hip": None, "cuda": "13.0", "devices": devices}


CPU_FACTS: dict[str, Any] = {"torch": "2.13.0+cpu", "hip": None, "cuda": None, "devices": []}


# --- the comparison, on given facts -------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "prefix", "expected"),
    [
        ("7.14.60850-0000000", "7.14", True),
        ("7.14.60850", "7.14", True),
        ("7.140.1", "7.14", False),  # components, not characters
        ("7.1.52802", "7.14", False),
        ("7.14.1", "7.14.1", True),
        ("7.14", "7.14.1", False),
        ("6.4.43483-a187df25c", "6.4", True),
    ],
)
def test_starts_with_compares_components(version: str, prefix: str, expected: bool) -> None:
    assert starts_with(version, prefix) is expected


def test_local_tag_and_gfx_base() -> None:
    assert local_tag("2.13.0+cpu") == "cpu"
    assert local_tag("2.12.0+rocm7.14.1") == "rocm7.14.1"
    assert local_tag("2.13.0") is None
    assert gfx_base("gfx90a:sramecc+:xnack-") == "gfx90a"
    assert gfx_base("gfx1100") == "gfx1100"
    assert gfx_base("") is None


def test_the_locked_release_passes_and_says_so() -> None:
    found = compare_release(ROCM714, _rocm_facts())
    assert found["problems"] == [] and found["not_checked"] == []
    assert found["summary"] == "ROCm 7.14.1 as locked (HIP 7.14.60850-0000000, gfx1100 x1)"
    assert found["expected"] == {
        "accelerator": "rocm",
        "rocm": "7.14.1",
        "hip": "7.14",
        "gfx": ["gfx1100"],
    }
    assert found["found"]["devices"] == [
        {"index": 0, "name": "AMD Radeon RX 7900 XTX", "gfx": "gfx1100"}
    ]


def test_pytorchs_line_tag_names_the_release_too() -> None:
    # PyTorch's own rocm7.14 index tags its wheels +rocm7.14 (torch.toml); it is 7.14.1's line.
    assert compare_release(ROCM714, _rocm_facts("2.14.1+rocm7.14"))["problems"] == []


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        (_rocm_facts("2.12.0+rocm7.14.0"), "torch 2.12.0+rocm7.14.0 was built for ROCm 7.14.0"),
        (_rocm_facts("2.9.1+rocm7.1"), "was built for ROCm 7.1"),
        (_rocm_facts(hip="7.2.53211-e4c33f9"), "HIP 7.2.53211-e4c33f9 is not HIP 7.14"),
        (_rocm_facts(gfx=("gfx1100", "gfx1030")), "device 1 (AMD Radeon RX 7900 XTX) is gfx1030"),
        (_rocm_facts(gfx=(None,)), "device 0 (AMD Radeon RX 7900 XTX) reports no gfx target"),
        (_rocm_facts(gfx=()), "no GPU visible (expected gfx1100)"),
        (_rocm_facts("2.13.0+cpu", hip=None), "torch 2.13.0+cpu is not a ROCm build"),
        (_cuda_facts(), "torch 2.11.0+cu130 is not a ROCm build"),
    ],
)
def test_what_is_not_the_locked_release_fails(facts: dict[str, Any], problem: str) -> None:
    found = compare_release(ROCM714, facts)
    assert any(problem in p for p in found["problems"]), found["problems"]
    assert found["summary"].startswith("not ROCm 7.14.1 as locked ("), found["summary"]
    assert problem in found["summary"]


def test_gcn_arch_features_are_not_part_of_the_target() -> None:
    mi300x = Expectation("rocm", "10.1.0", "7.16", ("gfx942",))
    facts = _rocm_facts("2.14.0+rocm10.1.0", "7.16.26361", ("gfx942:sramecc+:xnack-",) * 8)
    found = compare_release(mi300x, facts)
    assert found["problems"] == []
    assert found["summary"] == "ROCm 10.1.0 as locked (HIP 7.16.26361, gfx942 x8)"


def test_what_was_not_expected_is_listed_not_passed() -> None:
    found = compare_release(Expectation("rocm", "7.14.1"), _rocm_facts())
    assert found["problems"] == []
    assert found["not_checked"] == [
        "HIP 7.14.60850-0000000: no --expect-hip given (envbuilder gives it when its data "
        "holds the release's HIP version)",
        "GPU targets: none expected (--expect-gfx)",
    ]
    assert found["summary"].endswith("; not checked: " + "; ".join(found["not_checked"]))
    bare = compare_release(Expectation("rocm"), _rocm_facts("2.12.0"))
    assert bare["summary"].startswith("a ROCm build (no release expected) (HIP 7.14")
    assert "has no local version tag" in bare["not_checked"][0]


def test_cpu_env_expects_no_rocm() -> None:
    found = compare_release(Expectation("cpu"), CPU_FACTS)
    assert found["problems"] == []
    assert found["summary"] == "no ROCm expected (cpu env): torch 2.13.0+cpu, no GPU"
    # A GPU build run on the CPU (a ROCm WSL distro checked on a Linux host) is recorded only.
    rocm_on_cpu = compare_release(Expectation("cpu"), _rocm_facts(gfx=()))
    assert rocm_on_cpu["problems"] == []
    assert rocm_on_cpu["found"]["build"] == "rocm"


def test_cuda_without_a_release_records_cuda_and_device_names() -> None:
    found = compare_release(Expectation("cuda"), _cuda_facts(count=2))
    assert found["problems"] == [] and found["not_checked"] == []
    assert found["summary"] == (
        "no ROCm expected (cuda env): torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200 x2"
    )
    assert found["found"]["cuda"] == "13.0"
    assert [d["name"] for d in found["found"]["devices"]] == ["NVIDIA H200"] * 2
    # PyPI's CUDA torch has no local tag: recorded as not read, not a failure.
    pypi = compare_release(Expectation("cuda"), _cuda_facts("2.11.0"))
    assert pypi["problems"] == [] and "no local version tag" in pypi["not_checked"][0]
    for facts, problem in (
        (CPU_FACTS, "not a CUDA build"),
        (_rocm_facts(), "not a CUDA build"),
        (_cuda_facts(count=0), "no GPU visible"),
    ):
        assert any(problem in p for p in compare_release(Expectation("cuda"), facts)["problems"])


# --- what every builder and the batch script pass ----------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> dict[str, EnvSpec]:
    spec = load_spec(REPO / "environments.toml")
    return {name: spec.env(name) for name in ("cpu", "rocm714", "mi300x")}


def test_rocm_envs_pass_release_hip_and_gfx(shipped: dict[str, EnvSpec]) -> None:
    assert expectation_args(shipped["rocm714"], "rocm") == [
        "--expect-rocm",
        "7.14.1",
        "--expect-hip",
        "7.14",
        "--expect-gfx",
        "gfx1100",
    ]
    assert expectation_args(shipped["mi300x"], "rocm") == [
        "--expect-rocm",
        "10.1.0",
        "--expect-hip",
        "7.16",
        "--expect-gfx",
        "gfx942",
    ]
    assert expectation_args(shipped["cpu"], "cpu") == []
    # `validate --expect cpu` on a ROCm env (a WSL distro on a Linux host) checks no release.
    assert expectation_args(shipped["rocm714"], "cpu") == []


def test_builders_and_the_batch_script_take_the_same_options(
    shipped: dict[str, EnvSpec],
) -> None:
    env = shipped["rocm714"]
    options = ValidateOptions(level="standard", only=("conformance",))
    words = probe_options(env, options, {"env": env.name, "target": "docker"})
    assert words == probe_args(env, options, {"env": env.name, "target": "docker"})
    assert words[:10] == [
        "--level",
        "standard",
        "--expect",
        "rocm",
        "--expect-rocm",
        "7.14.1",
        "--expect-hip",
        "7.14",
        "--expect-gfx",
        "gfx1100",
    ]
    assert default_probe_args(env) == probe_args(env, ValidateOptions(), {"env": env.name})
    sbatch = (REPO / "slurm" / "rocm714" / "validate.sbatch").read_text()
    assert f"DEFAULT_PROBE_ARGS='{' '.join(default_probe_args(env))}'" in sbatch


def test_validate_passes_the_workload_level_and_find_batch(shipped: dict[str, EnvSpec]) -> None:
    """`validate --level workload --find-batch` reaches the probe (issue 32); without the
    option no --find-batch is passed (the batch script's default stays as it was)."""
    env = shipped["rocm714"]
    words = probe_args(env, ValidateOptions(level="workload", find_batch=True), {})
    assert words[:2] == ["--level", "workload"] and words[-1] == "--find-batch"
    assert "--find-batch" not in probe_args(env, ValidateOptions(), {})


def test_a_release_without_hip_data_passes_no_hip(shipped: dict[str, EnvSpec]) -> None:
    unknown = dataclasses.replace(shipped["rocm714"], rocm="7.99.0")
    assert expectation_args(unknown, "rocm") == [
        "--expect-rocm",
        "7.99.0",
        "--expect-gfx",
        "gfx1100",
    ]


def test_hsa_override_target_is_accepted_too(shipped: dict[str, EnvSpec]) -> None:
    assert override_target("10.3.0") == "gfx1030"
    assert override_target("11.0.0") == "gfx1100"
    assert override_target("9.0.10") == "gfx90a"
    assert override_target("11") is None
    env = dataclasses.replace(
        shipped["rocm714"],
        gfx="gfx1101",
        gfx_targets=("gfx1101",),
        env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
    )
    assert expectation_args(env, "rocm")[-4:] == [
        "--expect-gfx",
        "gfx1101",
        "--expect-gfx",
        "gfx1100",
    ]


def test_every_release_has_its_hip_line_with_a_source() -> None:
    for release in load_compat().releases:
        assert release.hip is not None, release.version
        assert release.hip_source, release.version
        if release.install_model == "amdgpu-install":  # legacy releases: HIP X.Y for ROCm X.Y
            assert release.version.startswith(release.hip + "."), release.version


def test_hip_rows_name_known_releases_once() -> None:
    releases = list(load_compat().releases)
    with pytest.raises(CompatDataError, match=re.escape("'7.99.0' is not a [[release]] version")):
        _with_hip(releases, [("7.99", ("7.99.0",), "s")])
    with pytest.raises(CompatDataError, match=re.escape("'7.14.1' is already in another")):
        _with_hip(releases, [("7.14", ("7.14.1",), "s"), ("7.15", ("7.14.1",), "s")])


# --- real probe runs on this machine's CPU torch ------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe-release")


def test_cpu_run_reports_expected_and_found(workdir: Path) -> None:
    lock = make_lock(workdir / "self.pylock.toml")
    code, report, output = probe(
        "--expect", "cpu", "--only", "conformance", "--lock", str(lock), tmp=workdir
    )
    assert code == 0, output
    validate(report)
    release = by_name(report)["conformance"]["details"]["release"]
    assert release["expected"] == {"accelerator": "cpu", "rocm": None, "hip": None, "gfx": []}
    assert release["found"]["torch"] == torch.__version__
    assert release["found"]["devices"] == [] and release["problems"] == []
    line = f"no ROCm expected (cpu env): torch {torch.__version__}, no GPU"
    assert release["summary"] == line
    assert f"release: {line}" in output  # the table's line
    assert report["options"]["expect_rocm"] is None and report["options"]["expect_gfx"] == []


def test_expecting_rocm_on_cpu_torch_fails(workdir: Path) -> None:
    code, report, output = probe(
        "--expect", "rocm",
        "--expect-rocm", "7.14.1",
        "--expect-hip", "7.14",
        "--expect-gfx", "gfx1100",
        "--only", "conformance",
        tmp=workdir,
    )  # fmt: skip
    assert code == 1, output
    validate(report)
    conformance = by_name(report)["conformance"]
    assert conformance["status"] == "fail"
    assert conformance["reason"].startswith("release: torch ")
    release = conformance["details"]["release"]
    assert release["expected"] == {
        "accelerator": "rocm",
        "rocm": "7.14.1",
        "hip": "7.14",
        "gfx": ["gfx1100"],
    }
    assert release["problems"] == [
        f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)",
        "no GPU visible (expected gfx1100)",
    ]
    assert "release: not ROCm 7.14.1 as locked (no GPU)" in output
    assert report["options"]["expect_gfx"] == ["gfx1100"]


def test_without_a_lock_only_the_release_part_runs(workdir: Path) -> None:
    code, report, output = probe("--expect", "cpu", "--only", "conformance", tmp=workdir)
    assert code == 0, output
    conformance = by_name(report)["conformance"]
    assert conformance["status"] == "pass"
    assert conformance["reason"] == "packages not compared: no --lock PYLOCK given"
    assert conformance["details"]["lock"] is None
    assert conformance["details"]["release"]["problems"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--expect", "cpu", "--expect-rocm", "7.14.1"), "only with --expect rocm"),
        (("--expect", "cuda", "--expect-gfx", "gfx942"), "not with --expect cuda"),
        (("--expect", "rocm", "--expect-gfx", "1100"), "expected a gfx target such as gfx1100"),
        (("--expect", "rocm", "--expect-rocm", "latest"), "expected a ROCm release"),
    ],
)
def test_expectation_usage_errors(workdir: Path, args: tuple[str, ...], message: str) -> None:
    code, report, output = probe(*args, "--only", "conformance", tmp=workdir)
    assert code == 2 and message in output, output
    assert report == {}  # nothing was written


def test_report_schema_rejects_a_malformed_release() -> None:
    from jsonschema import ValidationError

    report = json.loads(
        (Path(__file__).parents[1] / "data" / "probe" / "h200-standard.json").read_text()
    )
    validate(report)  # reports of probe 1.1 (no release section) stay valid
    conformance = next(c for c in report["checks"] if c["name"] == "conformance")
    conformance["details"]["release"] = {"summary": ""}
    with pytest.raises(ValidationError):
        validate(report)


@pytest.fixture(scope="module")
def torchless(workdir: Path) -> tuple[Path, Path]:
    """(python of a venv without torch, the probe zipapp): a cpu env's lock may hold no torch."""
    import subprocess
    import sys

    from envbuilder.probe import build_zipapp

    venv = workdir / "no-torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python", build_zipapp(workdir / "probe.pyz")


@pytest.mark.parametrize(("expect", "code"), [("cpu", 0), ("rocm", 1)])
def test_without_torch_the_build_is_not_checked_on_cpu_and_fails_on_rocm(
    torchless: tuple[Path, Path], workdir: Path, expect: str, code: int
) -> None:
    import subprocess

    python, zipapp = torchless
    out = workdir / f"no-torch-{expect}.json"
    run = subprocess.run(
        [str(python), str(zipapp), "--expect", expect, "--only", "conformance", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == code, run.stdout + run.stderr
    release = by_name(json.loads(out.read_text()))["conformance"]["details"]["release"]
    if expect == "cpu":
        assert release["problems"] == []
        assert release["not_checked"][0].startswith("torch's build: torch does not import")
    else:
        assert release["problems"][0].startswith("torch does not import")

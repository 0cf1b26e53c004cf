"""doctor: the Linux probes for real on this machine; WSL2/Windows hosts from real outputs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from legacyspec import write_spec_with_legacy

from envbuilder.commands._cli import main
from envbuilder.core.compatload import load_compat
from envbuilder.core.model import EnvSpec
from envbuilder.host import doctor, hostfacts
from envbuilder.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "doctor"
SCHEMA = json.loads((ROOT / "envbuilder" / "data" / "schemas" / "doctor.schema.json").read_text())
SPEC = ROOT / "environments.toml"
HAS_AMD = Path("/dev/kfd").exists()


def by_check(report: hostfacts.DoctorReport) -> dict[str, hostfacts.HostFinding]:
    return {f.check: f for f in report.findings}


# --------------------------------------------------------------------------- this machine, for real


def test_this_machine_runs_and_validates(tmp_path: Path) -> None:
    report = doctor.diagnose(hostfacts.Host.current(tmp_path))
    jsonschema.validate(report.to_json(), SCHEMA)
    found = by_check(report)
    assert {"os", "ram", "disk", "docker", "rocminfo", "gpu", "python"} <= set(found)
    assert found["ram"].details["bytes"] > 0
    for f in report.findings:
        assert f.severity == "ok" or f.fix, f"{f.check} is {f.severity} without a fix"
    if not HAS_AMD and not found.get("nvidia-smi"):
        assert found["gpu"].severity == "warn" and "no GPU" in found["gpu"].summary


@pytest.mark.docker
def test_docker_engine_is_reported(docker_client: Any, tmp_path: Path) -> None:
    finding = by_check(doctor.diagnose(hostfacts.Host.current(tmp_path)))["docker"]
    assert finding.severity == "ok"
    assert finding.details["version"] == docker_client.version()["Version"]


def test_unreachable_docker_is_a_warning_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real SDK call against a socket path where nothing listens.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    finding = by_check(doctor.diagnose(hostfacts.Host.current(tmp_path)))["docker"]
    assert finding.severity == "warn" and "not reachable" in finding.summary and finding.fix


@pytest.mark.docker
def test_cli_exits_0_with_warnings_and_json_validates(
    docker_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Docker Engine" in out
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    assert data["status"] in ("ok", "warn") and data["env"] is None


def test_env_cpu_needs_no_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    main(["doctor", "--spec", str(SPEC), "--env", "cpu", "--json"])
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    env_gpu = next(f for f in data["findings"] if f["check"] == "env-gpu")
    assert env_gpu["severity"] == "ok" and data["env"] == "cpu"


@pytest.mark.skipif(HAS_AMD, reason="this host has an AMD GPU; the test needs one without")
def test_rocm_env_fails_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--spec", str(SPEC), "--env", "rocm714", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    env_gpu = next(f for f in data["findings"] if f["check"] == "env-gpu")
    assert env_gpu["severity"] == "fail" and "env rocm714 needs an AMD GPU" in env_gpu["summary"]
    assert data["status"] == "fail"


def legacy_env(tmp_path: Path, name: str) -> EnvSpec:
    """A legacy (amdgpu-install) env the shipped spec no longer has (tests/legacyspec.py)."""
    return load_spec(write_spec_with_legacy(tmp_path / "legacy.toml")).env(name)


def test_unknown_env_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--spec", str(SPEC), "--env", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


# --------------------------------------------------------------------------- prepared hosts


class Outputs:
    """Stands in for commands that cannot run here (rocminfo inside WSL2, Windows tools):
    answers with real outputs from tests/data/doctor and records what was run."""

    def __init__(self, answers: Mapping[str, tuple[int, bytes] | None]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> hostfacts.CommandResult | None:
        self.calls.append(list(argv))
        answer = self.answers.get(Path(argv[0]).name)
        return None if answer is None else hostfacts.CommandResult(answer[0], answer[1], b"")


def data(name: str, encoding: str = "utf-8") -> bytes:
    return (DATA / name).read_text(encoding="utf-8").encode(encoding)


def make_host(
    tmp_path: Path,
    kind: hostfacts.HostOS,
    run: Outputs,
    *,
    files: Mapping[str, str] = {},
    environ: Mapping[str, str] | None = None,
    uid: int = 1000,
    groups: tuple[str, ...] = ("users",),
) -> hostfacts.Host:
    root = tmp_path / "root"
    for rel, content in {
        "etc/os-release": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
        "proc/meminfo": "MemTotal:       32768000 kB\n",
        "proc/sys/kernel/osrelease": "6.6.87.2-microsoft-standard-WSL2\n",
        **files,
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return hostfacts.Host(
        kind=kind,
        root=root,
        environ=environ or {},
        run=run,
        docker=lambda: {
            "version": "28.0.1",
            "api": "1.48",
            "os": "linux/amd64",
            "host": "unix:///var/run/docker.sock",
        },
        disk_path=tmp_path,
        python="3.12.3",
        user_groups=groups,
        user="dev",
        uid=uid,
    )


def test_detect_kind(tmp_path: Path) -> None:
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.6.87.2-microsoft-standard-WSL2\n")
    assert hostfacts.detect_kind(tmp_path, {}, "linux") == "wsl2"
    assert hostfacts.detect_kind(tmp_path / "x", {}, "linux") == "linux"
    assert hostfacts.detect_kind(tmp_path / "x", {"WSL_DISTRO_NAME": "Ubuntu"}, "linux") == "wsl2"
    assert hostfacts.detect_kind(tmp_path, {}, "win32") == "windows"


WSL_OK_FILES = {
    "dev/dxg": "",
    "usr/lib/wsl/lib/libdxcore.so": "",
    "opt/rocm/.info/version": "6.4.1-120\n",
    "var/lib/dpkg/status": "Package: hsa-runtime-rocr4wsl-amdgpu\nStatus: install ok installed\n",
}


def wsl_rocminfo_with_gpu() -> bytes:
    # The native output's agents, behind the WSL banner rocminfo prints inside WSL2.
    return b"WSL environment detected.\n" + data("rocminfo-native-rx7900xtx.txt")


def test_wsl2_host_ready_for_rocm64(tmp_path: Path) -> None:
    env = legacy_env(tmp_path, "rocm64")
    run = Outputs({"rocminfo": (0, wsl_rocminfo_with_gpu())})
    report = doctor.diagnose(make_host(tmp_path, "wsl2", run, files=WSL_OK_FILES), env)
    found = by_check(report)
    assert found["wsl-dxg"].severity == "ok" and found["wsl-libdxcore"].severity == "ok"
    assert found["wsl-rocm-runtime"].severity == "ok", found["wsl-rocm-runtime"]
    assert found["rocminfo"].details["wsl"] is True
    assert found["env-gpu"].severity == "ok", found["env-gpu"].summary
    assert "amd-devices" not in found  # no /dev/kfd expected inside WSL2
    jsonschema.validate(report.to_json(), SCHEMA)


def test_wsl2_host_missing_dxg_and_unsupported_gpu(tmp_path: Path) -> None:
    run = Outputs({"rocminfo": (1, data("rocminfo-wsl-unsupported-gpu.txt"))})
    report = doctor.diagnose(make_host(tmp_path, "wsl2", run))
    found = by_check(report)
    assert found["wsl-dxg"].severity == "fail" and found["wsl-libdxcore"].severity == "fail"
    assert found["rocminfo"].severity == "fail"
    assert "unsupported GPU" in (found["rocminfo"].fix or "")  # explain's entry, found by text
    assert report.status == "fail"


def test_wsl2_release_without_runtime(tmp_path: Path) -> None:
    files = {**WSL_OK_FILES, "opt/rocm/.info/version": "6.3.3-74\n"}
    finding = by_check(doctor.diagnose(make_host(tmp_path, "wsl2", Outputs({}), files=files)))[
        "wsl-rocm-runtime"
    ]
    assert finding.severity == "fail" and "ships no WSL runtime" in finding.summary
    assert finding.fix and "6.4" in finding.fix


def test_wsl2_gpu_not_supported_by_wsl_stack(tmp_path: Path) -> None:
    compat = load_compat()
    env = legacy_env(tmp_path, "rocm64")
    gpu = next(g for g in compat.gpus if not g.wsl and g.gfx.startswith("gfx103"))
    env = type(env)(**{**env.__dict__, "gfx": gpu.gfx, "gpu": gpu.names[0]})
    out = data("rocminfo-native-rx7900xtx.txt").replace(b"gfx1100", gpu.gfx.encode())
    run = Outputs({"rocminfo": (0, b"WSL environment detected.\n" + out)})
    finding = by_check(
        doctor.diagnose(make_host(tmp_path, "wsl2", run, files=WSL_OK_FILES), env, compat)
    )["env-gpu"]
    assert finding.severity == "fail" and "not supported by AMD's WSL stack" in finding.summary


def test_native_linux_kfd_permission(tmp_path: Path) -> None:
    run = Outputs({"rocminfo": (0, data("rocminfo-native-rx7900xtx.txt"))})
    # A user who neither owns the node nor is in its group, as on a fresh Ubuntu install.
    host = make_host(
        tmp_path, "linux", run, files={"dev/kfd": ""}, uid=4242, groups=("not-render",)
    )
    kfd = host.path("/dev/kfd")
    kfd.chmod(0o660)
    found = by_check(doctor.diagnose(host))
    assert found["amd-devices"].severity == "fail"
    assert "usermod" in (found["amd-devices"].fix or "")
    assert found["rocminfo"].summary == "AMD GPU(s): gfx1100 (Radeon RX 7900 XTX)"
    kfd.chmod(0o666)
    assert by_check(doctor.diagnose(host))["amd-devices"].severity == "ok"


def test_nvidia_host(tmp_path: Path) -> None:
    run = Outputs({"nvidia-smi": (0, data("nvidia-smi-query.csv"))})
    found = by_check(doctor.diagnose(make_host(tmp_path, "linux", run)))
    assert found["nvidia-smi"].severity == "ok" and "NVIDIA L40" in found["nvidia-smi"].summary
    assert found["gpu"].summary == "2 GPU(s) found"
    assert [
        "nvidia-smi",
        "--query-gpu=name,driver_version,memory.total",
        "--format=csv",
    ] in run.calls


def test_empty_hsa_override_fails(tmp_path: Path) -> None:
    host = make_host(tmp_path, "linux", Outputs({}), environ={"HSA_OVERRIDE_GFX_VERSION": ""})
    assert by_check(doctor.diagnose(host))["hsa-override"].severity == "fail"


def windows_host(
    tmp_path: Path,
    *,
    ver: str = "ver-22621.txt",
    systeminfo: str = "systeminfo-hyperv-enabled.txt",
    wsl: str = "wsl-version-2.6.1.txt",
    hip_path: str | None = "C:/AMD/ROCm/6.2/",
) -> tuple[hostfacts.Host, Outputs]:
    run = Outputs(
        {
            "cmd": (0, data(ver)),
            "systeminfo": (0, data(systeminfo)),
            "wsl": (0, data(wsl, "utf-16-le")),
            "hipInfo.exe": (0, data("hipinfo-rx7900xtx.txt")),
        }
    )
    environ = {"HIP_PATH": hip_path} if hip_path else {}
    return make_host(tmp_path, "windows", run, environ=environ), run


def test_windows_host_ready(tmp_path: Path) -> None:
    host, run = windows_host(tmp_path)
    env = legacy_env(tmp_path, "rocm64")
    report = doctor.diagnose(host, env)
    found = by_check(report)
    assert [
        found[c].severity
        for c in (
            "windows-build",
            "virtualization",
            "wsl-version",
            "hip-path",
            "hipinfo",
            "env-gpu",
        )
    ] == ["ok"] * 6
    assert found["hipinfo"].summary == "HIP device(s): gfx1100 (AMD Radeon RX 7900 XTX)"
    assert found["python"].severity == "ok"  # the windows target's 3.12 == host 3.12
    assert ["cmd", "/c", "ver"] in run.calls and ["wsl", "--version"] in run.calls
    jsonschema.validate(report.to_json(), SCHEMA)


def test_windows_python_is_found_with_the_py_launcher(tmp_path: Path) -> None:
    host, run = windows_host(tmp_path)
    host = type(host)(**{**host.__dict__, "python": "3.11.9"})
    env = legacy_env(tmp_path, "rocm64")
    found = by_check(doctor.diagnose(host, env))["python"]
    assert ["py", "-3.12", "--version"] in run.calls
    assert found.severity == "warn" and "uv python install 3.12" in (found.fix or "")


def test_windows_host_too_old(tmp_path: Path) -> None:
    host, _ = windows_host(
        tmp_path, ver="ver-16193.txt", wsl="wsl-version-1.2.5-win10.txt", hip_path=None
    )
    found = by_check(doctor.diagnose(host))
    assert found["windows-build"].severity == "fail" and "16193" in found["windows-build"].summary
    assert found["wsl-version"].severity == "warn" and found["wsl-version"].fix
    assert found["hip-path"].severity == "warn"
    assert "hipinfo" not in found


def test_no_command_changes_gpu_settings(tmp_path: Path) -> None:
    """doctor is read-only: no rocm-smi/amd-smi setters, no usermod, no modprobe."""
    host, run = windows_host(tmp_path)
    doctor.diagnose(host)
    lrun = Outputs({"rocminfo": (0, data("rocminfo-native-rx7900xtx.txt"))})
    doctor.diagnose(make_host(tmp_path / "l", "linux", lrun, files={"dev/kfd": ""}))
    for argv in run.calls + lrun.calls:
        assert not any(a.startswith("--set") for a in argv), argv
        assert Path(argv[0]).name not in ("rocm-smi", "amd-smi", "usermod", "modprobe")

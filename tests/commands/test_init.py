"""`envbuilder init` (issue 23): a starter spec that `envbuilder check` accepts with 0 warnings.

Through the real CLI (`main`) in empty folders, checked by the real `check`: the acceptance
cases (RX 7900 XTX on Windows, a gfx942 Linux host, the CPU case), every GPU of the
compatibility data on every OS (written and accepted, or refused with the reason, writing
nothing), host detection from a prepared host (doctor's own Host, answering with a real
rocminfo output from tests/data/doctor), and that an existing file is never overwritten.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from test_doctor import Outputs, data, make_host

from envbuilder.commands._cli import main
from envbuilder.commands.init import host_request
from envbuilder.core.compatload import load_compat
from envbuilder.spec.starter import OSES, choose

GPUS = [g.names[0] if g.names else g.gfx for g in load_compat().gpus]


def _init(folder: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    code = main(["init", "--spec", str(folder / "environments.toml"), *args])
    out, err = capsys.readouterr()
    return code, out, err


def _check(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(["check", "--json", "--spec", str(folder / "environments.toml")])
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    assert code == 0, result
    return result


def _spec(folder: Path) -> dict[str, object]:
    return tomllib.loads((folder / "environments.toml").read_text(encoding="utf-8"))


def test_rx7900xtx_on_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = _init(tmp_path, "--gpu", "RX 7900 XTX", "--os", "windows", capsys=capsys)
    assert code == 0
    assert out.split() == [str(tmp_path / "environments.toml"), "gfx1100"]
    result = _check(tmp_path, capsys)
    assert result["findings"] == []
    env = _spec(tmp_path)["env"]["gfx1100"]  # type: ignore[index]
    assert env["rocm"] == "7.14.1"  # the newest release with Windows wheels and a WSL stack
    assert env["packages"] == ["torch==2.12.0+rocm7.14.1"]
    assert env["targets"] == ["wsl2", "windows"]
    assert env["wsl2"]["ubuntu"] == "24.04"
    text = (tmp_path / "environments.toml").read_text(encoding="utf-8")
    # The comments cite the data's public sources (issue 34: not the notes users cannot open)
    assert "ROCm/rocm-install-on-linux" in text and "rocm-2026.md" not in text


def test_gfx942_linux(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, _err = _init(tmp_path, "--gpu", "gfx942", "--os", "linux", capsys=capsys)
    assert code == 0
    assert _check(tmp_path, capsys)["findings"] == []
    env = _spec(tmp_path)["env"]["gfx942"]  # type: ignore[index]
    assert (env["rocm"], env["gpu"], env["targets"]) == ("10.1.0", "gfx942", ["docker", "native"])


def test_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, _err = _init(tmp_path, "--gpu", "cpu", "--os", "linux", capsys=capsys)
    assert code == 0
    assert _check(tmp_path, capsys)["findings"] == []
    env = _spec(tmp_path)["env"]["cpu"]  # type: ignore[index]
    # the newest torch the compatibility data lists on PyTorch's cpu index
    (row,) = load_compat().index_rows("https://download.pytorch.org/whl/cpu")
    assert env["accelerator"] == "cpu" and env["packages"] == [f"torch=={max(row.candidates())}"]
    assert env["docker"]["base"] == "ubuntu:24.04" and env["python"] == "3.12"


@pytest.mark.parametrize("os_name", OSES)
@pytest.mark.parametrize("gpu", GPUS)
def test_every_gpu_of_the_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: str, os_name: str
) -> None:
    """Each GPU on each OS: a spec check accepts with no finding, or a refusal (exit 1)
    that names the GPU and writes nothing."""
    code, _out, err = _init(tmp_path, "--gpu", gpu, "--os", os_name, capsys=capsys)
    if code == 0:
        assert _check(tmp_path, capsys)["findings"] == []
        return
    assert code == 1, err
    assert gpu in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_common_gpus_get_a_spec_everywhere_they_run() -> None:
    """Not only refusals: the GPUs the data has verified facts for get a spec on Linux, and
    the RDNA3/RDNA4 ones on WSL2 and Windows too."""
    from envbuilder.commands.init import _findings
    from envbuilder.spec.starter import Request

    for gpu in ("MI300X", "MI355X", "RX 9070 XT", "RX 7900 XTX", "Radeon 890M"):
        assert choose(Request(gpu, "linux"), _findings).candidate.targets == ("docker", "native")
    for gpu in ("RX 9070 XT", "RX 7900 XTX"):
        assert "wsl2" in choose(Request(gpu, "wsl2"), _findings).candidate.targets
        assert choose(Request(gpu, "windows"), _findings).candidate.targets == (
            "wsl2",
            "windows",
        )


def test_from_a_linux_host_with_an_rx7900xtx(tmp_path: Path) -> None:
    """doctor's detection (its Host, rocminfo answering with a real output)."""
    host = make_host(
        tmp_path, "linux", Outputs({"rocminfo": (0, data("rocminfo-native-rx7900xtx.txt"))})
    )
    request = host_request(host, None, None)
    assert (request.gpu, request.os) == ("gfx1100", "linux")
    assert "Radeon RX 7900 XTX (gfx1100) found by doctor" in request.found


def test_from_a_host_without_an_amd_gpu_is_a_cpu_env(tmp_path: Path) -> None:
    host = make_host(tmp_path, "wsl2", Outputs({}))
    request = host_request(host, None, None)
    assert (request.gpu, request.os) == (None, "wsl2")


def test_init_from_this_host_passes_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No flags: this machine (no AMD GPU here, so a CPU env for its OS)."""
    code, _out, err = _init(tmp_path, capsys=capsys)
    assert code == 0, err
    assert _check(tmp_path, capsys)["findings"] == []
    assert "from this host" in (tmp_path / "environments.toml").read_text(encoding="utf-8")


def test_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "environments.toml"
    spec.write_text("# mine\n")
    code, _out, err = _init(tmp_path, "--gpu", "cpu", "--os", "linux", capsys=capsys)
    assert code == 1 and "never overwrites" in err
    assert spec.read_text() == "# mine\n"
    link = tmp_path / "other.toml"
    link.symlink_to(tmp_path / "missing-target.toml")  # a dangling link is a name taken too
    assert main(["init", "--gpu", "cpu", "--os", "linux", "--spec", str(link)]) == 1
    assert not (tmp_path / "missing-target.toml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environments.toml", "other.toml"]


def test_unknown_gpu_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _init(tmp_path, "--gpu", "GTX 1080", "--os", "linux", capsys=capsys)
    assert code == 2 and "not in the compatibility data" in err and "RX 7900 XTX" in err
    assert list(tmp_path.iterdir()) == []

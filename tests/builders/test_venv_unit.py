"""Fast tests of the venv targets' pure parts: Windows paths and command lines (never run here),
activate scripts (bash ones really sourced), marker, diff, discovery of a real interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from envbuilder.builders.lookup import builder_for
from envbuilder.builders.venvcommands import (
    VenvLayout,
    package_diff,
    probe_command,
    sync_changes,
    uv_sync_command,
    uv_venv_command,
)
from envbuilder.builders.venvfolder import MARKER, marker_bytes
from envbuilder.core import activate
from envbuilder.core.errors import BuildError, EngineError
from envbuilder.core.model import EnvSpec
from envbuilder.core.quoting import QuotingError
from envbuilder.host import pyfinder
from envbuilder.targets import registry
from envbuilder.targets.base import BuildOptions, ValidateOptions
from envbuilder.targets.windows import WindowsTable

HOSTILE = "a'b\"c $(touch PWNED) `id` ; & | ‘x’ %PATH% \\ $HOME"


def _env(**kw: object) -> EnvSpec:
    base: dict[str, object] = dict(
        name="rocm64",
        description="",
        accelerator="rocm",
        python="3.12",
        packages=("torch",),
        index_pins={},
        targets=("windows", "native"),
        rocm="6.4.1",
        gfx="gfx1100",
    )
    base.update(kw)
    return EnvSpec(**base)  # type: ignore[arg-type]


def activation_env(env: EnvSpec, target: str) -> dict[str, str]:
    """The variables `target`'s activation sets (its descriptor's `variables`)."""
    return registry.get(target).variables(env)


# --- layout and command lines ------------------------------------------------------------------


def test_windows_layout_uses_scripts_python_exe() -> None:
    layout = VenvLayout(PureWindowsPath(r"C:\Users\me\envs\rocm64"), windows=True)
    assert layout.python == PureWindowsPath(r"C:\Users\me\envs\rocm64\Scripts\python.exe")
    assert str(layout.scripts) == r"C:\Users\me\envs\rocm64\Scripts"
    assert str(layout.marker) == rf"C:\Users\me\envs\rocm64\{MARKER}"


def test_posix_layout_uses_bin_python() -> None:
    layout = VenvLayout(PurePosixPath("/srv/venvs/cpu"), windows=False)
    assert layout.python == PurePosixPath("/srv/venvs/cpu/bin/python")


def test_py_launcher_command_line() -> None:
    cmd = pyfinder.py_launcher_command("3.12")
    assert cmd[:3] == ["py", "-3.12", "-c"]
    assert "sys.executable" in cmd[3]


@pytest.mark.parametrize("bad", ["3", "3.12.1", "py3.12", "", "3.x"])
def test_version_request_must_be_major_minor(bad: str) -> None:
    with pytest.raises(EngineError, match=r"MAJOR\.MINOR"):
        pyfinder.py_launcher_command(bad)


def test_uv_find_never_downloads_and_ignores_active_venvs() -> None:
    cmd = pyfinder.uv_find_command("uv", "3.11")
    assert cmd[:3] == ["uv", "python", "find"]
    assert {"--system", "--no-python-downloads", "--no-project"} <= set(cmd)
    assert cmd[-1] == "3.11"


def test_windows_commands_with_windows_paths() -> None:
    venv = PureWindowsPath(r"C:\envs\rocm 64")
    layout = VenvLayout(venv, windows=True)
    assert uv_venv_command("uv.exe", r"C:\Python312\python.exe", venv, "rocm64-windows")[-1] == (
        r"C:\envs\rocm 64"
    )
    sync = uv_sync_command("uv.exe", layout.python, PureWindowsPath(r"C:\tmp\requirements.txt"))
    assert sync[:3] == ["uv.exe", "pip", "sync"]
    assert {"--offline", "--no-index", "--require-hashes", "--no-cache"} <= set(sync)
    assert r"C:\envs\rocm 64\Scripts\python.exe" in sync


def test_probe_command_labels_env_and_target() -> None:
    opts = ValidateOptions(level="quick", only=("matmul",), skip=("amp",))
    cmd = probe_command(
        PurePosixPath("/v/bin/python"),
        PurePosixPath("/t/probe.pyz"),
        PurePosixPath("/p/pylock.toml"),
        PurePosixPath("/t/r.json"),
        _env(accelerator="cpu", rocm=None),
        "native",
        opts,
    )
    joined = " ".join(cmd)
    assert cmd[:2] == ["/v/bin/python", "/t/probe.pyz"]
    assert "--expect cpu" in joined and "--lock /p/pylock.toml" in joined
    assert "--label env=rocm64 --label target=native" in joined
    assert "--only matmul" in joined and "--skip amp" in joined


# --- discovery (real interpreters on this machine) ---------------------------------------------


def test_uv_finds_the_running_python_version() -> None:
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = pyfinder.find_python(want, windows=False)
    assert found.version.startswith(want + ".")
    assert Path(found.executable).exists()


def test_missing_python_names_the_version() -> None:
    with pytest.raises(EngineError, match=r"Python 3\.2 not found.*install Python 3\.2"):
        pyfinder.find_python("3.2", windows=False)


def test_report_of_another_version_is_refused() -> None:
    with pytest.raises(EngineError, match=r"asked for Python 3\.12 but .* is 3\.11\.7"):
        pyfinder.parse_report("/usr/bin/python3\n3.11.7\n", "3.12")


def test_windows_target_on_linux_says_it_needs_windows(tmp_path: Path) -> None:
    from envbuilder.core.progress import no_progress
    from envbuilder.core.project import Project

    if sys.platform == "win32":
        pytest.skip("this checks the refusal on non-Windows hosts")
    builder = builder_for(registry.get("windows"))
    with pytest.raises(BuildError, match="needs Windows"):
        builder.build(
            Project.from_spec(tmp_path / "environments.toml"), _env(), BuildOptions(), no_progress
        )


# --- the activation environment ----------------------------------------------------------------


def test_windows_env_has_hip_path_and_never_hsa_override() -> None:
    env = _env(
        env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0", "MIOPEN_LOG_LEVEL": "3"},
        rccl={"NCCL_DEBUG": "INFO"},
    )
    got = activation_env(env, "windows")
    assert got == {"HIP_PATH": "C:\\Program Files\\AMD\\ROCm\\6.4\\", "MIOPEN_LOG_LEVEL": "3"}
    for render in (activate.bash_block, activate.powershell_block, activate.cmd_activate_block):
        assert "HSA_OVERRIDE_GFX_VERSION" not in render(got)


def test_windows_hip_path_from_spec_wins() -> None:
    env = _env(tables={"windows": WindowsTable(python="3.12", hip_path="D:\\ROCm\\6.4\\")})
    assert activation_env(env, "windows")["HIP_PATH"] == "D:\\ROCm\\6.4\\"


def test_linux_env_has_rocm_path_override_and_rccl() -> None:
    env = _env(env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, rccl={"NCCL_DEBUG": "INFO"})
    assert activation_env(env, "native") == {
        "ROCM_PATH": "/opt/rocm",
        "HSA_OVERRIDE_GFX_VERSION": "10.3.0",
        "NCCL_DEBUG": "INFO",
    }


def test_cpu_env_sets_only_its_own_variables() -> None:
    env = _env(accelerator="cpu", rocm=None, env={"OMP_NUM_THREADS": "2"})
    assert activation_env(env, "native") == {"OMP_NUM_THREADS": "2"}


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "$(x)"])
def test_bad_variable_names_are_refused(name: str) -> None:
    with pytest.raises(BuildError, match="not a valid name"):
        activation_env(_env(env={name: "1"}), "native")


def test_line_breaks_are_refused() -> None:
    with pytest.raises(BuildError, match="line break"):
        activation_env(_env(env={"X": "a\nb"}), "native")


def test_powershell_values_are_single_quoted_literals() -> None:
    block = activate.powershell_block(
        {"HIP_PATH": "C:\\Program Files\\AMD\\ROCm\\6.4\\", "X": "it's ‘odd’ $env:PATH"}
    )
    assert "$env:HIP_PATH = 'C:\\Program Files\\AMD\\ROCm\\6.4\\'" in block
    # every quote PowerShell accepts as one is doubled, so nothing ends the literal early
    assert "$env:X = 'it''s ‘‘odd’’ $env:PATH'" in block
    assert "function global:deactivate" in block


def test_cmd_values_escape_percent_and_refuse_double_quotes() -> None:
    block = activate.cmd_activate_block({"HIP_PATH": "C:\\AMD\\6.4\\", "P": "100%"})
    assert '@set "HIP_PATH=C:\\AMD\\6.4\\"\r\n' in block
    assert '@set "P=100%%"' in block
    assert block.endswith("\r\n") and "\n" not in block.replace("\r\n", "")
    with pytest.raises(QuotingError, match="double quote"):
        activate.cmd_activate_block({"X": 'a"&calc'})
    restore = activate.cmd_deactivate_block({"HIP_PATH": "x"})
    assert '@set "HIP_PATH=%_ENVBUILDER_OLD_HIP_PATH%"' in restore


def test_splice_replaces_keeps_line_endings_and_removes() -> None:
    text = "@echo off\r\nset A=1\r\n"
    once = activate.splice(text, activate.cmd_activate_block({"A": "2"}))
    assert activate.splice(once, activate.cmd_activate_block({"A": "2"})) == once
    assert "\n" not in once.replace("\r\n", "")
    changed = activate.splice(once, activate.cmd_activate_block({"A": "3"}))
    assert '@set "A=3"' in changed and '@set "A=2"' not in changed
    assert activate.splice(changed, "") == text


def test_windows_script_names_are_found_case_insensitively() -> None:
    names = [
        PureWindowsPath(rf"C:\v\Scripts\{n}")
        for n in ("activate", "Activate.ps1", "activate.bat", "deactivate.bat", "python.exe")
    ]
    blocks = activate.script_blocks(names, {"HIP_PATH": "C:\\x\\"}, windows=True)
    assert set(blocks) == {"activate", "Activate.ps1", "activate.bat", "deactivate.bat"}
    assert set(activate.script_blocks(names, {"A": "1"}, windows=False)) == {
        "activate",
        "Activate.ps1",
    }
    with pytest.raises(BuildError, match=r"no activate\.ps1"):
        activate.script_blocks(names[:1] + names[2:], {"A": "1"}, windows=True)


# --- bash activation, really sourced -----------------------------------------------------------


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    found = pyfinder.find_python(
        f"{sys.version_info.major}.{sys.version_info.minor}", windows=False
    )
    subprocess.run(
        uv_venv_command(pyfinder.uv_bin(), str(found.executable), venv, "t"),
        check=True,
        capture_output=True,
    )
    return venv


def _bash(script: str, cwd: Path) -> list[str]:
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=cwd, check=True
    )
    return out.stdout.splitlines()


def test_bash_activate_sets_and_deactivate_restores(bare_venv: Path, tmp_path: Path) -> None:
    variables = {"ROCM_PATH": "/opt/rocm", "HOSTILE": HOSTILE}
    changed = activate.write_activation(bare_venv / "bin", variables, windows=False)
    assert {p.name for p in changed} == {"activate", "activate.ps1"}
    # nothing to rewrite the second time
    assert activate.write_activation(bare_venv / "bin", variables, windows=False) == []
    assert activate.activation_is_current(bare_venv / "bin", variables, windows=False)
    act = bare_venv / "bin" / "activate"
    lines = _bash(
        f"export ROCM_PATH=/usr/old; unset HOSTILE; . {act}; . {act};"  # twice: still restores
        f' printf "%s\\n" "$ROCM_PATH" "$HOSTILE"; deactivate;'
        f' printf "%s\\n" "$ROCM_PATH" "${{HOSTILE-unset}}";'
        f" declare -F deactivate _envbuilder_venv_deactivate || echo gone",
        tmp_path,
    )
    assert lines == ["/opt/rocm", HOSTILE, "/usr/old", "unset", "gone"]
    assert not (tmp_path / "PWNED").exists()


def test_rebuild_with_other_variables_replaces_the_block(bare_venv: Path) -> None:
    activate.write_activation(bare_venv / "bin", {"A": "1"}, windows=False)
    activate.write_activation(bare_venv / "bin", {"B": "2"}, windows=False)
    text = (bare_venv / "bin" / "activate").read_text()
    assert text.count(activate.BEGIN) == 1 and "export B=2" in text and "export A=" not in text
    assert not activate.activation_is_current(bare_venv / "bin", {"A": "1"}, windows=False)


# --- marker and diff ---------------------------------------------------------------------------


def test_marker_is_deterministic_and_records_the_lock() -> None:
    a = marker_bytes(Path("/v"), "cpu", "native", "ab" * 32, "3.11.7", {"b": "2", "a": "1"})
    b = marker_bytes(Path("/v"), "cpu", "native", "ab" * 32, "3.11.7", {"a": "1", "b": "2"})
    assert a == b
    assert b'"lock_sha256": "' + b"ab" * 32 in a and b'"venv": "/v"' in a


def test_package_diff_names_extra_missing_and_versions() -> None:
    diff = package_diff(
        {"Torch": "2.13.0+cpu", "six": "1.17.0", "numpy": "2.0"},
        {"torch": "2.13.0+cpu", "numpy": "2.1", "sympy": "1.14"},
    )
    assert diff == [
        "extra: six==1.17.0",
        "missing: sympy==1.14",
        "other version: numpy==2.0 (lock: 2.1)",
    ]
    assert package_diff({"Typing_Extensions": "4"}, {"typing-extensions": "4"}) == []


def test_sync_changes_lists_added_removed_and_moved() -> None:
    before = {"six": "1", "Numpy": "1.0", "a": "1"}
    after = {"numpy": "2.0", "b": "3", "a": "1"}
    assert sync_changes(before, after) == ["+b==3", "-six==1", "numpy 1.0 -> 2.0"]
    assert sync_changes({"a": "1"}, {"a": "1"}) == []

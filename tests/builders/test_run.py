"""`envbuilder run` and `shell` (issue 23): a user's command in the built, lock-matching artifact,
with the device flags `validate` uses.

The unit tests hold the flags of every host kind to one source (envbuilder.image.runflags, which
engine.device_run_options, used by validate, and `run` both call), with host detection
read from fake /dev trees and a fake /etc/group in tmp folders. The integration tests run the
real CLI (a subprocess: `run` hands the terminal to its child) against the shipped cpu env's
image on the real engine and its native venv: torch's version printed, the `--print` line
pasted into bash doing the same, the command's exit code passed through, refusals.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest
from shipped import copy_shipped

from envbuilder.core.compat import HOST_KINDS, HostKind
from envbuilder.core.foreground import exit_status, run_foreground
from envbuilder.core.project import Project
from envbuilder.core.quoting import sh_word
from envbuilder.image import engine, runflags

ENV = "cpu"
TORCH = "2.13.0+cpu"
PRINT_TORCH = "import torch; print(torch.__version__)"

# --- unit: one source of flags -------------------------------------------------------------------


def _fake_host(root: Path, devices: tuple[str, ...], groups: str) -> Path:
    for device in devices:
        (root / device).parent.mkdir(parents=True, exist_ok=True)
        (root / device).write_text("")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/group").write_text(groups)
    return root


@pytest.fixture
def no_forced_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runflags.HOST_KIND_ENV, raising=False)


@pytest.mark.usefixtures("no_forced_kind")
def test_rocm_host_gets_kfd_dri_and_the_hosts_video_and_render_gids(tmp_path: Path) -> None:
    root = _fake_host(
        tmp_path, ("dev/kfd", "dev/dri/renderD128"), "root:x:0:\nvideo:x:44:\nrender:x:993:\n"
    )
    kind = runflags.detect_host_kind(root)
    assert kind == "native-rocm"
    flags = runflags.host_run_flags(kind, runflags.group_file_lookup(root / "etc/group"))
    args = runflags.cli_arguments(flags)
    assert args == [
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add=44",
        "--group-add=993",
        "--security-opt=seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
        "--ipc=host",
        "--shm-size=8G",
    ]
    options = runflags.sdk_options(flags)
    assert options["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert options["group_add"] == ["44", "993"]


@pytest.mark.usefixtures("no_forced_kind")
def test_a_host_without_a_render_group_adds_only_video(tmp_path: Path) -> None:
    root = _fake_host(tmp_path, ("dev/kfd",), "video:x:44:\n")
    flags = runflags.host_run_flags(
        runflags.detect_host_kind(root), runflags.group_file_lookup(root / "etc/group")
    )
    assert flags.group_ids == (44,)
    assert "--group-add=44" in runflags.cli_arguments(flags)


@pytest.mark.usefixtures("no_forced_kind")
@pytest.mark.parametrize(
    ("files", "kind", "expected"),
    [
        (
            ("dev/dxg", "opt/rocm/lib/librocdxg.so"),
            "wsl2-rocdxg",
            [
                "--device=/dev/dxg",
                "--volume=/usr/lib/wsl/lib/libdxcore.so:/usr/lib/libdxcore.so:ro",
                "--volume=/opt/rocm/lib/librocdxg.so:/usr/lib/librocdxg.so:ro",
                "--env=HSA_ENABLE_DXG_DETECTION=1",
                "--ipc=host",
                "--shm-size=8G",
            ],
        ),
        (
            ("dev/dxg",),
            "wsl2-legacy",
            [
                "--device=/dev/dxg",
                "--volume=/usr/lib/wsl/lib/libdxcore.so:/usr/lib/libdxcore.so:ro",
                "--volume=/opt/rocm/lib/libhsa-runtime64.so.1:/opt/rocm/lib/libhsa-runtime64.so.1:ro",
                "--ipc=host",
                "--shm-size=8G",
            ],
        ),
        (("dev/nvidia0",), "nvidia", ["--ipc=host", "--shm-size=8G", "--gpus=all"]),
        ((), "cpu", []),
    ],
)
def test_wsl_nvidia_and_cpu_hosts(
    tmp_path: Path, files: tuple[str, ...], kind: str, expected: list[str]
) -> None:
    root = _fake_host(tmp_path, files, "video:x:44:\n")
    assert runflags.detect_host_kind(root) == kind
    flags = runflags.host_run_flags(kind, runflags.group_file_lookup(root / "etc/group"))
    assert runflags.cli_arguments(flags) == expected


@pytest.mark.parametrize("kind", HOST_KINDS)
def test_validate_and_run_spell_the_same_flags(kind: HostKind) -> None:
    """What validate creates containers with (engine.device_run_options) and what run
    passes to `docker run` are two spellings of one RunFlags."""
    flags = runflags.host_run_flags(kind)
    sdk = engine.device_run_options(kind)
    args = runflags.cli_arguments(flags)
    assert [f"--device={d.split(':')[0]}" for d in sdk.get("devices", [])] == [
        a for a in args if a.startswith("--device=")
    ]
    assert [f"--volume={h}:{v['bind']}:ro" for h, v in sdk.get("volumes", {}).items()] == [
        a for a in args if a.startswith("--volume=")
    ]
    assert [f"--group-add={g}" for g in sdk.get("group_add", [])] == [
        a for a in args if a.startswith("--group-add=")
    ]
    assert [f"--env={k}={v}" for k, v in sdk.get("environment", {}).items()] == [
        a for a in args if a.startswith("--env=")
    ]
    assert ("--gpus=all" in args) == ("device_requests" in sdk)
    assert (f"--ipc={sdk['ipc_mode']}" in args) if "ipc_mode" in sdk else True


def test_docker_run_argv_mounts_the_workspace_and_keeps_the_command(tmp_path: Path) -> None:
    argv = runflags.docker_run_argv(
        "envbuilder/x:1",
        ("python", "-c", "print(1)"),
        user="1000",
        flags=runflags.host_run_flags("cpu"),
        tty=True,
        workspace=tmp_path,
    )
    assert argv == [
        "docker",
        "run",
        "--rm",
        "--interactive",
        "--tty",
        "--user=1000",
        f"--volume={tmp_path}:/workspace",
        "--workdir=/workspace",
        "envbuilder/x:1",
        "python",
        "-c",
        "print(1)",
    ]


def test_exit_status_of_a_signal_is_128_plus_n() -> None:
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_foreground_returns_the_childs_code_and_its_signal() -> None:
    assert run_foreground(["sh", "-c", "exit 5"]) == 5
    assert run_foreground(["sh", "-c", "kill -TERM $$"]) == 128 + signal.SIGTERM


def test_foreground_missing_program_exits_127() -> None:
    from envbuilder.core.errors import CommandNotFoundError

    with pytest.raises(CommandNotFoundError) as caught:
        run_foreground(["envbuilder-no-such-program-here"])
    assert caught.value.exit_code == 127


# --- integration: the real CLI, engine and venv --------------------------------------------------


def _envbuilder(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, from the project's folder (the spec is found there)."""
    exe = Path(sys.executable).with_name("envbuilder")
    return subprocess.run(
        [str(exe), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def cpu_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_shipped(tmp_path_factory.mktemp("run-cpu"))


@pytest.fixture(scope="module")
def cpu_image(docker_client: Any, cpu_copy: Path) -> Iterator[Path]:
    """The shipped cpu env's image, built (or found up to date) through the CLI."""
    result = _envbuilder(cpu_copy, "-q", "build", "--target", "docker", "--env", ENV)
    assert result.returncode == 0, result.stderr
    yield cpu_copy


@pytest.mark.slow
def test_run_docker_prints_torchs_version(cpu_image: Path) -> None:
    result = _envbuilder(
        cpu_image, "run", "--env", ENV, "--target", "docker", "--", "python", "-c", PRINT_TORCH
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TORCH


@pytest.mark.slow
def test_run_docker_print_line_pasted_into_bash_does_the_same(cpu_image: Path) -> None:
    result = _envbuilder(
        cpu_image, "-q", "run", "--env", ENV, "--target", "docker", "--print", "--",
        "python", "-c", PRINT_TORCH,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("docker run --rm --interactive --user=1000 ")
    pasted = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout.strip() == TORCH


@pytest.mark.slow
def test_run_docker_exits_with_the_commands_code(cpu_image: Path) -> None:
    result = _envbuilder(cpu_image, "run", "--env", ENV, "--", "sh", "-c", "exit 7")
    assert result.returncode == 7, result.stderr  # docker: the env's first target


@pytest.mark.slow
def test_run_print_on_a_rocm_host_has_validates_device_flags(cpu_image: Path) -> None:
    result = _envbuilder(
        cpu_image, "-q", "run", "--env", ENV, "--target", "docker", "--print", "--", "true",
        env={runflags.HOST_KIND_ENV: "native-rocm"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    expected = runflags.cli_arguments(runflags.host_run_flags("native-rocm"))
    assert words[words.index("--label=org.envbuilder.role=run") + 1 :][: len(expected)] == expected


@pytest.mark.slow
def test_run_refuses_a_stale_lock_and_runs_nothing(cpu_image: Path, tmp_path: Path) -> None:
    project = copy_shipped(tmp_path / "stale")
    spec = project / "environments.toml"
    spec.write_text(
        spec.read_text().replace('description = "CPU-only', 'description = "Changed CPU-only')
    )
    marker = tmp_path / "ran"
    result = _envbuilder(project, "run", "--env", ENV, "--", "touch", str(marker))
    assert result.returncode == 1
    assert "older than the spec" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


@pytest.fixture(scope="module")
def cpu_venv(cpu_copy: Path) -> Path:
    """The shipped cpu env's native venv, built through the CLI (offline, from the wheel cache)."""
    if not shutil.which("uv") and not Path(sys.executable).with_name("uv").exists():
        pytest.skip("uv is not installed")
    result = _envbuilder(cpu_copy, "-q", "build", "--target", "native", "--env", ENV)
    assert result.returncode == 0, result.stderr
    return cpu_copy


@pytest.mark.slow
def test_run_native_prints_torchs_version_and_its_line_does_too(cpu_venv: Path) -> None:
    run = _envbuilder(
        cpu_venv, "run", "--env", ENV, "--target", "native", "--", "python", "-c", PRINT_TORCH
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == TORCH
    printed = _envbuilder(
        cpu_venv, "-q", "run", "--env", ENV, "--target", "native", "--print", "--",
        "python", "-c", PRINT_TORCH,
    )  # fmt: skip
    line = printed.stdout.strip()
    # POSIX sh (no activate script, which is bash's): a subshell exporting what run sets
    assert line.startswith("(unset ") and line.endswith("; python -c " + sh_word(PRINT_TORCH) + ")")
    clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    pasted = subprocess.run(
        ["/bin/sh", "-c", line], capture_output=True, text=True, timeout=600, env=clean
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout.strip() == TORCH


@pytest.mark.slow
def test_shell_native_reads_commands_from_stdin(cpu_venv: Path) -> None:
    exe = Path(sys.executable).with_name("envbuilder")
    result = subprocess.run(
        [str(exe), "-q", "shell", "--env", ENV, "--target", "native"],
        cwd=cpu_venv,
        input='echo "$VIRTUAL_ENV"; exit 4\n',
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SHELL": "/bin/sh"},
    )
    assert result.returncode == 4, result.stderr
    assert result.stdout.strip().endswith(".envbuilder/venvs/cpu-native")


@pytest.mark.slow
def test_run_native_refuses_a_venv_of_another_lock(cpu_venv: Path, tmp_path: Path) -> None:
    project = Project.from_spec(cpu_venv / "environments.toml")
    marker_path = project.root / ".envbuilder/venvs/cpu-native/envbuilder-venv.json"
    original = marker_path.read_bytes()
    try:
        marker_path.write_bytes(original.replace(b'"lock_sha256": "', b'"lock_sha256": "0'))
        ran = tmp_path / "ran"
        result = _envbuilder(cpu_venv, "run", "--env", ENV, "--target", "native", "--",
                             "touch", str(ran))  # fmt: skip
        assert result.returncode == 1
        assert "holds lock 0" in result.stderr and "envbuilder build" in result.stderr
        assert not ran.exists()
    finally:
        marker_path.write_bytes(original)


# --- the Windows-only lines (thin, unit-tested: wsl.exe and PowerShell cannot run here) ---------


def test_wsl_exe_line_runs_the_command_as_the_distros_user_through_a_login_shell() -> None:
    from envbuilder.builders.wsl2_run import WslEngine, login_argv
    from envbuilder.host.wslexe import Completed, WslExe
    from envbuilder.targets.base import RunOptions

    calls: list[list[str]] = []

    def recorder(argv: Any, stdin: bytes | None, timeout: float | None) -> Completed:
        calls.append(list(argv))  # the first launch reads /etc/passwd for uid 1000's name
        return Completed(
            0, b"root:x:0:0::/root:/bin/sh\nenvbuilder:x:1000:1000::/home/e:/bin/bash\n", b""
        )

    runner = WslEngine(WslExe(r"C:\Windows\System32\wsl.exe", runner=recorder), "envbuilder-cpu")
    inner = login_argv(("python", "-c", "print('it''s')"))
    command = runner.command("1000", inner, RunOptions(tty=True), "cpu")
    assert command.argv == (
        r"C:\Windows\System32\wsl.exe", "--distribution", "envbuilder-cpu", "--user", "envbuilder",
        "--exec", "/bin/sh", "-lc", 'exec "$@"', "sh", "python", "-c", "print('it''s')",
    )  # fmt: skip
    assert calls == [[r"C:\Windows\System32\wsl.exe", "--distribution", "envbuilder-cpu",
                      "--user", "root", "--exec", "cat", "/etc/passwd"]]  # fmt: skip
    assert command.shell == "powershell"
    assert command.line == (
        r"& 'C:\Windows\System32\wsl.exe' '--distribution' 'envbuilder-cpu' '--user' "
        """'envbuilder' '--exec' '/bin/sh' '-lc' 'exec "$@"' 'sh' 'python' '-c' """
        "'print(''it''''s'')'"
    )


def test_venv_activation_lines() -> None:
    from envbuilder.builders.venvcommands import activation_line

    posix = activation_line(Path("/p/my venv/bin"), ("python", "-c", "print(1)"), windows=False)
    assert posix == ". '/p/my venv/bin/activate' && python -c 'print(1)'"
    assert activation_line(Path("/p/v/bin"), (), windows=False) == ". /p/v/bin/activate"
    scripts = PureWindowsPath(r"C:\venvs\cpu\Scripts")
    win = activation_line(scripts, ("python", "-V"), windows=True)
    assert win == r"& 'C:\venvs\cpu\Scripts\Activate.ps1'; & 'python' '-V'"


@pytest.mark.slow
def test_workspace_mount_and_a_docker_shell_reading_stdin(cpu_image: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('from the workspace')\n")
    tmp_path.chmod(0o755)
    result = _envbuilder(
        cpu_image, "run", "--env", ENV, "--target", "docker", "--workspace", str(tmp_path),
        "--", "python", "train.py",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from the workspace"
    exe = Path(sys.executable).with_name("envbuilder")
    shell = subprocess.run(
        [str(exe), "-q", "shell", "--env", ENV, "--target", "docker"],
        cwd=cpu_image, input="echo \"$(id -u) $PWD\"; exit 3\n", capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert shell.returncode == 3, shell.stderr
    assert shell.stdout.strip() == "1000 /home/envbuilder"


@pytest.mark.slow
def test_run_refuses_an_image_whose_lock_label_is_not_the_locks(
    docker_client: Any, tmp_path: Path
) -> None:
    """The tag envbuilder/<env>:<hash> naming an image of another lock (a retag, a stale
    pull) is refused like pull refuses it, and nothing runs."""
    from test_cli_json import TINY_DOCKERFILE
    from test_docker_target import make_project

    from envbuilder.lock import lockfile

    project = make_project(tmp_path / "demo", dockerfile=TINY_DOCKERFILE)
    lock = lockfile.load_env_lock(project, "demo")
    assert lock is not None
    tag = f"envbuilder/demo:{lock.targets['docker'].pylock_sha256[:12]}"
    docker_client.images.get("debian:bookworm-slim").tag(tag)  # no lock label at all
    try:
        result = _envbuilder(
            project.root, "run", "--env", "demo", "--target", "docker", "--", "true"
        )
        assert result.returncode == 1
        assert f"refusing the image {tag}" in result.stderr and "(no label)" in result.stderr
    finally:
        docker_client.images.remove(tag)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_to_run_reaches_the_command(cpu_venv: Path) -> None:
    """envbuilder passes SIGTERM on to the command it runs and exits with the command's 143."""
    import time

    exe = Path(sys.executable).with_name("envbuilder")
    proc = subprocess.Popen(
        [str(exe), "-q", "run", "--env", ENV, "--target", "native", "--",
         "python", "-c", "import time; print('up', flush=True); time.sleep(60)"],
        cwd=cpu_venv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert time.monotonic() - start < 10  # the command ended, not waited out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_run_without_the_docker_cli_says_so_and_print_still_works(
    docker_client: Any, tmp_path: Path
) -> None:
    """The docker target's command needs the docker CLI (RunCommand.requires, declared by its
    builder, not by `run`): without it on PATH, run says why and how to get it and runs nothing;
    --print needs no CLI."""
    from test_cli_json import TINY_DOCKERFILE
    from test_docker_target import make_project

    project = make_project(tmp_path / "demo", dockerfile=TINY_DOCKERFILE).root
    built = _envbuilder(project, "-q", "build", "--target", "docker", "--env", "demo")
    assert built.returncode == 0, built.stderr
    image_id = built.stdout.split()[3]
    no_docker = {"PATH": str(tmp_path / "empty")}
    try:
        result = _envbuilder(project, "run", "--env", "demo", "--", "true", env=no_docker)
        assert result.returncode == 1, result.stderr
        assert f"error: {runflags.DOCKER_CLI_REQUIRED}" in result.stderr
        printed = _envbuilder(
            project, "run", "--env", "demo", "--print", "--", "true", env=no_docker
        )
        assert printed.returncode == 0 and printed.stdout.startswith("docker run "), printed.stderr
    finally:
        docker_client.images.remove(image_id, force=True)


def test_run_help_comes_from_the_targets() -> None:
    """Each target that runs commands says what run does there (TargetDescriptor.run_help), and
    `run` names no target itself: a fourth target with `run` needs no change to it."""
    import inspect

    from envbuilder.commands import run as run_command
    from envbuilder.targets import registry

    source = inspect.getsource(run_command)
    hosts = {"linux", "windows"}  # Capabilities.host's values, which run compares with
    for descriptor in registry.all():
        assert descriptor.name in hosts or f'"{descriptor.name}"' not in source, descriptor.name
        if descriptor.has("run"):
            assert descriptor.run_help, descriptor.name
            first = descriptor.run_help.split()[0]
            assert f"\n  {descriptor.name:<9} {first}" in run_command.DESCRIPTION

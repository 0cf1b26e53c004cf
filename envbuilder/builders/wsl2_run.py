"""Where a `.wsl` runs a command: the probe (validate) or a user's (run, shell).

Two engines with one Protocol (`Engine`): `DockerEngine`, a container of the `.wsl` imported into
Docker (Linux), and `WslEngine`, the installed distro through wsl.exe (Windows). Both first do
what WSL does at a distro's first launch (`first_launch`: run the `[oobe] command` as root; it
creates the default user, which the modern format does not ship), then run as the user WSL then
starts as, through a login shell (`login_argv`) so /etc/profile.d sets the env's variables as it
does for a WSL login. The builder (envbuilder.builders.wsl2) picks the engine and never asks
which one it got.
"""

from __future__ import annotations

import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from envbuilder.builders.proberun import probe_options, probe_zipapp_bytes
from envbuilder.core.errors import EngineError, ValidationError, output_tail
from envbuilder.core.imagedefs import ENV_LABEL, VENV_PYTHON
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project
from envbuilder.core.quoting import sh_command
from envbuilder.host import wslexe
from envbuilder.image import wsl
from envbuilder.targets.base import RunCommand, RunOptions, ValidateOptions
from envbuilder.targets.wsl2 import DESCRIPTOR

if TYPE_CHECKING:
    from envbuilder.core.compat import HostKind
    from envbuilder.image.engine import Client

TARGET = DESCRIPTOR.name
PROBE_DIR = "/tmp/envbuilder"
PROBE_PATH = f"{PROBE_DIR}/probe.pyz"
PYLOCK_PATH = f"{PROBE_DIR}/pylock.toml"
#: /tmp is world-writable (1777) in every rootfs, so the probe user can write its report there.
REPORT_PATH = "/tmp/envbuilder-probe-report.json"
#: How long the first-launch (oobe) command may take in a validation container.
FIRST_LAUNCH_TIMEOUT_S = 600


@dataclass(frozen=True)
class ProbeRun:
    """One probe run, the same for every engine: argv, files to copy in, the report path."""

    argv: tuple[str, ...]
    files_in: Mapping[str, bytes]
    report: str = REPORT_PATH


def probe_argv(
    env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str], with_lock: bool
) -> list[str]:
    """The probe's command line inside the distro, run by a login shell (so /etc/profile.d
    applies, as in a WSL login) with the venv's Python."""
    argv = [
        VENV_PYTHON,
        PROBE_PATH,
        *probe_options(env, options, dict(sorted(labels.items()))),
        "--json",
        REPORT_PATH,
    ]
    if options.timeout_s is not None:
        argv += ["--timeout", str(options.timeout_s)]
    if with_lock:
        argv += ["--lock", PYLOCK_PATH]
    return list(login_argv(tuple(argv)))


def make_probe_run(
    project: Project, env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]
) -> ProbeRun:
    files = {PROBE_PATH: probe_zipapp_bytes()}
    pylock = project.pylock(env.name, TARGET)
    if pylock.is_file():  # the lock conformance check compares the distro with it
        files[PYLOCK_PATH] = pylock.read_bytes()
    return ProbeRun(tuple(probe_argv(env, options, labels, pylock.is_file())), files)


class Engine(Protocol):
    """Where a ProbeRun runs: Docker (an imported `.wsl`) or wsl.exe (the installed distro)."""

    name: str

    def first_launch(self, command: str, progress: ProgressFn) -> None:
        """Run the distro's oobe `command` as root, as WSL does at its first launch."""
        ...

    def run(self, run: ProbeRun, user: str, progress: ProgressFn) -> tuple[int, str, bytes | None]:
        """(exit code, output, report bytes or None when the probe wrote none)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Which engine this is, for the validation report's `engine` object."""
        ...

    def command(
        self, user: str, argv: tuple[str, ...], options: RunOptions, env: str
    ) -> RunCommand:
        """How `envbuilder run` starts `argv` in env `env`'s distro as `user` (a name, or the
        uid the first launch gave a name) with `options` (a terminal, a workspace)."""
        ...


@dataclass
class DockerEngine:
    """Runs the probe in a container of the imported `.wsl` image."""

    client: Client
    image: str
    host_kind: str = "cpu"
    name: str = "docker"

    def first_launch(self, command: str, progress: ProgressFn) -> None:
        """Run the oobe command as root, offline, in a container of the image, and go on from
        the result (committed as `<image>-oobe`, reused for the same `.wsl`)."""
        self.image = run_first_launch(self.client, self.image, command, progress)

    def run(self, run: ProbeRun, user: str, progress: ProgressFn) -> tuple[int, str, bytes | None]:
        from envbuilder.image import engine

        code, output, files = engine.run_in_container(
            self.client,
            self.image,
            list(run.argv),
            engine.ContainerRun(user=user, host_kind=self.host_kind),  # type: ignore[arg-type]
            files_in=dict(run.files_in),
            files_out=[run.report],
            progress=progress,
        )
        return code, output, files.get(run.report)

    def describe(self) -> dict[str, Any]:
        from envbuilder.image import engine

        return dict(engine.engine_info(self.client).as_dict())

    def command(
        self, user: str, argv: tuple[str, ...], options: RunOptions, env: str
    ) -> RunCommand:
        """`docker run` of `argv` in a container of the (first-launched) image as `user`, with
        this host's device flags: what the probe gets (envbuilder.image.runflags)."""
        from envbuilder.image import runflags

        argv_run = runflags.docker_run_argv(
            self.image,
            argv,
            user=user,
            flags=runflags.host_run_flags(cast("HostKind", self.host_kind)),
            tty=options.tty,
            workspace=_workspace(options.workspace),
            labels=((ENV_LABEL, env), ("org.envbuilder.role", "run")),
        )
        return RunCommand(
            tuple(argv_run), sh_command(argv_run), requires=runflags.DOCKER_CLI_REQUIRED
        )


@dataclass
class WslEngine:
    """Runs the probe in the installed distro through wsl.exe (Windows only)."""

    exe: wslexe.WslExe
    distro: str
    name: str = "wsl"

    def first_launch(self, command: str, progress: ProgressFn) -> None:
        """Run the oobe command as root in the installed distro, as WSL does at the first
        interactive launch (`--exec` starts never run it); it changes nothing a second time."""
        progress(f"{self.distro}: first launch ({command})", 0, None)
        result = self.exe.run(self.distro, "root", first_launch_argv(command))
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", "replace")
            raise ValidationError(first_launch_failure(command, result.returncode, output))

    def run(self, run: ProbeRun, user: str, progress: ProgressFn) -> tuple[int, str, bytes | None]:
        if user.isdigit():  # `wsl --user` takes a name: the one the oobe command gave the uid
            user = user_of_uid(self.exe.get_file(self.distro, "/etc/passwd"), int(user))
        for path, data in sorted(run.files_in.items()):
            self.exe.put_file(self.distro, path, data)
        result = self.exe.run(self.distro, user, run.argv)
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        try:
            report: bytes | None = self.exe.get_file(self.distro, run.report)
        except EngineError:
            report = None
        return result.returncode, output, report

    def describe(self) -> dict[str, Any]:
        """product "wsl" and the WSL version (empty for the inbox WSL, which reports none)."""
        try:
            version = ".".join(map(str, self.exe.version()))
        except EngineError:
            version = ""
        return {"product": "wsl", "version": version}

    def command(
        self, user: str, argv: tuple[str, ...], options: RunOptions, env: str
    ) -> RunCommand:
        """wsl.exe running `argv` in the distro as `user` (its name: the uid's, after the first
        launch), and the same as a PowerShell line. The distro's own terminal is the user's;
        a workspace is for a container (the distro sees the Windows drives itself)."""
        if user.isdigit():
            user = user_of_uid(self.exe.get_file(self.distro, "/etc/passwd"), int(user))
        wsl_argv = wslexe.run_cmd(self.exe.exe, self.distro, user, argv)
        return RunCommand(tuple(wsl_argv), wslexe.powershell_line(wsl_argv), "powershell")


# ----------------------------------------------------------------------------- first launch


@dataclass(frozen=True)
class FirstLaunch:
    """What WSL does when a `.wsl` is started the first time: run `command` (the `[oobe]
    command`, None when there is none) as root, then start as `user` -- a name, or the numeric
    `[oobe] defaultUid` when the tar has no user with it yet (the oobe command creates it)."""

    command: str | None
    user: str


def first_launch(path: Path) -> FirstLaunch:
    """Read the `.wsl` at `path`: its oobe command, and the user WSL then starts as:
    /etc/wsl.conf `[user] default`, else `[oobe] defaultUid` (by name when /etc/passwd has it),
    else root."""
    with tarfile.open(path, "r:*") as tar:
        view = wsl.TarView(tar)

        def read(name: str) -> bytes:
            member = view.resolve(name)
            return view.read(member) if member is not None and member.isfile() else b""

        dist = wsl.parse_conf(read("/etc/wsl-distribution.conf"), "/etc/wsl-distribution.conf")
        command = dist.get("oobe.command") or None
        user = wsl.parse_conf(read("/etc/wsl.conf"), "/etc/wsl.conf").get("user.default")
        if user:
            return FirstLaunch(command, user)
        uid = dist.get("oobe.defaultuid", "")
        if uid.isdigit():
            entry = wsl.parse_passwd(read("/etc/passwd")).get(int(uid))
            return FirstLaunch(command, entry[0] if entry else str(int(uid)))
    return FirstLaunch(command, "root")


def default_user(path: Path) -> str:
    """The user WSL starts the distro in `path` as, after its first launch (FirstLaunch.user)."""
    return first_launch(path).user


def user_of_uid(passwd: bytes, uid: int) -> str:
    """The name /etc/passwd gives `uid`; ValidationError when it has none."""
    entry = wsl.parse_passwd(passwd).get(uid)
    if entry is None:
        raise ValidationError(
            f"the distro has no user with uid {uid} after its first launch; "
            "its [oobe] command should create it (/etc/wsl-distribution.conf)"
        )
    return entry[0]


def first_launch_argv(command: str) -> tuple[str, ...]:
    """The oobe command as a command line for /bin/sh (it may carry arguments)."""
    return ("/bin/sh", "-c", command)


def first_launch_failure(command: str, code: int, output: str) -> str:
    tail = output_tail(output, 30)
    return (
        f"the distro's first-launch command {command} failed (exit {code}); WSL would run it "
        f"again at the next launch. Its output ended with:\n{tail}"
    )


def run_first_launch(
    client: Client, image: str, command: str, progress: ProgressFn = no_progress
) -> str:
    """Run `command` as root in a container of `image` (no network, as it must work offline)
    and commit the result as `<image>-oobe`; return that tag (reused when it exists: the tag
    of an imported `.wsl` names its sha256, and the command is inside it)."""
    from envbuilder.image import engine

    tag = f"{image}-oobe"
    if engine.image_info(client, tag) is not None:
        return tag
    progress(f"first launch: {command} as root", 0, None)
    code, output = engine.run_and_commit(
        client,
        image,
        list(first_launch_argv(command)),
        tag,
        engine.ContainerRun(user="root", network_mode="none", timeout_s=FIRST_LAUNCH_TIMEOUT_S),
    )
    if code != 0:
        raise ValidationError(first_launch_failure(command, code, output))
    return tag


def login_argv(command: tuple[str, ...]) -> tuple[str, ...]:
    """`command` run by a login shell, as a WSL login runs it (/etc/profile.d applies): the
    same wrapper the probe runs in (probe_argv)."""
    return ("/bin/sh", "-lc", 'exec "$@"', "sh", *command)


def _workspace(path: Path | None) -> Path | None:
    from envbuilder.builders.docker import workspace_folder

    return workspace_folder(path)

"""The `wsl2` target's builder: a reproducible `.wsl` distro, built with Docker, validated by the
probe.

build     the rendered `wsl/<env>/Dockerfile` is built with Docker (build-context contract), a
          container of the image is exported, and the stream goes through `envbuilder.image.wsl`
          into `dist/<env>.wsl` (sha256 recorded in the env lock's artifacts). On Windows, where
          wsl.exe exists, the file is then installed as the env's distro (`envbuilder.host.wslexe`).
validate  runs the probe inside exactly that file. Linux: the `.wsl` is `docker import`ed and
          the probe runs in a container of it; Windows: it runs in the installed distro with
          `wsl --exec`. Both engines first do what WSL does at a distro's first launch (run the
          `[oobe] command` as root: it creates the default user, which the modern format does
          not ship), then run the same `ProbeRun` (argv, files in, report out) as the user WSL
          then starts as (`[oobe] defaultUid`), through a login shell so /etc/profile.d sets the
          env's variables as it does for a WSL login.
push      pushes the rootfs image (the same registry code as the docker target).
          The rootfs image is the one envbuilder writes from the engine's build
          (envbuilder.image.repro): its id depends only on the lock and the base image's digest; the
          lock records it with the `.wsl`'s sha256, and `build --verify` checks both.
pull      pulls that image by digest and turns it into the `.wsl` without building; the sha256
          must equal the one the lock recorded for the build.

Options the Builder interface has no slot for come from the environment: ENVBUILDER_WSL_REPLACE=1
(re-install an existing distro), ENVBUILDER_WSL_LOCATION (where distros' disks go; default
%LOCALAPPDATA%\\envbuilder\\wsl\\<distro>).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from envbuilder.builders.proberun import (
    OtherLock,
    probe_options,
    probe_zipapp_bytes,
    refuse_other_lock,
    with_engine,
    with_other_lock,
)
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import BuildError, EngineError, ValidationError, output_tail
from envbuilder.core.fsutil import atomic_write_bytes, sha256_file
from envbuilder.core.imagedefs import (
    ENV_LABEL,
    LOCK_LABEL,
    LOCK_SHA_ARG,
    TARGET_LABEL,
    VENV_PYTHON,
    proxy_build_args,
)
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project
from envbuilder.core.quoting import sh_command
from envbuilder.host import wslexe
from envbuilder.image import repro, wsl
from envbuilder.targets.base import (
    Artifact,
    BuildOptions,
    PullOptions,
    PushOptions,
    RunCommand,
    RunOptions,
    ValidateOptions,
)
from envbuilder.targets.wsl2 import DESCRIPTOR, Wsl2Table

if TYPE_CHECKING:
    from envbuilder.core.compat import HostKind
    from envbuilder.image.engine import Client
    from envbuilder.lock.lockfile import EnvLock

TARGET = DESCRIPTOR.name
PROBE_DIR = "/tmp/envbuilder"
PROBE_PATH = f"{PROBE_DIR}/probe.pyz"
PYLOCK_PATH = f"{PROBE_DIR}/pylock.toml"
#: /tmp is world-writable (1777) in every rootfs, so the probe user can write its report there.
REPORT_PATH = "/tmp/envbuilder-probe-report.json"
#: How long the first-launch (oobe) command may take in a validation container.
FIRST_LAUNCH_TIMEOUT_S = 600
_CHUNK = 1 << 20


def image_tag(env: str, lock_sha256: str) -> str:
    """The local tag of the env's rootfs image: envbuilder-wsl2/<env>:<short wsl2 pylock hash>."""
    return f"envbuilder-wsl2/{env}:{lock_sha256[:12]}"


def imported_tag(env: str, sha256: str) -> str:
    """The tag of a `.wsl` imported into Docker for validation (named by its sha256)."""
    return f"envbuilder-wsl2-import/{env}:{sha256[:16]}"


def wsl_path(project: Project, env: str) -> Path:
    """Where the env's `.wsl` file is written."""
    return project.dist / f"{env}.wsl"


def _require_lock(project: Project, env: EnvSpec) -> EnvLock:
    """The env's lock, verified for the wsl2 target (load_verified_lock): current for
    the spec the env was loaded from, the env's own, its pylock as recorded and well-formed.
    LockError otherwise."""
    from envbuilder.lock.verified import load_verified_lock

    return load_verified_lock(project, env.name, TARGET, env.spec_hash).lock


def _require_wsl2(env: EnvSpec) -> Wsl2Table:
    table = env.table(Wsl2Table)
    if table is None or TARGET not in env.targets:
        raise BuildError(
            f'env {env.name!r} has no wsl2 target; add "wsl2" to '
            f"[env.{env.name}] targets and an [env.{env.name}.wsl2] table"
        )
    return table


# ----------------------------------------------------------------------------- build


def build_args(lock: EnvLock, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Build args of the rootfs image: proxies (Docker's predefined args, never stored in the
    image), SOURCE_DATE_EPOCH from the lock (the rendered Dockerfile declares it: hash-based
    .pyc files, useradd's dates) and the pylock's sha256 for the image label."""
    args = proxy_build_args(dict(os.environ if environ is None else environ))
    args["SOURCE_DATE_EPOCH"] = str(lock.source_date_epoch)
    args[LOCK_SHA_ARG] = lock.targets[TARGET].pylock_sha256
    return args


def build_rootfs_image(
    client: Client,
    project: Project,
    env: EnvSpec,
    lock: EnvLock,
    progress: ProgressFn = no_progress,
    *,
    nocache: bool = False,
) -> tuple[str, bool]:
    """Build the env's rendered WSL Dockerfile (or find it up to date: same tag, same context
    digest). Returns (image id, whether a build ran)."""
    from envbuilder.builders.context import ca_bundle_path
    from envbuilder.builders.rendered_image import RenderedBuild, build_rendered_image

    pylock_sha = lock.targets[TARGET].pylock_sha256
    request = RenderedBuild(
        env.name,
        TARGET,
        DESCRIPTOR.rendered_folder(project, env.name),
        tag=image_tag(env.name, pylock_sha),
        labels={LOCK_LABEL: pylock_sha, ENV_LABEL: env.name, TARGET_LABEL: TARGET},
        build_args=build_args(lock),
        ca_bundle=ca_bundle_path(None, project),
        indexes=env.indexes,
        nocache=nocache,
        deterministic=repro.Deterministic(lock.targets[TARGET].base_image, lock.source_date_epoch),
    )
    return build_rendered_image(client, project, request, progress)


def export_image(
    client: Client,
    image: str,
    dest: Path,
    source_date_epoch: int,
    progress: ProgressFn = no_progress,
    compresslevel: int = wsl.COMPRESSLEVEL,
) -> wsl.WslResult:
    """`docker export` a container of `image` straight through the normalizer into `dest`.
    Progress: ("export", bytes read, image size), then ("compress", bytes, total bytes)."""
    from envbuilder.image import engine as docker_engine

    found = docker_engine.image_info(client, image)
    total = (found.size if found is not None else 0) or None
    with docker_engine.exported_filesystem(client, image, _CHUNK) as chunks:
        source = io.BufferedReader(
            wsl.IterStream(chunks, progress, "export", total), buffer_size=_CHUNK
        )
        return wsl.write_wsl(
            source,
            dest,
            source_date_epoch=source_date_epoch,
            compresslevel=compresslevel,
            progress=progress,
        )


def _install_on_windows(env: EnvSpec, path: Path) -> str | None:
    """On a machine with wsl.exe: install the `.wsl` as the env's distro; the way used."""
    table = env.table(Wsl2Table)
    if os.name != "nt" or table is None:
        return None
    exe = wslexe.WslExe(wslexe.find_wsl_exe())
    location = os.environ.get("ENVBUILDER_WSL_LOCATION") or str(
        Path(os.environ.get("LOCALAPPDATA", str(Path.home()))) / "envbuilder" / "wsl"
    )
    return exe.install(
        str(path),
        table.distro,
        str(Path(location) / table.distro),
        replace=os.environ.get("ENVBUILDER_WSL_REPLACE") == "1",
    )


# ----------------------------------------------------------------------------- probe runs


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
        from envbuilder.image import engine as docker_engine

        code, output, files = docker_engine.run_in_container(
            self.client,
            self.image,
            list(run.argv),
            docker_engine.ContainerRun(user=user, host_kind=self.host_kind),  # type: ignore[arg-type]
            files_in=dict(run.files_in),
            files_out=[run.report],
            progress=progress,
        )
        return code, output, files.get(run.report)

    def describe(self) -> dict[str, Any]:
        from envbuilder.image import engine as docker_engine

        return dict(docker_engine.engine_info(self.client).as_dict())


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

    def command(self, user: str, argv: tuple[str, ...]) -> RunCommand:
        """wsl.exe running `argv` in the distro as `user` (its name: the uid's, after the first
        launch), and the same as a PowerShell line."""
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
    from envbuilder.image import engine as docker_engine

    tag = f"{image}-oobe"
    if docker_engine.image_info(client, tag) is not None:
        return tag
    progress(f"first launch: {command} as root", 0, None)
    code, output = docker_engine.run_and_commit(
        client,
        image,
        list(first_launch_argv(command)),
        tag,
        docker_engine.ContainerRun(
            user="root", network_mode="none", timeout_s=FIRST_LAUNCH_TIMEOUT_S
        ),
    )
    if code != 0:
        raise ValidationError(first_launch_failure(command, code, output))
    return tag


# ----------------------------------------------------------------------------- the target


def _checked_wsl(project: Project, env: EnvSpec) -> tuple[Path, str]:
    """dist/<env>.wsl and its sha256, when it is the one the lock recorded for the last build;
    ValidationError when it is missing or another."""
    path, sha, other = _wsl_and_lock(project, env)
    if other is not None:
        raise ValidationError(other.reason)
    return path, sha


def _wsl_and_lock(project: Project, env: EnvSpec) -> tuple[Path, str, OtherLock | None]:
    """dist/<env>.wsl, its sha256, and (when it is not the one the lock recorded for the last
    build) what it is instead; ValidationError when it is missing."""
    _require_wsl2(env)
    path = wsl_path(project, env.name)
    if not path.is_file():
        raise ValidationError(
            f"{path} does not exist; run `envbuilder build --target wsl2 "
            f"--env {env.name}` (or `envbuilder pull`) first"
        )
    sha = sha256_file(path)
    lock = _require_lock(project, env)
    recorded = lock.artifacts.get(TARGET, {}).get("sha256")
    if recorded and recorded != sha:
        why = f"{path} has sha256 {sha}, but the lock recorded {recorded} for the last build; "
        return path, sha, OtherLock(str(path), sha, recorded, why + "build it again")
    return path, sha, None


def login_argv(command: tuple[str, ...]) -> tuple[str, ...]:
    """`command` run by a login shell, as a WSL login runs it (/etc/profile.d applies): the
    same wrapper the probe runs in (probe_argv)."""
    return ("/bin/sh", "-lc", 'exec "$@"', "sh", *command)


def _workspace(path: Path | None) -> Path | None:
    from envbuilder.builders.docker import workspace_folder

    return workspace_folder(path)


def _host_kind(env: EnvSpec) -> str:
    # A Linux Docker host cannot reach /dev/dxg: the imported distro is checked as a CPU host
    # (rootfs, venv, lock conformance); its GPU checks need Windows (`--expect cpu` there).
    return "cpu"


def _recorded_prediction(lock: EnvLock, env: str) -> repro.Prediction:
    """The rootfs image the lock predicts, which `build --verify` must rebuild."""
    return repro.require_prediction(lock.artifacts, TARGET, env, f"lockfiles/{env}.lock.toml")


def _observed_rootfs(
    client: Client,
    project: Project,
    env: str,
    lock: EnvLock,
    image_id: str,
    expected: repro.Prediction | None,
) -> repro.Prediction:
    """The built rootfs image, checked against `expected` (BuildError naming the first
    difference) when there is one."""
    base = lock.targets[TARGET].base_image
    # The lock's prediction names both digests of an image it predicts: no `docker save`.
    image = repro.observe(client, image_id, base, repro.recorded(lock.artifacts, TARGET))
    if expected is not None:
        repro.check_prediction(
            client, expected, image, env=env, target=TARGET, base=base, workdir=project.cache
        )
    return image


def _pulled_rootfs(
    client: Client, env: str, lock: EnvLock, ref: str, progress: ProgressFn
) -> tuple[str, repro.Prediction]:
    """The pushed rootfs image pulled by digest `ref` (refused unless built from the lock):
    the id the pull returned, and the image observed."""
    from envbuilder.image import registry as imageregistry

    pylock_sha = lock.targets[TARGET].pylock_sha256
    # Tagged as a build would, so `validate`/`pull` can say whether it is the predicted one.
    image_id = imageregistry.pull_locked(
        client, ref, image_tag(env, pylock_sha), pylock_sha, None, progress
    )
    return image_id, repro.observe(
        client,
        image_id,
        lock.targets[TARGET].base_image,
        repro.recorded(lock.artifacts, TARGET),
    )


def _is_recorded_wsl(path: Path, recorded: Mapping[str, str], image_id: str) -> bool:
    """Whether dist/<env>.wsl is the one the lock records as exported from the image whose
    config digest is `image_id`."""
    return (
        path.is_file()
        and recorded.get("image_id") == image_id
        and recorded.get("format") == wsl.FORMAT
        and recorded.get("sha256") == sha256_file(path)
    )


@dataclass(frozen=True)
class _Export:
    """What `_write` exports into dist/<env>.wsl: the rootfs image (observed; `engine_id`: the
    engine's id of it, its config digest or, on a containerd store, its manifest digest), the
    artifact's details so far, and the sha256 the `.wsl` must have (None: any)."""

    client: Client
    image: repro.Prediction
    engine_id: str
    details: Mapping[str, str]
    expected_sha256: str | None = None


def _check_exported(result: wsl.WslResult, export: _Export) -> None:
    expected = export.expected_sha256
    if expected and expected != result.sha256:
        raise BuildError(
            f"{result.path} made from {export.details.get('pulled', export.image.image_id)} has "
            f"sha256 {result.sha256}, but the lock recorded {expected} "
            "for the build; the lock is left as it was"
        )


class Wsl2Builder:
    """The wsl2 target's builder (see the module docstring)."""

    name: ClassVar[str] = TARGET

    def __init__(self, client: Client | None = None) -> None:
        self._client = client

    def _docker(self) -> Client:
        if self._client is None:
            from envbuilder.image import engine as docker_engine

            self._client = docker_engine.connect()
        return self._client

    def build(
        self, project: Project, env: EnvSpec, options: BuildOptions, progress: ProgressFn
    ) -> Artifact:
        """Build, export and normalize into dist/<env>.wsl; record its sha256 in the lock; on
        Windows also install it. Two builds from one lock give the same sha256. Nothing is
        exported again when the image is up to date and the file is the recorded one.
        `options.verify`: rebuild without any cache and fail (BuildError, the lock left as it
        was) unless the rootfs image and the `.wsl` are the ones the lock records."""
        _require_wsl2(env)
        lock = _require_lock(project, env)
        recorded = lock.artifacts.get(TARGET, {})
        expected = _recorded_prediction(lock, env.name) if options.verify else None
        client = self._docker()
        image_id, built = build_rootfs_image(
            client, project, env, lock, progress, nocache=options.no_cache or options.verify
        )
        image = _observed_rootfs(client, project, env.name, lock, image_id, expected)
        path = wsl_path(project, env.name)
        note = repro.prediction_note(repro.recorded(lock.artifacts, TARGET), image)
        if not built and _is_recorded_wsl(path, recorded, image.image_id):
            progress(f"{env.name}/wsl2: {path.name} is up to date", 1, 1)
            return Artifact(
                TARGET,
                env.name,
                str(path),
                recorded["sha256"],
                {"changed": "no", "image_id": image_id, "prediction": note},
            )
        export = _Export(
            client,
            image,
            image_id,
            {"changed": "yes", "image_id": image_id, "prediction": note},
            expected_sha256=recorded.get("sha256") if options.verify else None,
        )
        return self._write(project, env, lock, export, progress)

    def _write(
        self, project: Project, env: EnvSpec, lock: EnvLock, export: _Export, progress: ProgressFn
    ) -> Artifact:
        from envbuilder.lock.record import record_artifact

        image_id = export.engine_id
        path = wsl_path(project, env.name)
        real_folders_to(project.root, path)
        progress(f"{env.name}/wsl2: exporting {image_id[:19]} to {path}", 0, None)
        result = export_image(export.client, image_id, path, lock.source_date_epoch, progress)
        _check_exported(result, export)
        record_artifact(
            project,
            env.name,
            TARGET,
            sha256=result.sha256,
            format=wsl.FORMAT,
            **export.image.artifacts(),
        )
        details = {
            **export.details,
            "size": str(result.size),
            "entries": str(result.stats.entries),
            "dropped": str(len(result.stats.dropped)),
        }
        way = _install_on_windows(env, result.path)
        table = env.table(Wsl2Table)
        if way and table is not None:
            details["installed"] = f"{table.distro} ({way})"
        return Artifact(TARGET, env.name, str(result.path), result.sha256, details)

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        """Run the probe inside the built `.wsl` (see the module docstring); write and return
        reports/<env>.wsl2.json. ValidationError when there is no `.wsl`, it is not the one the
        lock recorded, or the probe wrote no report."""
        path, sha, other = _wsl_and_lock(project, env)
        refuse_other_lock(other, options)
        launch = first_launch(path)
        engine = self._engine(env, path, sha, progress)
        if launch.command:
            engine.first_launch(launch.command, progress)
        labels = {"env": env.name, "target": TARGET, "engine": engine.name, "wsl_sha256": sha}
        run = make_probe_run(project, env, options, labels)
        code, output, report = engine.run(run, launch.user, progress)
        if report is None:
            tail = output_tail(output, 30)
            raise ValidationError(
                f"the probe wrote no report in the {env.name} distro "
                f"(exit {code}); its output ended with:\n{tail}"
            )
        dest = project.report(env.name, TARGET)
        real_folders_to(project.root, dest)
        atomic_write_bytes(dest, with_other_lock(with_engine(report, engine.describe()), other))
        return dest

    def command(
        self, project: Project, env: EnvSpec, options: RunOptions, progress: ProgressFn
    ) -> RunCommand:
        """`options.command` (default: bash) in exactly the `.wsl` `validate` checks, as the
        user WSL starts as, through a login shell (/etc/profile.d sets the env's variables):
        on Windows in the installed distro (wsl.exe --exec), on Linux in a container of the
        imported `.wsl` after its first launch. Refuses (ValidationError) a `.wsl` that is
        missing or not the one the lock records."""
        path, sha = _checked_wsl(project, env)
        launch = first_launch(path)
        engine = self._engine(env, path, sha, progress)
        if launch.command:
            engine.first_launch(launch.command, progress)
        inner = login_argv(options.command or ("bash",))
        if isinstance(engine, WslEngine):
            return engine.command(launch.user, inner)
        assert isinstance(engine, DockerEngine)  # _engine makes one of the two
        from envbuilder.image import runflags

        argv = runflags.docker_run_argv(
            engine.image,
            inner,
            user=launch.user,
            flags=runflags.host_run_flags(cast("HostKind", engine.host_kind)),
            tty=options.tty,
            workspace=_workspace(options.workspace),
            labels=((ENV_LABEL, env.name), ("org.envbuilder.role", "run")),
        )
        return RunCommand(tuple(argv), sh_command(argv))

    def image_status(self, project: Project, env: EnvSpec) -> list[tuple[bool, str]]:
        """(ok, line): whether dist/<env>.wsl and the engine's rootfs image are the ones the
        lock records (the `.wsl`'s sha256; the image's id, its prediction)."""
        from envbuilder.image import engine as docker_engine

        lock = _require_lock(project, env)
        recorded = lock.artifacts.get(TARGET, {})
        lines: list[tuple[bool, str]] = []
        path = wsl_path(project, env.name)
        if path.is_file():
            sha = sha256_file(path)
            want = recorded.get("sha256")
            same = want == sha
            lines.append(
                (
                    same or not want,
                    f"{env.name}/{TARGET}: {path.name} sha256 {sha} "
                    + (
                        "is the one the lock records"
                        if same
                        else f"is NOT the one the lock records ({want})"
                        if want
                        else "(the lock records none)"
                    ),
                )
            )
        tag = image_tag(env.name, lock.targets[TARGET].pylock_sha256)
        client = self._docker()
        if docker_engine.existing_image(client, tag) is not None:
            expected = repro.recorded(lock.artifacts, TARGET)
            what = f"rootfs image {tag}"
            lines.append(repro.image_line(client, env.name, TARGET, tag, what, expected))
        return lines

    def _engine(self, env: EnvSpec, path: Path, sha: str, progress: ProgressFn) -> Engine:
        table = env.table(Wsl2Table)
        if os.name == "nt" and table is not None:
            return WslEngine(wslexe.WslExe(wslexe.find_wsl_exe()), table.distro)
        client = self._docker()
        return DockerEngine(
            client, import_wsl(client, path, imported_tag(env.name, sha), progress), _host_kind(env)
        )

    def push(
        self,
        project: Project,
        env: EnvSpec,
        options: PushOptions,
        progress: ProgressFn = no_progress,
    ) -> str:
        """Push the env's rootfs image to `registry`/<env>-wsl2:<short lock hash>; record and
        return its repository digest (artifacts.wsl2.repo_digest)."""
        from envbuilder.image import engine as docker_engine
        from envbuilder.image import registry as imageregistry
        from envbuilder.lock.record import record_artifact

        _require_wsl2(env)
        lock = _require_lock(project, env)
        pylock_sha = lock.targets[TARGET].pylock_sha256
        _image_id, digest = imageregistry.push_locked(
            self._docker(),
            image_tag(env.name, pylock_sha),
            docker_engine.registry_repository(options.registry, f"{env.name}-wsl2"),
            pylock_sha,
            f"envbuilder build --target wsl2 --env {env.name}",
            progress,
            project.cache,
        )
        record_artifact(project, env.name, TARGET, repo_digest=digest)
        return digest

    def pull(
        self,
        project: Project,
        env: EnvSpec,
        options: PullOptions,
        progress: ProgressFn = no_progress,
    ) -> str:
        """Pull the pushed rootfs image by the digest the lock records (refused unless it was
        built from the current lock, as docker's pull does) and write dist/<env>.wsl from it
        without building; return "<path> sha256:<hex>". When the lock recorded the sha256 of a
        build, the pulled one must equal it (BuildError otherwise; the file is written all the
        same, so it can be inspected)."""
        from envbuilder.image import registry as imageregistry

        _require_wsl2(env)
        lock = _require_lock(project, env)
        recorded = dict(lock.artifacts.get(TARGET, {}))
        ref = imageregistry.pushed_reference(
            recorded,
            str(project.env_lock(env.name)),
            f"envbuilder push --target wsl2 --env {env.name} --registry HOST/PATH",
        )
        client = self._docker()
        image_id, image = _pulled_rootfs(client, env.name, lock, ref, progress)
        export = _Export(
            client,
            image,
            image_id,
            {"changed": "yes", "image_id": image_id, "pulled": ref},
            expected_sha256=recorded.get("sha256"),
        )
        artifact = self._write(project, env, lock, export, progress)
        return f"{artifact.reference} sha256:{artifact.digest}"


def import_wsl(client: Client, path: Path, tag: str, progress: ProgressFn = no_progress) -> str:
    """`docker import` the `.wsl` file at `path` as `tag` (streamed from the file; reused when
    that tag exists, since it is named by the file's sha256). Returns the tag."""
    from envbuilder.image import engine as docker_engine

    if docker_engine.image_info(client, tag) is not None:
        return tag
    repository, _, name_tag = tag.rpartition(":")
    progress(f"docker import {path.name}", 0, None)
    docker_engine.import_image_file(client, path, repository, name_tag)
    _remove_older_imports(client, repository, tag)
    return tag


def _remove_older_imports(client: Client, repository: str, keep: str) -> None:
    """Imports of earlier `.wsl` files of the env (a GB each) go once a newer one is in."""
    from envbuilder.image import engine as docker_engine

    for image in docker_engine.list_images(client, repository):
        if keep not in image.repo_tags:
            for old in image.repo_tags:
                with contextlib.suppress(EngineError):
                    docker_engine.remove_image(client, old)

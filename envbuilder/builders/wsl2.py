"""The `wsl2` target's builder: a reproducible `.wsl` distro, built with Docker, validated by the
probe.

build     the rendered `wsl/<env>/Dockerfile` is built with Docker (build-context contract), a
          container of the image is exported, and the stream goes through `envbuilder.image.wsl`
          into `dist/<env>.wsl` (sha256 recorded in the env lock's artifacts). On Windows, where
          wsl.exe exists, the file is then installed as the env's distro (`envbuilder.host.wslexe`).
validate  runs the probe inside exactly that file. Linux: the `.wsl` is `docker import`ed and
          the probe runs in a container of it; Windows: it runs in the installed distro with
          `wsl --exec`. The two engines, the first launch and the probe run are
          envbuilder.builders.wsl2_run; `run`/`shell` go through the same engines.
push      pushes the rootfs image (the same registry code as the docker target).
          The rootfs image is the one envbuilder writes from the engine's build
          (envbuilder.image.repro): its id depends only on the lock and the base image's digest; the
          lock records it with the `.wsl`'s sha256, and `build --verify` checks both.
pull      pulls that image by digest and turns it into the `.wsl` without building; the sha256
          must equal the one the lock recorded for the build.

Installing on Windows (build and pull) takes typed InstallOptions (capability `install`):
`replace` (re-install an existing distro) and `location` (where distros' disks go; default
%LOCALAPPDATA%\\envbuilder\\wsl\\<distro>). The CLI fills them from ENVBUILDER_WSL_REPLACE=1
and ENVBUILDER_WSL_LOCATION (docs/wsl2.md).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from envbuilder.builders.proberun import (
    OtherLock,
    refuse_other_lock,
    with_engine,
    with_other_lock,
)
from envbuilder.builders.wsl2_run import (
    DockerEngine,
    Engine,
    WslEngine,
    first_launch,
    login_argv,
    make_probe_run,
)
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import BuildError, EngineError, ValidationError, output_tail
from envbuilder.core.fsutil import atomic_write_bytes, sha256_file
from envbuilder.core.imagedefs import (
    ENV_LABEL,
    LOCK_LABEL,
    LOCK_SHA_ARG,
    TARGET_LABEL,
    proxy_build_args,
)
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.core.project import Project
from envbuilder.host import wslexe
from envbuilder.image import repro, wsl
from envbuilder.targets.base import (
    Artifact,
    BuildOptions,
    InstallOptions,
    PullOptions,
    PushOptions,
    RunCommand,
    RunOptions,
    ValidateOptions,
)
from envbuilder.targets.wsl2 import DESCRIPTOR, Wsl2Table

if TYPE_CHECKING:
    from envbuilder.image.engine import Client
    from envbuilder.lock.lockfile import EnvLock

TARGET = DESCRIPTOR.name
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
    from envbuilder.image import engine

    found = engine.image_info(client, image)
    total = (found.size if found is not None else 0) or None
    with engine.exported_filesystem(client, image, _CHUNK) as chunks:
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


def _install_on_windows(env: EnvSpec, path: Path, options: InstallOptions) -> str | None:
    """On a machine with wsl.exe: install the `.wsl` as the env's distro (its disk in
    `options.location`/<distro>, by default Windows' per-user app data); the way used."""
    table = env.table(Wsl2Table)
    if os.name != "nt" or table is None:
        return None
    exe = wslexe.WslExe(wslexe.find_wsl_exe())
    location = options.location or (
        Path(os.environ.get("LOCALAPPDATA", str(Path.home()))) / "envbuilder" / "wsl"
    )
    return exe.install(
        str(path), table.distro, str(location / table.distro), replace=options.replace
    )


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
    from envbuilder.image import transfer

    pylock_sha = lock.targets[TARGET].pylock_sha256
    # Tagged as a build would, so `validate`/`pull` can say whether it is the predicted one.
    image_id = transfer.pull_locked(
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
    artifact's details so far, the sha256 the `.wsl` must have (None: any), and how it is
    installed on Windows."""

    client: Client
    image: repro.Prediction
    engine_id: str
    details: Mapping[str, str]
    expected_sha256: str | None = None
    install: InstallOptions = field(default_factory=InstallOptions)


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
            from envbuilder.image import engine

            self._client = engine.connect()
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
            install=options.install,
        )
        return self._write(project, env, lock, export, progress)

    def dpkg_status(self, artifact: Artifact) -> bytes | None:
        """The dpkg status of the rootfs image the `.wsl` was exported from."""
        from envbuilder.builders.rendered_image import image_dpkg_status

        return image_dpkg_status(self._docker(), artifact.details.get("image_id"))

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
        way = _install_on_windows(env, result.path, export.install)
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
        runner = self._engine(env, path, sha, progress)
        if launch.command:
            runner.first_launch(launch.command, progress)
        labels = {"env": env.name, "target": TARGET, "engine": runner.name, "wsl_sha256": sha}
        run = make_probe_run(project, env, options, labels)
        code, output, report = runner.run(run, launch.user, progress)
        if report is None:
            tail = output_tail(output, 30)
            raise ValidationError(
                f"the probe wrote no report in the {env.name} distro "
                f"(exit {code}); its output ended with:\n{tail}"
            )
        dest = project.report(env.name, TARGET)
        real_folders_to(project.root, dest)
        atomic_write_bytes(dest, with_other_lock(with_engine(report, runner.describe()), other))
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
        runner = self._engine(env, path, sha, progress)
        if launch.command:
            runner.first_launch(launch.command, progress)
        inner = login_argv(options.command or ("bash",))
        return runner.command(launch.user, inner, options, env.name)

    def image_status(self, project: Project, env: EnvSpec) -> list[tuple[bool, str]]:
        """(ok, line): whether dist/<env>.wsl and the engine's rootfs image are the ones the
        lock records (the `.wsl`'s sha256; the image's id, its prediction)."""
        from envbuilder.image import engine

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
        if engine.existing_image(client, tag) is not None:
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
        from envbuilder.image import engine, transfer
        from envbuilder.lock.record import record_artifact

        _require_wsl2(env)
        lock = _require_lock(project, env)
        pylock_sha = lock.targets[TARGET].pylock_sha256
        _image_id, digest = transfer.push_locked(
            self._docker(),
            image_tag(env.name, pylock_sha),
            engine.registry_repository(options.registry, f"{env.name}-wsl2"),
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
        from envbuilder.image import transfer

        _require_wsl2(env)
        lock = _require_lock(project, env)
        recorded = dict(lock.artifacts.get(TARGET, {}))
        ref = transfer.pushed_reference(
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
            install=options.install,
        )
        artifact = self._write(project, env, lock, export, progress)
        return f"{artifact.reference} sha256:{artifact.digest}"


def import_wsl(client: Client, path: Path, tag: str, progress: ProgressFn = no_progress) -> str:
    """`docker import` the `.wsl` file at `path` as `tag` (streamed from the file; reused when
    that tag exists, since it is named by the file's sha256). Returns the tag."""
    from envbuilder.image import engine

    if engine.image_info(client, tag) is not None:
        return tag
    repository, _, name_tag = tag.rpartition(":")
    progress(f"docker import {path.name}", 0, None)
    engine.import_image_file(client, path, repository, name_tag)
    _remove_older_imports(client, repository, tag)
    return tag


def _remove_older_imports(client: Client, repository: str, keep: str) -> None:
    """Imports of earlier `.wsl` files of the env (a GB each) go once a newer one is in."""
    from envbuilder.image import engine

    for image in engine.list_images(client, repository):
        if keep not in image.repo_tags:
            for old in image.repo_tags:
                with contextlib.suppress(EngineError):
                    engine.remove_image(client, old)

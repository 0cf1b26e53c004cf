"""The `docker` target's builder: build the rendered Dockerfile into an image, validate the probe
inside it, push it to a registry and pull it back by digest.

Names: the image is tagged `envbuilder/<env>:<first 12 hex of the docker pylock's sha256>` and
labelled `org.envbuilder.lock-sha256` (that pylock's sha256) and `org.envbuilder.context-sha256`
(everything that decides its content; an image whose label matches is not rebuilt). The lock's
`[artifacts.docker]` records `image_id`, `tag` and, after a push, `repo_digest`.

Reproducible: the tagged image is the one envbuilder writes from the engine's build
(envbuilder.image.repro): its id depends only on the lock and the base image's digest, and the lock
records it (`image_id`, `layers`, `repro_format`) as the prediction `build --verify` checks.

Corporate networks: HTTP(S)_PROXY / NO_PROXY (and lower-case) from the environment are passed as
Docker's predefined build args, which `docker history` never shows; an extra CA bundle (the
spec's `docker.ca_bundle` or $ENVBUILDER_CA_BUNDLE) goes into the build stage only.
"""

from __future__ import annotations

import os
from pathlib import Path

from envbuilder.builders.context import ca_bundle_path
from envbuilder.builders.proberun import (
    OtherLock,
    probe_options,
    probe_zipapp_bytes,
    refuse_other_lock,
    with_engine,
    with_other_lock,
)
from envbuilder.builders.rendered_image import (
    RenderedBuild,
    build_rendered_image,
    image_dpkg_status,
)
from envbuilder.core.compat import HostKind
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import (
    BuildError,
    RegistryError,
    UsageError,
    ValidationError,
    output_tail,
)
from envbuilder.core.fsutil import atomic_write_bytes
from envbuilder.core.imagedefs import (
    ENV_LABEL,
    LOCK_LABEL,
    LOCK_SHA_ARG,
    ROLE_LABEL,
    RUN_USER,
    VENV_PYTHON,
    proxy_build_args,
)
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.core.quoting import sh_command
from envbuilder.image import engine, engine_values, repro, runflags, transfer
from envbuilder.lock import basesource, lockfile
from envbuilder.lock.record import record_artifact
from envbuilder.lock.verified import load_verified_lock
from envbuilder.targets.base import (
    Artifact,
    BuildOptions,
    PullOptions,
    PushOptions,
    RunCommand,
    RunOptions,
    ValidateOptions,
)
from envbuilder.targets.docker import DESCRIPTOR, DockerTable

TARGET = DESCRIPTOR.name
#: Where the probe runs inside the container.
PROBE_DIR = "/tmp/envbuilder-probe"
_PROBE_REPORT = f"{PROBE_DIR}/report.json"
HOST_KIND_ENV = runflags.HOST_KIND_ENV


def image_repository(env: str) -> str:
    return f"envbuilder/{env}"


def image_tag(env: str, lock_sha256: str) -> str:
    """`envbuilder/<env>:<short lock hash>`."""
    return f"{image_repository(env)}:{lock_sha256[:12]}"


def detect_host_kind(root: Path = Path("/")) -> HostKind:
    """What accelerator this host can hand to a container
    (envbuilder.image.runflags.detect_host_kind): $ENVBUILDER_HOST_KIND if set, else what /dev
    holds."""
    return runflags.detect_host_kind(root)


def _docker_lock(project: Project, env: EnvSpec) -> tuple[lockfile.EnvLock, lockfile.TargetLock]:
    """The env's lock and its docker entry, verified (load_verified_lock): current for
    the spec the env was loaded from, the env's own, its pylock as recorded and well-formed.
    LockError otherwise."""
    verified = load_verified_lock(project, env.name, TARGET, env.spec_hash)
    return verified.lock, verified.pylock.entry


def _ensure_base(
    client: engine.Client,
    env: str,
    target: lockfile.TargetLock,
    repin: str,
    progress: ProgressFn,
) -> None:
    """Pull the locked base image (by digest) unless the engine has it already. A digest the
    registry does not serve is a BaseNotServedError saying whether the pin came from another
    registry or was lost or changed (envbuilder.lock.basesource); another failure is one line naming
    the image and `repin`, the command that pins what the tag serves now."""
    base = target.base_image
    if base is None:
        return
    if engine.existing_image(client, base) is not None:
        return
    progress(f"pulling the base image {base}", 0, None)
    try:
        engine.pull_image(client, base, progress)
    except RegistryError as exc:
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        if "@sha256:" in base:
            # Not served here when a registry said so, or when this engine's registry serves
            # the tag as another image (an engine falls back from its mirror to Docker Hub, so
            # the error it reports may be Hub's, unreachable or not).
            diagnosis = basesource.diagnose(client, base, target.base_source)
            said_so = any(w in reason.lower() for w in ("manifest unknown", "not found"))
            if said_so or diagnosis.served not in (None, base.split("@", 1)[1]):
                raise basesource.BaseNotServedError(
                    basesource.not_served_message(env, diagnosis), diagnosis
                ) from None
        raise BuildError(
            f"the base image {base} (from the lock) cannot be pulled: {reason}; log in to its "
            "registry or make the image available to the engine (docker load/pull), or, if "
            f"the registry no longer has that digest, re-pin with `{repin}`"
        ) from None


def _recorded_prediction(lock: lockfile.EnvLock, env: str) -> repro.Prediction:
    """The image the lock predicts, which `build --verify` must rebuild."""
    return repro.require_prediction(lock.artifacts, TARGET, env, f"lockfiles/{env}.lock.toml")


def _repin_command(env: str) -> str:
    """What pins the base that the tag serves now, when the locked digest cannot be pulled."""
    return f"envbuilder lock --env {env} --refresh-base && envbuilder render --env {env}"


def _rendered_build(
    project: Project,
    env: EnvSpec,
    lock: lockfile.EnvLock,
    target: lockfile.TargetLock,
    *,
    nocache: bool,
) -> RenderedBuild:
    """The build of dockerfiles/<env>/: labelled with the pylock's sha256, proxies passed as
    build args, the spec's (or $ENVBUILDER_CA_BUNDLE's) CA bundle, written reproducibly."""
    spec_ca = getattr(env.table(DockerTable), "ca_bundle", None)
    return RenderedBuild(
        env.name,
        TARGET,
        DESCRIPTOR.rendered_folder(project, env.name),
        tag=image_tag(env.name, target.pylock_sha256),
        labels={LOCK_LABEL: target.pylock_sha256, ENV_LABEL: env.name},
        build_args={**proxy_build_args(os.environ), LOCK_SHA_ARG: target.pylock_sha256},
        ca_bundle=ca_bundle_path(spec_ca if isinstance(spec_ca, str) else None, project),
        indexes=env.indexes,
        nocache=nocache,
        deterministic=repro.Deterministic(target.base_image, lock.source_date_epoch),
    )


class DockerBuilder:
    """Images built with the docker SDK against the engine DOCKER_HOST names."""

    name = TARGET

    def local_image(self, env: str, pylock_sha256: str) -> str | None:
        """The id of this engine's image of `env` built from that pylock (its tag and lock
        label), or None."""
        image = engine.existing_image(engine.connect(), image_tag(env, pylock_sha256))
        if image is None or (image.labels or {}).get(LOCK_LABEL) != pylock_sha256:
            return None
        return str(image.id)

    def dpkg_status(self, artifact: Artifact) -> bytes | None:
        """The built image's /var/lib/dpkg/status (image_dpkg_status)."""
        return image_dpkg_status(engine.connect(), artifact.digest or artifact.reference)

    # --- build ---------------------------------------------------------------------------

    def build(
        self, project: Project, env: EnvSpec, options: BuildOptions, progress: ProgressFn
    ) -> Artifact:
        """Build (or find up to date) the env's image; record its id in the lock; return it.

        details["changed"] is "no" when an image built from the same context already had the
        tag (nothing was built). Raises LockError/RenderError-style BuildError before building
        when inputs are missing, BuildError with the failing step's output when a step fails.
        `options.verify`: rebuild without any cache and fail (BuildError naming the first
        differing layer and file, the lock left as it was) unless the image is the one the lock
        records.
        """
        lock, target = _docker_lock(project, env)
        expected = _recorded_prediction(lock, env.name) if options.verify else None
        tag = image_tag(env.name, target.pylock_sha256)
        client = engine.connect()
        if target.base_image:
            # Before fetching wheels (gigabytes for ROCm): an unreachable base fails fast.
            _ensure_base(client, env.name, target, _repin_command(env.name), progress)
        request = _rendered_build(
            project, env, lock, target, nocache=options.no_cache or options.verify
        )
        image_id, built = build_rendered_image(client, project, request, progress)
        # The lock's prediction names both digests of an image it predicts: no `docker save`.
        recorded = repro.recorded(lock.artifacts, TARGET)
        actual = repro.observe(client, image_id, target.base_image, recorded)
        if expected is not None:
            repro.check_prediction(
                client,
                expected,
                actual,
                env=env.name,
                target=TARGET,
                base=target.base_image,
                workdir=project.cache,
            )
        note = repro.prediction_note(recorded, actual)
        return self._record(project, env.name, tag, actual, changed=built, note=note)

    @staticmethod
    def _record(
        project: Project, env: str, tag: str, image: repro.Prediction, changed: bool, note: str
    ) -> Artifact:
        record_artifact(project, env, TARGET, tag=tag, **image.artifacts())
        return Artifact(
            TARGET,
            env,
            tag,
            image.image_id,
            {"changed": "yes" if changed else "no", "tag": tag, "prediction": note},
        )

    # --- validate ------------------------------------------------------------------------

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        """Run the probe as uid 1000 in a fresh container of the env's image, with this host's
        device flags; write reports/<env>.docker.json and return its path. The container is
        removed in every case. Raises ValidationError when the probe wrote no report."""
        _lock, target = _docker_lock(project, env)
        tag = image_tag(env.name, target.pylock_sha256)
        client = engine.connect()
        image = _require_image(client, env.name, tag)
        other = refuse_other_lock(_other_lock(image, tag, target.pylock_sha256), options)
        host_kind = detect_host_kind()
        pylock = (project.lockfiles / target.pylock).read_bytes()
        files_in = {
            f"{PROBE_DIR}/probe.pyz": probe_zipapp_bytes(),
            f"{PROBE_DIR}/pylock.toml": pylock,
        }
        report_in = _PROBE_REPORT
        progress(f"{env.name}/docker: probe in {tag} ({host_kind} host)", 0, None)
        code, output, files = engine.run_in_container(
            client,
            tag,
            _probe_command(env, options),
            engine.ContainerRun(
                user=RUN_USER,
                host_kind=host_kind,
                labels={ENV_LABEL: env.name, ROLE_LABEL: "validate"},
                timeout_s=options.timeout_s,
            ),
            files_in=files_in,
            files_out=[report_in],
            progress=progress,
        )
        if report_in not in files:
            tail = output_tail(output, 20)
            raise ValidationError(
                f"the probe in {tag} exited with {code} and wrote no report:\n{tail}"
            )
        report = project.report(env.name, TARGET)
        real_folders_to(project.root, report)
        engine_info = engine.engine_info(client).as_dict()
        atomic_write_bytes(
            report, with_other_lock(with_engine(files[report_in], engine_info), other)
        )
        return report

    # --- run -----------------------------------------------------------------------------

    def command(
        self, project: Project, env: EnvSpec, options: RunOptions, progress: ProgressFn
    ) -> RunCommand:
        """`docker run` of `options.command` (default: bash) in a fresh container of the env's
        image, as uid 1000, with this host's device flags: what `validate` gives the probe
        (envbuilder.image.runflags). Refuses (ValidationError) a missing image or one whose lock
        label is not the current docker pylock's sha256."""
        _lock, target = _docker_lock(project, env)
        tag = image_tag(env.name, target.pylock_sha256)
        image = _require_image(engine.connect(), env.name, tag)
        if other := _other_lock(image, tag, target.pylock_sha256):
            raise ValidationError(f"refusing {other.artifact}: {other.reason}")
        host_kind = detect_host_kind()
        progress(f"{env.name}/docker: {tag} ({host_kind} host)", 0, None)
        argv = runflags.docker_run_argv(
            tag,
            options.command or ("bash",),
            user=RUN_USER,
            flags=runflags.host_run_flags(host_kind),
            tty=options.tty,
            workspace=workspace_folder(options.workspace),
            labels=((ENV_LABEL, env.name), (ROLE_LABEL, "run")),
        )
        return RunCommand(tuple(argv), sh_command(argv), requires=runflags.DOCKER_CLI_REQUIRED)

    def image_status(self, project: Project, env: EnvSpec) -> list[tuple[bool, str]]:
        """(ok, line): whether the engine's image of the env is the one the lock predicts."""
        lock, target = _docker_lock(project, env)
        tag = image_tag(env.name, target.pylock_sha256)
        expected = repro.recorded(lock.artifacts, TARGET)
        return [repro.image_line(engine.connect(), env.name, TARGET, tag, f"image {tag}", expected)]

    # --- push / pull ---------------------------------------------------------------------

    def push(
        self, project: Project, env: EnvSpec, options: PushOptions, progress: ProgressFn
    ) -> str:
        """Push the env's image to `registry`/<env>:<short lock hash>; record and return the
        repository digest ("HOST/REPO/<env>@sha256:...")."""
        _lock, target = _docker_lock(project, env)
        tag = image_tag(env.name, target.pylock_sha256)
        image_id, digest_ref = transfer.push_locked(
            engine.connect(),
            tag,
            engine.registry_repository(options.registry, env.name),
            target.pylock_sha256,
            f"envbuilder build --target docker --env {env.name}",
            progress,
            project.cache,
        )
        record_artifact(
            project, env.name, TARGET, image_id=image_id, tag=tag, repo_digest=digest_ref
        )
        self._attach_sbom(project, env.name, digest_ref, progress)
        return digest_ref

    @staticmethod
    def _attach_sbom(project: Project, env: str, digest_ref: str, progress: ProgressFn) -> None:
        """Push the SBOM of the image just pushed (envbuilder.lock.sbom, the bytes `build` wrote:
        the image id the lock now records, the deb arches of its dpkg status) as an OCI artifact
        whose subject is that image (envbuilder.image.registry_api), and record it as
        `[artifacts.docker] sbom`. The image is pushed and recorded already when this fails."""
        from envbuilder.image import registry_api
        from envbuilder.lock import sbom

        lock = lockfile.load_env_lock(project, env)  # push verified it just now
        assert lock is not None
        image_id = lock.artifacts.get(TARGET, {}).get("image_id")
        tag = image_tag(env, lock.targets[TARGET].pylock_sha256)
        artifact = Artifact(TARGET, env, tag, image_id)
        client = engine.connect()
        data = sbom.sbom_bytes(project, env, TARGET, artifact, image_dpkg_status(client, image_id))
        try:
            sbom_ref = registry_api.attach_sbom(client, digest_ref, data)
        except RegistryError as exc:
            raise RegistryError(
                f"pushed {digest_ref} (recorded in the lock), but its SBOM could not be "
                f"attached: {exc}"
            ) from None
        record_artifact(project, env, TARGET, sbom=sbom_ref)
        progress(f"{env}/docker: SBOM attached as {sbom_ref}", 0, None)

    def pull(
        self, project: Project, env: EnvSpec, options: PullOptions, progress: ProgressFn
    ) -> str:
        """Pull the image the lock records (`repo_digest`) by digest, check it was built from the
        current lock (and is the recorded image), tag it envbuilder/<env>:<short hash>; return
        the image id. A mismatch raises RegistryError and tags nothing."""
        lock, target = _docker_lock(project, env)
        recorded = dict(lock.artifacts.get(TARGET, {}))
        ref = transfer.pushed_reference(
            recorded,
            str(project.env_lock(env.name)),
            f"envbuilder push --env {env.name} --registry HOST/PATH",
        )
        return transfer.pull_locked(
            engine.connect(),
            ref,
            image_tag(env.name, target.pylock_sha256),
            target.pylock_sha256,
            repro.recorded(lock.artifacts, TARGET),
            progress,
        )


def _probe_command(env: EnvSpec, options: ValidateOptions) -> list[str]:
    """The probe run by the image's venv, on the pylock copied in, writing _PROBE_REPORT."""
    return [
        VENV_PYTHON,
        f"{PROBE_DIR}/probe.pyz",
        *probe_arguments(env, options),
        "--lock",
        f"{PROBE_DIR}/pylock.toml",
        "--json",
        _PROBE_REPORT,
    ]


def probe_arguments(env: EnvSpec, options: ValidateOptions) -> list[str]:
    """The probe's command-line options for `options` (expect defaults to the accelerator)."""
    return probe_options(env, options, {"env": env.name, "target": TARGET})


def _require_image(client: engine.Client, env: str, tag: str) -> engine_values.ImageInfo:
    """The engine's image `tag`; ValidationError saying how to get it when there is none."""
    image = engine.existing_image(client, tag)
    if image is None:
        raise ValidationError(
            f"no image {tag} on the Docker engine; build it (`envbuilder build --target "
            f"docker --env {env}`) or pull it (`envbuilder pull --env {env}`)"
        )
    return image


def workspace_folder(path: Path | None) -> Path | None:
    """`run --workspace DIR` as an absolute path `docker run --volume` can take (UsageError for
    one that is not a folder or holds a colon, which --volume reads as a separator)."""
    if path is None:
        return None
    folder = Path(os.path.abspath(path))  # noqa: PTH100  # links stay as the user wrote them
    if not folder.is_dir():
        raise UsageError(f"--workspace {path}: not a folder")
    if ":" in str(folder) or "," in str(folder):
        raise UsageError(
            f"--workspace {folder}: a path with ':' or ',' cannot be mounted with "
            "`docker run --volume`; use a folder without them"
        )
    return folder


def _other_lock(image: engine_values.ImageInfo, tag: str, pylock_sha256: str) -> OtherLock | None:
    """None when the image's lock label is the pylock's sha256 (registry.lock_mismatch); else
    what it names. `run` refuses such an image, `validate` unless told otherwise."""
    problem = transfer.lock_mismatch(image, pylock_sha256)
    if problem is None:
        return None
    return OtherLock(f"the image {tag}", image.labels.get(LOCK_LABEL), pylock_sha256, problem)

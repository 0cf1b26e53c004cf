"""The `docker` target: an OCI image built from `dockerfiles/<env>/Dockerfile` (a multi-stage
build: the locked venv, a uid-1000 user, the env's variables). Its builder is
`envbuilder.builders.docker`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from envbuilder.core import grammar, quoting
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import RenderError
from envbuilder.core.imagedefs import UID, VENV
from envbuilder.core.model import EnvSpec, TargetTable
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import (
    GPU_GROUPS,
    AmdgpuInstall,
    AptInstall,
    CopyFromStage,
    CreateUser,
    LinkRocmSdkRoot,
    Plan,
    PlanInputs,
    RunAsUser,
    SetEnv,
    Stage,
    Step,
    build_stage,
    from_image,
    labels,
    python_packages,
)
from envbuilder.core.records import key
from envbuilder.targets import registry
from envbuilder.targets.base import (
    PIP_SDK_ROCM_LINK,
    UBUNTU_CODENAMES,
    Capabilities,
    CheckContext,
    Schema,
    TableContext,
    TargetDescriptor,
    check_base_python,
    image_variables,
    plain_ubuntu_release,
    table_keys,
)

NAME = "docker"


@dataclass(frozen=True)
class DockerTable(TargetTable):
    """[env.NAME.docker]: each key declared once (its schema and default follow from it)."""

    base: str = key(
        "the base image as written (a tag; the lock pins its digest); a ROCm env's defaults to "
        "its release's dev image"
    )
    user: str = key("the user created with uid 1000 in the image", default="envbuilder")
    python: str = key("the interpreter in the base image that creates the venv", default="python3")


KEYS: Schema = table_keys(DockerTable)


def default_rocm_image(rocm: str, python: str | None = None) -> str | None:
    """The base image of a ROCm env. amdgpu-install releases: the release's ROCm dev image
    (Ubuntu 24.04 when it exists, else 22.04). pip-SDK releases: a plain Ubuntu image, since
    the locked wheels hold the whole ROCm user space (rocm-2026.md section 2): the release's
    Ubuntu whose python3 is the env's Python (envbuilder/data/images.toml), else 24.04."""
    compat = load_compat()
    release = compat.rocm(rocm)
    if release is None:
        return None
    if release.install_model == "pip-sdk":
        for ubuntu in release.ubuntu:
            known = compat.base_image(f"ubuntu:{ubuntu}")
            if known is not None and known.python == python:
                return f"ubuntu:{ubuntu}"
        return "ubuntu:24.04"
    images = release.docker_images
    return images.get("24.04") or images.get("22.04")


def parse(ctx: TableContext) -> DockerTable | None:
    """The table with its defaults (a ROCm env's base defaults to its release's dev image)."""
    t = ctx.values(DockerTable)
    base = t.get("base")
    if base is None and ctx.rocm is not None:
        base = default_rocm_image(ctx.rocm, ctx.python)
    user, python = t["user"], t["python"]
    ctx.report("user", grammar.user_problem(user))
    ctx.report("python", grammar.interpreter_problem(python))
    if base is None:
        ctx.report(
            "base", 'missing; set base = "debian:bookworm-slim" (an image reference with a tag)'
        )
        return None
    ctx.report("base", grammar.image_problem(base))
    ctx.report("base", grammar.image_untagged(base), "warning")
    return DockerTable(**{**t, "base": base})


def base_image(env: EnvSpec) -> str | None:
    table = env.table(DockerTable)
    return table.base if table is not None else None


def amdgpu_install_steps(env: EnvSpec, inputs: PlanInputs, base: str) -> tuple[Step, ...]:
    """ROCm for an amdgpu-install release on a plain Ubuntu base (`ubuntu:22.04`, `ubuntu:24.04`):
    the release's amdgpu-install .deb from the compatibility data, as the wsl2 target installs
    it (issue 15). Nothing for other envs and bases: a rocm/* base image holds ROCm already, a
    pip-SDK release's ROCm comes with the locked wheels, and another base is the spec's choice."""
    rocm = inputs.rocm
    if env.accelerator != "rocm" or rocm is None or rocm.install_model != "amdgpu-install":
        return ()
    ubuntu = plain_ubuntu_release(base)
    if ubuntu is None:
        return ()
    where = f"env {env.name!r} (ROCm {rocm.version}, docker.base {base})"
    url = rocm.amdgpu_install_url(UBUNTU_CODENAMES[ubuntu]) if ubuntu in UBUNTU_CODENAMES else None
    if url is None:
        raise RenderError(
            f"{where}: the compatibility data has no amdgpu-install package for "
            f'Ubuntu {ubuntu}; use base = "ubuntu:22.04" or "ubuntu:24.04", '
            "or the release's rocm/dev-ubuntu image; run `envbuilder check`"
        )
    return (AmdgpuInstall(rocm.version, ubuntu, url),)


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    """runtime (the base, python3, the user) -> build (the venv, offline from the context) ->
    final (the venv copied in, the env's variables, labels, the user)."""
    table = env.table(DockerTable)
    if table is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.docker] table")
    lock = inputs.lock
    base, pinned = from_image(table.base, lock)
    runtime = Stage(
        "runtime",
        base,
        pinned,
        (
            AptInstall(python_packages(env.apt)),
            *amdgpu_install_steps(env, inputs, table.base),
            CreateUser(table.user, UID, GPU_GROUPS),
        ),
    )
    build = build_stage("runtime", table.python, env.python, sdists=sdk_release(env) is not None)
    if sdk_release(env) is not None:
        build = replace(
            build, steps=(*build.steps, LinkRocmSdkRoot(f"{VENV}/bin/rocm-sdk", PIP_SDK_ROCM_LINK))
        )
    final = Stage(
        None,
        "runtime",
        True,
        (
            CopyFromStage("build", VENV, VENV),
            SetEnv(tuple(inputs.variables.items()), path_prepend=f"{VENV}/bin"),
            labels(env, lock),
            RunAsUser(UID, f"/home/{table.user}"),
        ),
    )
    return Plan(env.name, NAME, env.description, lock.locked, (runtime, build, final))


def checks(env: EnvSpec, ctx: CheckContext) -> None:
    """The docker rules (`envbuilder check`): the base's Python and ROCm release; an
    amdgpu-install release on a plain Ubuntu base needs that release's .deb for its codename
    (the plan installs it: amdgpu_install_steps)."""
    table = env.table(DockerTable)
    if table is None:
        return
    check_base_python(env, (NAME, "base"), table.base, table.python, ctx)
    release = env.release
    ubuntu = plain_ubuntu_release(table.base)
    if release is None or release.install_model != "amdgpu-install" or ubuntu is None:
        return
    codename = UBUNTU_CODENAMES.get(ubuntu)
    if codename is None or release.amdgpu_install_url(codename) is None:
        ctx.sink.env_finding(
            env.name,
            (NAME, "base"),
            f"ROCm {release.version} on a plain "
            f"Ubuntu {ubuntu} image: the compatibility data has no "
            f"amdgpu-install package for it; use ubuntu:22.04 or ubuntu:24.04",
        )


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary="an OCI image envbuilder/<env>:<short lock hash>, built by a Docker engine",
        table=DockerTable,
        keys=KEYS,
        parse=parse,
        platforms=("x86_64-manylinux_2_28",),
        os="linux",
        builder="envbuilder.builders.docker:DockerBuilder",
        capabilities=Capabilities(
            push=True,
            pull=True,
            no_cache=True,
            verify=True,
            cluster=True,
            needs_docker=True,
            run=True,
        ),
        base_image=base_image,
        variables=image_variables,
        variable_quoting=(("the Dockerfile's ENV line", quoting.dockerfile_refusal),),
        plan=plan,
        templates=(("Dockerfile", "docker/Dockerfile.j2"),),
        output_dir="dockerfiles",
        checks=checks,
        run_help="docker run --rm of envbuilder/<env>:<short lock hash> as uid 1000, with this "
        "host's device flags from envbuilder/data/docker.toml (ROCm: /dev/kfd, /dev/dri, the "
        "host's video and render gids, seccomp=unconfined, ipc host; WSL2: /dev/dxg and the "
        "libdxcore/librocdxg mounts; NVIDIA: --gpus=all; otherwise none). ENVBUILDER_HOST_KIND "
        "overrides the detection, as for validate.",
    )
)

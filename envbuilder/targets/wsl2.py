"""The `wsl2` target: a reproducible `.wsl` distro (dist/<env>.wsl), whose root filesystem is
built from `wsl/<env>/Dockerfile` with the distro's WSL settings and first-launch script. Its
builder is `envbuilder.builders.wsl2`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from packaging.version import Version

from envbuilder.core import grammar, quoting
from envbuilder.core.compat import INSTALL_MODEL_LABELS, Gpu, RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import RenderError
from envbuilder.core.imagedefs import UID, VENV
from envbuilder.core.model import EnvSpec, FindingSink, TargetTable
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import (
    GPU_GROUPS,
    AptInstall,
    CopyFromStage,
    InstallConfFiles,
    InstallDeb,
    LibhsaFix,
    LinkRocmSdkRoot,
    LockPins,
    MaskUnits,
    Plan,
    PlanInputs,
    RemoveDistroPackages,
    ReserveUid,
    RocmWslStack,
    Stage,
    Step,
    WriteBinaryFile,
    WriteFile,
    WslConfig,
    build_stage,
    from_image,
    labels,
    python_packages,
)
from envbuilder.core.quoting import env_name, sh_quote
from envbuilder.core.records import key
from envbuilder.image.wsl import icon
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
    table_keys,
)

NAME = "wsl2"
#: Ubuntu 24.04's own ROCr/thunk packages shadow /opt/rocm inside WSL: removed
#: (rocm-reference.md, "WSL2").
DISTRO_HSA_PACKAGES = ("libhsa-runtime64-1", "libhsakmt1")
#: Where WSL's first-launch script lives (Microsoft: under /usr/lib/wsl).
OOBE_PATH = "/usr/lib/wsl/oobe.sh"
#: The distro's Start-menu icon, made by envbuilder.image.wsl.icon (Microsoft: under /usr/lib/wsl or
#: /usr/share/wsl, an .ico of at most 1 MiB).
ICON_PATH = "/usr/lib/wsl/envbuilder.ico"
#: librocdxg is built from source against the Windows SDK headers (ROCm/librocdxg README), which
#: only exist under /mnt/c on the user's machine: the oobe script builds it at first launch.
LIBROCDXG_GIT = "https://github.com/ROCm/librocdxg.git"
LIBROCDXG_BUILD_DEPS = ("cmake", "g++", "git", "make")


#: kw_only: the keys are declared in the order messages list them (`ubuntu` before `base`,
#: which has no default), not in the order a constructor would need.
@dataclass(frozen=True, kw_only=True)
class Wsl2Table(TargetTable):
    """[env.NAME.wsl2]: each key declared once (its schema and default follow from it)."""

    distro: str = key("the WSL distro name (wsl --install --name); defaults to envbuilder-<env>")
    ubuntu: str | None = key(
        'the Ubuntu release, "22.04" or "24.04"; required for ROCm envs (the WSL stack)',
        default=None,
    )
    base: str = key(
        "the rootfs base image as written (a tag; the lock pins its digest); defaults to "
        "ubuntu:<ubuntu>"
    )
    user: str = key("the distro's default user, uid 1000", default="envbuilder")
    systemd: bool = key("[boot] systemd in /etc/wsl.conf", default=True)
    # Windows' PATH inside the distro, so `code .` (VS Code's Remote - WSL) and other Windows
    # tools start from a WSL shell (microsoft/WSL#1890)
    append_windows_path: bool = key(
        "[interop] appendWindowsPath: Windows' PATH inside the distro", default=True
    )
    terminal_profile: bool = key(
        "[windowsterminal] enabled: a Windows Terminal profile for the distro", default=True
    )


KEYS: Schema = table_keys(Wsl2Table)


def parse(ctx: TableContext) -> Wsl2Table | None:
    """The table with its defaults: distro envbuilder-<env>, base ubuntu:<ubuntu>."""
    t = ctx.values(Wsl2Table)
    distro = t.get("distro", f"envbuilder-{ctx.env}")
    ctx.report("distro", grammar.distro_problem(ctx.env, distro, derived="distro" not in ctx.raw))
    ubuntu = t["ubuntu"]
    if ubuntu is not None and not grammar.UBUNTU_RE.fullmatch(ubuntu):
        ctx.report("ubuntu", f'{ubuntu!r} is not an Ubuntu release; write e.g. "24.04"')
    if ctx.accelerator == "rocm" and ubuntu is None:
        ctx.report(
            "ubuntu",
            "missing; the WSL ROCm stack is installed for an Ubuntu release: "
            'set ubuntu = "24.04" or "22.04"',
        )
    user = t["user"]
    ctx.report("user", grammar.user_problem(user))
    base = t.get("base", f"ubuntu:{ubuntu}" if ubuntu else None)
    if base is None:
        ctx.report("base", 'missing; set base = "debian:bookworm-slim" or ubuntu = "24.04"')
        return None
    ctx.report("base", grammar.image_problem(base))
    ctx.report("base", grammar.image_untagged(base), "warning")
    return Wsl2Table(**{**t, "distro": distro, "base": base})


def base_image(env: EnvSpec) -> str | None:
    table = env.table(Wsl2Table)
    return table.base if table is not None else None


def system_file(env: EnvSpec) -> str | None:
    """On a pip-SDK release: the prebuilt librocdxg .deb the data pairs with the release, as the
    lock pins it ("<url>#sha256=<hex>"); None when the data has no sha256 for it (the target is
    then "not locked" for it, and its build stops there)."""
    release = sdk_release(env)
    lib = load_compat().librocdxg_for(release) if release is not None else None
    if lib is None or not lib.sha256:
        return None
    return f"{lib.url}#sha256={lib.sha256}"


def _pip_sdk_stack(
    env: EnvSpec, rocm: RocmRelease, ubuntu: str | None, lock: LockPins
) -> list[Step]:
    """A pip-SDK release in WSL: the ROCm user space is the locked wheels; only librocdxg (the
    /dev/dxg bridge, a prebuilt .deb pinned by sha256 in the lock) is installed from outside."""
    compat = load_compat()
    where = f"env {env.name!r} (ROCm {rocm.version}, the pip SDK)"
    lib = compat.librocdxg_for(rocm)
    if rocm.wsl_stack != "rocdxg" or lib is None:
        raise RenderError(
            f"{where}: the compatibility data pairs no prebuilt librocdxg with this "
            "release; run `envbuilder check`"
        )
    dxg = compat.dxg
    if dxg is not None and ubuntu not in dxg.ubuntu:
        raise RenderError(
            f"{where}: librocdxg supports Ubuntu {', '.join(dxg.ubuntu)}, not {ubuntu}"
        )
    url, _, sha = (lock.system_file or system_file(env) or lib.url).partition("#sha256=")
    check = dxg.dids_conf_host if dxg is not None and lib.dids_conf else None
    steps: list[Step] = [
        InstallDeb(
            f"librocdxg {lib.version} (ROCm's WSL bridge to /dev/dxg)", url, sha or None, check
        )
    ]
    if ubuntu == "24.04":
        steps.append(
            RemoveDistroPackages(
                DISTRO_HSA_PACKAGES, "Ubuntu 24.04's own ROCr/thunk would shadow the SDK's"
            )
        )
    return steps


def _wsl_stack(
    env: EnvSpec, rocm: RocmRelease | None, ubuntu: str | None, lock: LockPins
) -> list[Step]:
    """The ROCm WSL stack and the distro-package removal, or nothing for non-ROCm envs."""
    if env.accelerator != "rocm":
        return []
    where = f"env {env.name!r} (ROCm {env.rocm})"
    if rocm is None or rocm.wsl_stack is None:
        raise RenderError(f"{where}: this ROCm release has no WSL runtime; run `envbuilder check`")
    if rocm.install_model == "pip-sdk":
        return _pip_sdk_stack(env, rocm, ubuntu, lock)
    if ubuntu not in UBUNTU_CODENAMES:
        raise RenderError(f"{where}: wsl2.ubuntu must be one of {sorted(UBUNTU_CODENAMES)}")
    if ubuntu not in rocm.ubuntu:
        raise RenderError(
            f"{where}: Ubuntu {ubuntu} is not supported in WSL by this release "
            f"(supported: {', '.join(rocm.ubuntu)})"
        )
    url = rocm.amdgpu_install_url(UBUNTU_CODENAMES[ubuntu])
    if not url:
        raise RenderError(f"{where}: the compatibility data has no amdgpu-install package")
    legacy = rocm.wsl_stack == "legacy"
    steps: list[Step] = [
        RocmWslStack(
            rocm.wsl_stack,
            rocm.version,
            ubuntu,
            url,
            "wsl,rocm" if legacy else "rocm",
            () if legacy else LIBROCDXG_BUILD_DEPS,
        )
    ]
    if ubuntu == "24.04":
        steps.append(
            RemoveDistroPackages(
                DISTRO_HSA_PACKAGES, "Ubuntu 24.04's own ROCr/thunk shadow /opt/rocm inside WSL"
            )
        )
    return steps


def _profile_lines(variables: Mapping[str, str]) -> tuple[str, ...]:
    lines = [
        "# Environment of this envbuilder distro (login shells read /etc/profile.d).",
        f'export PATH="{VENV}/bin:$PATH"',
    ]
    lines += [f"export {env_name(k)}={sh_quote(v)}" for k, v in variables.items()]
    return tuple(lines)


def _distro_variables(
    env: EnvSpec, rocm: RocmRelease | None, variables: Mapping[str, str]
) -> Mapping[str, str]:
    """The profile's variables, with the DXG detection switch where the runtime needs it."""
    rocdxg = env.accelerator == "rocm" and rocm is not None and rocm.wsl_stack == "rocdxg"
    dxg = load_compat().dxg
    if rocdxg and rocm is not None and (dxg is None or dxg.needs_detection_env(rocm.version)):
        # On by default from ROCm 7.13 (wsl.toml [dxg]); before, the runtime needs it.
        return {**variables, "HSA_ENABLE_DXG_DETECTION": "1"}
    return variables


def _rootfs_steps(
    env: EnvSpec, wsl: Wsl2Table, inputs: PlanInputs, variables: Mapping[str, str]
) -> list[Step]:
    """The base's packages, systemd, the ROCm WSL stack, the user, the profile, the icon."""
    system = ["ca-certificates"]
    if wsl.systemd:
        system += ["systemd", "systemd-sysv"]
    rootfs: list[Step] = [AptInstall(python_packages((*env.apt, *system)))]
    rootfs += _wsl_stack(env, inputs.rocm, wsl.ubuntu, inputs.lock)
    if wsl.systemd:
        # Which units: compatibility data (envbuilder/data/wsl.toml, with its sources).
        rootfs.append(MaskUnits(load_compat().wsl_units.masked))
    rootfs += [
        # Microsoft's modern format: oobe.sh creates the user at first launch (docs/wsl2.md).
        ReserveUid(UID, GPU_GROUPS),
        WriteFile("/etc/profile.d/envbuilder.sh", _profile_lines(variables)),
        WriteBinaryFile(
            ICON_PATH,
            icon.icon_base64_lines(),
            "The Start-menu icon ([shortcut] icon), drawn by envbuilder.wslicon.",
        ),
    ]
    return rootfs


def _venv_stage(env: EnvSpec, rocm: RocmRelease | None, pip_sdk: bool) -> Stage:
    """The venv built on the rootfs, with the libhsa fix and the pip SDK's /opt/rocm link."""
    build = build_stage("rootfs", "python3", env.python, sdists=pip_sdk)
    if env.accelerator == "rocm" and rocm is not None and rocm.libhsa_fix is not None:
        torch_lib = f"{VENV}/lib/python{env.python}/site-packages/torch/lib"
        build = replace(build, steps=(*build.steps, LibhsaFix(rocm.libhsa_fix, torch_lib)))
    if pip_sdk:
        build = replace(
            build, steps=(*build.steps, LinkRocmSdkRoot(f"{VENV}/bin/rocm-sdk", PIP_SDK_ROCM_LINK))
        )
    return build


def _final_stage(env: EnvSpec, lock: LockPins) -> Stage:
    return Stage(
        None,
        "rootfs",
        True,
        (
            CopyFromStage("build", VENV, VENV),
            InstallConfFiles(
                (
                    ("envbuilder/wsl.conf", "/etc/wsl.conf", "0644"),
                    ("envbuilder/wsl-distribution.conf", "/etc/wsl-distribution.conf", "0644"),
                    ("envbuilder/oobe.sh", OOBE_PATH, "0755"),
                )
            ),
            labels(env, lock),
        ),
    )


def _wsl_config(env: EnvSpec, wsl: Wsl2Table, build_librocdxg: bool) -> WslConfig:
    welcome = (
        f"This is the envbuilder distro {wsl.distro!r}: {env.description}",
        f"Python {env.python} venv with the locked packages: {VENV} (on PATH in login shells).",
    )
    return WslConfig(
        wsl.distro,
        wsl.user,
        UID,
        wsl.systemd,
        OOBE_PATH,
        VENV,
        build_librocdxg,
        welcome,
        ICON_PATH,
        wsl.append_windows_path,
        wsl.terminal_profile,
    )


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    """rootfs (the base, python3, systemd, the ROCm WSL stack, the user, the profile) -> build
    (the venv; the libhsa fix) -> final (the venv and the WSL files copied in, labels)."""
    wsl = env.table(Wsl2Table)
    if wsl is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.wsl2] table")
    rocm, lock = inputs.rocm, inputs.lock
    pip_sdk = env.accelerator == "rocm" and rocm is not None and rocm.install_model == "pip-sdk"
    rocdxg = env.accelerator == "rocm" and rocm is not None and rocm.wsl_stack == "rocdxg"
    variables = _distro_variables(env, rocm, inputs.variables)
    base, pinned = from_image(wsl.base, lock)
    rootfs = Stage("rootfs", base, pinned, tuple(_rootfs_steps(env, wsl, inputs, variables)))
    stages = (rootfs, _venv_stage(env, rocm, pip_sdk), _final_stage(env, lock))
    # The oobe script builds librocdxg from source on the amdgpu-install rocdxg path only; on the
    # pip SDK the prebuilt .deb is in the image already.
    config = _wsl_config(env, wsl, rocdxg and not pip_sdk)
    return Plan(env.name, NAME, env.description, lock.locked, stages, wsl=config)


# --- the wsl2 target's compatibility rules (`envbuilder check`) ------------------------------


def checks(env: EnvSpec, ctx: CheckContext) -> None:
    """The wsl2 rules for an env that lists the target: its base's Python, a release the distro
    can install (an amdgpu-install WSL stack, or the pip SDK with a paired librocdxg) on the
    table's Ubuntu, and a GPU that AMD's WSL stack supports."""
    table = env.table(Wsl2Table)
    if table is not None:
        check_base_python(env, ("wsl2", "base"), table.base, "python3", ctx)
    release = env.release
    if release is not None:
        _check_release(env, release, table, ctx)
    gpu = ctx.compat.gpu(env.gpu) if env.gpu and env.accelerator == "rocm" else None
    if gpu is not None:
        _check_gpu(env, gpu, release, ctx.sink)


def checks_across(envs: Sequence[EnvSpec], sink: FindingSink) -> None:
    """Each env's distro name is its own (WSL compares them case-insensitively)."""
    seen: dict[str, str] = {}
    for env in envs:
        wsl2 = env.table(Wsl2Table)
        if wsl2 is None:
            continue
        distro = wsl2.distro.lower()
        if distro in seen:
            sink.env_finding(
                env.name,
                ("wsl2", "distro"),
                f"{wsl2.distro!r} is also env "
                f"{seen[distro]!r}'s WSL distro name; give each env its own",
            )
        seen.setdefault(distro, env.name)


def _check_release(
    env: EnvSpec, release: RocmRelease, table: Wsl2Table | None, ctx: CheckContext
) -> None:
    if release.install_model == "pip-sdk":
        _check_pip_sdk(env, release, table, ctx)
        return
    near = ", ".join(ctx.compat.nearest_wsl_releases(release.version)[:3])
    if release.install_model != "amdgpu-install":
        ctx.sink.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version} installs through "
            f"{INSTALL_MODEL_LABELS[release.install_model]}, but envbuilder's wsl2 "
            "distro installs ROCm with amdgpu-install; for the wsl2 target use a "
            f"release it can install: {near}",
        )
        return
    if release.wsl_stack is None:
        ctx.sink.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version} ships no WSL runtime "
            "(no hsa-runtime-rocr4wsl-amdgpu package); for the wsl2 target use the "
            f"nearest releases that have one: {near}",
        )
    if table is None:
        return  # its table has errors, reported already
    _check_ubuntu(env, release, table, ctx.sink)
    ubuntu = table.ubuntu
    if ubuntu and not table.base.startswith((f"ubuntu:{ubuntu}", f"rocm/dev-ubuntu-{ubuntu}:")):
        ctx.sink.env_finding(
            env.name,
            ("wsl2", "base"),
            f"{table.base} does not look like Ubuntu "
            f"{ubuntu}, which the WSL ROCm stack is installed for; leave base unset "
            f"(ubuntu:{ubuntu}) unless it is an Ubuntu {ubuntu} image",
            "warning",
        )


def _check_pip_sdk(
    env: EnvSpec, release: RocmRelease, table: Wsl2Table | None, ctx: CheckContext
) -> None:
    """WSL on the pip SDK: the wheels plus the prebuilt librocdxg the data pairs with the
    release, on an Ubuntu release librocdxg supports."""
    lib = ctx.compat.librocdxg_for(release)
    if release.wsl_stack != "rocdxg" or lib is None:
        ctx.sink.env_finding(
            env.name,
            ("rocm",),
            f"ROCm {release.version}: envbuilder's data pairs no "
            "prebuilt librocdxg (the WSL bridge to /dev/dxg) with this release; for "
            "the wsl2 target use ROCm 7.14.x",
        )
        return
    dxg = ctx.compat.dxg
    if table is not None and table.ubuntu and dxg is not None and table.ubuntu not in dxg.ubuntu:
        ctx.sink.env_finding(
            env.name,
            ("wsl2", "ubuntu"),
            f"librocdxg supports Ubuntu {', '.join(dxg.ubuntu)}, not {table.ubuntu}",
        )
    if not lib.sha256:
        ctx.sink.env_finding(
            env.name,
            ("targets",),
            f"librocdxg {lib.version} ({lib.deb}) has no "
            "confirmed sha256 in envbuilder's data, so the wsl2 target stays not "
            "locked for it and its build stops there (envbuilder/data/wsl.toml)",
            "warning",
        )
    if lib.unverified:
        ctx.sink.env_finding(
            env.name,
            ("targets",),
            f"the librocdxg {lib.version} facts are unverified ({lib.source})",
            "warning",
        )


def _check_ubuntu(env: EnvSpec, release: RocmRelease, table: Wsl2Table, sink: FindingSink) -> None:
    """The WSL plan installs the release's amdgpu-install package for the Ubuntu release's
    codename: the renderer refuses an Ubuntu release it has no codename or package for."""
    ubuntu = table.ubuntu
    if ubuntu is None:
        return  # missing: reported with the wsl2 table
    path = ("wsl2", "ubuntu")
    codename = UBUNTU_CODENAMES.get(ubuntu)
    if codename is None:
        sink.env_finding(
            env.name,
            path,
            f"Ubuntu {ubuntu} is not a release AMD's WSL ROCm stack is "
            f"packaged for; use {' or '.join(sorted(UBUNTU_CODENAMES))}",
        )
    elif release.wsl_stack is None:
        return  # no stack at all: reported on rocm
    elif ubuntu not in release.ubuntu:
        sink.env_finding(
            env.name,
            path,
            f"Ubuntu {ubuntu} is not supported by ROCm "
            f"{release.version} in WSL; use {' or '.join(release.ubuntu)}",
        )
    elif release.amdgpu_install_url(codename) is None:
        sink.env_finding(
            env.name,
            path,
            f"envbuilder's data has no amdgpu-install package of ROCm "
            f"{release.version} for Ubuntu {ubuntu}; use another release",
        )


def _check_gpu(env: EnvSpec, gpu: Gpu, release: RocmRelease | None, sink: FindingSink) -> None:
    label = f"{env.gpu} ({gpu.gfx})"
    if not gpu.wsl:
        sink.env_finding(
            env.name,
            ("targets",),
            f"{label} is not supported by AMD's WSL stack "
            "(WSL supports RDNA3/RDNA4 GPUs such as RX 7900 XTX, RX 7800 XT, RX 9070 "
            "XT); remove 'wsl2' or use the docker target on a Linux host",
        )
    elif gpu.wsl_since and release and Version(release.version) < Version(gpu.wsl_since):
        sink.env_finding(
            env.name,
            ("targets",),
            f"{label} is supported by AMD's WSL stack from "
            f"ROCm {gpu.wsl_since}, not in ROCm {release.version}; remove 'wsl2' or "
            "use the docker target on a Linux host",
        )


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary="a .wsl distro file, dist/<env>.wsl (installed as the env's distro on Windows)",
        table=Wsl2Table,
        keys=KEYS,
        parse=parse,
        platforms=("x86_64-manylinux_2_28",),
        os="linux",
        builder="envbuilder.builders.wsl2:Wsl2Builder",
        capabilities=Capabilities(
            push=True,
            pull=True,
            no_cache=True,
            verify=True,
            needs_docker=True,
            install=True,
            run=True,
            host=("linux", "windows"),
        ),
        base_image=base_image,
        system_file=system_file,
        variables=image_variables,
        variable_quoting=(
            (
                "/etc/profile.d/envbuilder.sh on a Dockerfile RUN line",
                quoting.dockerfile_sh_refusal,
            ),
        ),
        plan=plan,
        templates=(
            ("Dockerfile", "wsl/Dockerfile.j2"),
            ("wsl.conf", "wsl/wsl.conf.j2"),
            ("wsl-distribution.conf", "wsl/wsl-distribution.conf.j2"),
            ("oobe.sh", "wsl/oobe.sh.j2"),
        ),
        template_globals={"gpu_groups": GPU_GROUPS, "librocdxg_git": LIBROCDXG_GIT},
        output_dir="wsl",
        gpu_stack="wsl",
        checks=checks,
        checks_across=checks_across,
        run_help="dist/<env>.wsl (its sha256 must be the lock's): on Windows in the installed "
        "distro (wsl.exe --distribution NAME --user USER --exec), on Linux in a container of the "
        "imported .wsl; as the distro's default user, through a login shell.",
    )
)

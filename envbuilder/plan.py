"""One typed, ordered plan between the lock and the rendered files.

`build_plan` turns (env spec, target, ROCm release facts, lock pins) into a `Plan`: stages of
small, frozen steps such as "apt-install", "create-user", "create-venv", "install-locked",
"rocm-wsl-stack", "libhsa-fix", "write-file". Templates only loop and branch over the plan (by
`step.kind`); they never read the spec or the lock. Every fact the steps encode comes from the
compatibility data (`envbuilder/data/*.toml`) or from the constants below, each with its source.

Plans are pure values: the same inputs give an equal plan, and `Plan.input_sha256` (a hash of
its canonical JSON) is what the generated files carry in their header instead of a timestamp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, ClassVar, Literal

from envbuilder import activate
from envbuilder.compat import RocmRelease, load_compat
from envbuilder.errors import RenderError
from envbuilder.fsutil import sha256_bytes
from envbuilder.imagedefs import CONTEXT_DIR, ENV_LABEL, LOCK_LABEL, LOCK_SHA_ARG, UID, VENV
from envbuilder.project import pylock_name
from envbuilder.quoting import env_name, sh_quote
from envbuilder.spec import EnvSpec, TargetName

#: Groups that own the GPU device nodes (/dev/kfd is root:render, /dev/dri root:video;
#: ROCm/ROCm-docker#90, #116). `render` is created when the base image lacks it.
GPU_GROUPS = ("video", "render")
#: The rendered PowerShell script upgrades pip to at least this (pip installs pylock.toml from 26).
WINDOWS_PIP = "pip>=26"
#: Ubuntu release -> codename, for AMD's amdgpu-install package paths.
UBUNTU_CODENAMES = {"22.04": "jammy", "24.04": "noble"}
#: Ubuntu 24.04's own ROCr/thunk packages shadow /opt/rocm inside WSL: removed
#: (rocm-reference.md, "WSL2").
DISTRO_HSA_PACKAGES = ("libhsa-runtime64-1", "libhsakmt1")
#: Where WSL's first-launch script lives (Microsoft: under /usr/lib/wsl).
OOBE_PATH = "/usr/lib/wsl/oobe.sh"
#: librocdxg is built from source against the Windows SDK headers (ROCm/librocdxg README), which
#: only exist under /mnt/c on the user's machine: the oobe script builds it at first launch.
LIBROCDXG_GIT = "https://github.com/ROCm/librocdxg.git"
LIBROCDXG_BUILD_DEPS = ("cmake", "g++", "git", "make")


# --- steps ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """Base of all steps; `kind` is what templates branch on."""

    kind: ClassVar[str] = "step"


@dataclass(frozen=True)
class AptInstall(Step):
    """`apt-get update && install --no-install-recommends PACKAGES && rm -rf lists`, one RUN.
    `versions` (from the lock, envbuilder.aptlock): every package the step installs, pinned
    (name, version); the template then writes `name=version` for each instead of `packages`."""

    kind: ClassVar[str] = "apt-install"
    packages: tuple[str, ...]
    versions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CreateUser(Step):
    """A user with uid `uid`, its own group, a home, and membership in `groups` (created as
    system groups when missing). Any other user holding `uid` (Ubuntu's `ubuntu`) is removed."""

    kind: ClassVar[str] = "create-user"
    name: str
    uid: int
    groups: tuple[str, ...]


@dataclass(frozen=True)
class CopyContext(Step):
    """`COPY envbuilder/ DEST/`: the build context's envbuilder folder."""

    kind: ClassVar[str] = "copy-context"
    dest: str


@dataclass(frozen=True)
class CreateVenv(Step):
    """A venv at `path` made by the base image's `python`."""

    kind: ClassVar[str] = "create-venv"
    python: str
    path: str


@dataclass(frozen=True)
class CheckPython(Step):
    """Fail the build when `python` is not version `version` (major.minor), saying so."""

    kind: ClassVar[str] = "check-python"
    python: str
    version: str

    @property
    def argv(self) -> tuple[str, ...]:
        code = (
            "import sys; v = '%d.%d' % sys.version_info[:2]; "
            f"sys.exit(None if v == {self.version!r} else "
            f"'envbuilder: the base image has Python ' + v + ', the env needs ' + {self.version!r})"
        )
        return (self.python, "-c", code)


@dataclass(frozen=True)
class InstallLocked(Step):
    """pip install from the context's requirements.txt: offline, hash-checked, no cache; then
    the context folder is removed (build-context contract)."""

    kind: ClassVar[str] = "install-locked"
    venv: str
    requirements: str
    cleanup: str


@dataclass(frozen=True)
class RocmWslStack(Step):
    """The WSL user-mode ROCm stack for one release.

    legacy: install the release's amdgpu-install .deb, then
            `amdgpu-install -y --usecase=wsl,rocm --no-dkms` (ROCm/ROCm#4851).
    rocdxg: the normal ROCm install (`--usecase=rocm --no-dkms`) plus librocdxg's build tools;
            librocdxg itself is built by the oobe script (it needs the Windows SDK).
    """

    kind: ClassVar[str] = "rocm-wsl-stack"
    stack: Literal["legacy", "rocdxg"]
    rocm: str
    ubuntu: str
    deb_url: str
    usecase: str
    extra_packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemoveDistroPackages(Step):
    """Purge these packages if installed (Ubuntu 24.04's libhsa-runtime64-1/libhsakmt1)."""

    kind: ClassVar[str] = "remove-packages"
    packages: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class LibhsaFix(Step):
    """torch's bundled libhsa-runtime64 cannot reach /dev/dxg. copy (ROCm <= 6.3.4): delete it
    and copy /opt/rocm's real file (readlink -f); delete (ROCm >= 6.4.1): delete only."""

    kind: ClassVar[str] = "libhsa-fix"
    mode: Literal["copy", "delete"]
    torch_lib: str
    rocm_lib: str = "/opt/rocm/lib/libhsa-runtime64.so"


@dataclass(frozen=True)
class MaskUnits(Step):
    """Mask systemd units by linking them to /dev/null in /etc/systemd/system."""

    kind: ClassVar[str] = "mask-units"
    units: tuple[str, ...]


@dataclass(frozen=True)
class WriteFile(Step):
    """Write `lines` to `path` (mode `mode`, root-owned)."""

    kind: ClassVar[str] = "write-file"
    path: str
    lines: tuple[str, ...]
    mode: str = "0644"


@dataclass(frozen=True)
class CopyFromStage(Step):
    """`COPY --from=STAGE SRC DEST`."""

    kind: ClassVar[str] = "copy-from-stage"
    stage: str
    src: str
    dest: str


@dataclass(frozen=True)
class InstallConfFiles(Step):
    """Copy rendered files from the context, then make each root:root with its mode.
    `files` holds (context path, destination, octal mode)."""

    kind: ClassVar[str] = "install-conf"
    files: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class SetEnv(Step):
    """`ENV` pairs, in order (values quoted), after `PATH=<path_prepend>:$PATH` when given."""

    kind: ClassVar[str] = "set-env"
    pairs: tuple[tuple[str, str], ...]
    path_prepend: str | None = None


@dataclass(frozen=True)
class Labels(Step):
    """OCI labels (quoted values) plus labels taken from build args (`arg_labels`)."""

    kind: ClassVar[str] = "labels"
    pairs: tuple[tuple[str, str], ...]
    arg_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunAsUser(Step):
    """`USER uid` and `WORKDIR home` for everything after."""

    kind: ClassVar[str] = "run-as-user"
    uid: int
    workdir: str


# Windows steps (rendered into PowerShell)

@dataclass(frozen=True)
class FindPython(Step):
    """Find Python `version` with the py launcher; fail naming the version when absent."""

    kind: ClassVar[str] = "find-python"
    version: str


@dataclass(frozen=True)
class InstallPylock(Step):
    """Upgrade pip to `pip`, check the pylock's sha256 when known, install it (hash-checked)."""

    kind: ClassVar[str] = "install-pylock"
    pip: str
    pylock: str  # path relative to the project root, forward slashes
    pylock_sha256: str | None


@dataclass(frozen=True)
class WriteActivation(Step):
    """Splice the env's block into each venv activate script (name -> block lines)."""

    kind: ClassVar[str] = "write-activation"
    begin: str
    end: str
    scripts: tuple[tuple[str, tuple[str, ...], str], ...]  # (file name, lines, newline)
    variables: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Stage:
    """One build stage: `FROM base AS name`. `pinned` says whether `base` carries a digest."""

    name: str | None
    base: str
    pinned: bool
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class WslConfig:
    """What /etc/wsl.conf, /etc/wsl-distribution.conf and the oobe script say."""

    distro: str
    user: str
    uid: int
    systemd: bool
    oobe_path: str
    venv: str
    rocdxg: bool
    welcome: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """Everything a target's templates need, and nothing else."""

    env: str
    target: TargetName
    description: str
    locked: bool
    stages: tuple[Stage, ...] = ()
    steps: tuple[Step, ...] = ()  # single-stage targets (windows)
    wsl: WslConfig | None = None

    @property
    def input_sha256(self) -> str:
        """sha256 of the plan's canonical JSON: what the generated files depend on."""
        text = json.dumps(_canonical(self), sort_keys=True, separators=(",", ":"))
        return sha256_bytes(text.encode("utf-8"))


def _canonical(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _canonical(getattr(value, f.name)) for f in fields(value)}
        out["__kind__"] = getattr(value, "kind", type(value).__name__)
        return out
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_canonical(v) for v in value]
    return value


# --- inputs from the lock ------------------------------------------------------------------------

@dataclass(frozen=True)
class LockPins:
    """What the plan takes from the env lock for one target (all None when not locked)."""

    base_image: str | None = None  # "image@sha256:<hex>"
    pylock: str | None = None  # pylock file name
    pylock_sha256: str | None = None
    apt: Mapping[str, Mapping[str, str]] | None = None  # stage -> package -> version (aptlock)

    @property
    def locked(self) -> bool:
        return self.pylock_sha256 is not None


# --- building plans ------------------------------------------------------------------------------

def build_plan(
    env: EnvSpec,
    target: TargetName,
    *,
    rocm: RocmRelease | None,
    lock: LockPins,
    variables: Mapping[str, str],
) -> Plan:
    """The plan for `env` on `target`. `rocm` is the env's release (None for non-ROCm envs);
    `variables` the env's environment variables for that target, in order (see
    envbuilder.activate.activation_env). Raises RenderError when the facts needed are missing."""
    if target == "docker":
        return _pin_apt(_docker_plan(env, lock, variables), lock.apt)
    if target == "wsl2":
        return _pin_apt(_wsl_plan(env, rocm, lock, variables), lock.apt)
    if target == "windows":
        return _windows_plan(env, lock, variables)
    raise RenderError(f"target {target!r} has no rendered files (native venvs are built directly)")


def _pin_apt(p: Plan, apt: Mapping[str, Mapping[str, str]] | None) -> Plan:
    """Each named stage's apt-install steps with the lock's versions for that stage (a stage
    the lock does not pin stays unpinned; `envbuilder lock --check` reports it)."""
    if not apt:
        return p
    def pinned(st: Stage) -> Stage:
        versions = apt.get(st.name) if st.name is not None else None
        if versions is None:
            return st
        pins = tuple(sorted(versions.items()))
        return replace(st, steps=tuple(replace(step, versions=pins)
                                       if isinstance(step, AptInstall) else step
                                       for step in st.steps))

    return replace(p, stages=tuple(pinned(st) for st in p.stages))


def _base(image_tag: str, lock: LockPins) -> tuple[str, bool]:
    """The FROM reference: the lock's pin when it has a digest (a lock made without an engine may
    record only the tag), else the spec's tag."""
    if lock.base_image:
        return lock.base_image, "@sha256:" in lock.base_image
    return image_tag, False


def _python_packages(extra: tuple[str, ...]) -> tuple[str, ...]:
    return ("python3", *sorted(set(extra) - {"python3"}))


def _build_stage(base_stage: str, python: str, version: str) -> Stage:
    venv_python = f"{VENV}/bin/python"
    steps: list[Step] = [
        AptInstall(("python3", "python3-venv")),
        CopyContext(f"{CONTEXT_DIR}/"),
        CreateVenv(python, VENV),
        CheckPython(venv_python, version),
        InstallLocked(VENV, f"{CONTEXT_DIR}/requirements.txt", CONTEXT_DIR),
    ]
    return Stage("build", base_stage, True, tuple(steps))


def _labels(env: EnvSpec, lock: LockPins) -> Labels:
    pairs = (
        ("org.opencontainers.image.title", env.name),
        ("org.opencontainers.image.description", env.description),
        ("org.opencontainers.image.version", lock.pylock_sha256 or "unlocked"),
        (ENV_LABEL, env.name),
    )
    return Labels(pairs, ((LOCK_LABEL, LOCK_SHA_ARG),))


def _docker_plan(env: EnvSpec, lock: LockPins, variables: Mapping[str, str]) -> Plan:
    if env.docker is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.docker] table")
    base, pinned = _base(env.docker.base, lock)
    user = env.docker.user
    runtime = Stage("runtime", base, pinned, (
        AptInstall(_python_packages(env.apt)),
        CreateUser(user, UID, GPU_GROUPS),
    ))
    build = _build_stage("runtime", env.docker.python, env.python)
    final = Stage(None, "runtime", True, (
        CopyFromStage("build", VENV, VENV),
        SetEnv(tuple(variables.items()), path_prepend=f"{VENV}/bin"),
        _labels(env, lock),
        RunAsUser(UID, f"/home/{user}"),
    ))
    return Plan(env.name, "docker", env.description, lock.locked, (runtime, build, final))


def _wsl_stack(env: EnvSpec, rocm: RocmRelease | None, ubuntu: str | None) -> list[Step]:
    """The ROCm WSL stack and the distro-package removal, or nothing for non-ROCm envs."""
    if env.accelerator != "rocm":
        return []
    where = f"env {env.name!r} (ROCm {env.rocm})"
    if rocm is None or rocm.wsl_stack is None:
        raise RenderError(f"{where}: this ROCm release has no WSL runtime; run `envbuilder check`")
    if ubuntu not in UBUNTU_CODENAMES:
        raise RenderError(f"{where}: wsl2.ubuntu must be one of {sorted(UBUNTU_CODENAMES)}")
    if ubuntu not in rocm.ubuntu:
        raise RenderError(f"{where}: Ubuntu {ubuntu} is not supported in WSL by this release "
                          f"(supported: {', '.join(rocm.ubuntu)})")
    url = rocm.amdgpu_install_url(UBUNTU_CODENAMES[ubuntu])
    if not url:
        raise RenderError(f"{where}: the compatibility data has no amdgpu-install package")
    legacy = rocm.wsl_stack == "legacy"
    steps: list[Step] = [RocmWslStack(
        rocm.wsl_stack, rocm.version, ubuntu, url,
        "wsl,rocm" if legacy else "rocm",
        () if legacy else LIBROCDXG_BUILD_DEPS,
    )]
    if ubuntu == "24.04":
        steps.append(RemoveDistroPackages(
            DISTRO_HSA_PACKAGES, "Ubuntu 24.04's own ROCr/thunk shadow /opt/rocm inside WSL"))
    return steps


def _profile_lines(variables: Mapping[str, str]) -> tuple[str, ...]:
    lines = ["# Environment of this envbuilder distro (login shells read /etc/profile.d).",
             f'export PATH="{VENV}/bin:$PATH"']
    lines += [f"export {env_name(k)}={sh_quote(v)}" for k, v in variables.items()]
    return tuple(lines)


def _wsl_plan(
    env: EnvSpec, rocm: RocmRelease | None, lock: LockPins, variables: Mapping[str, str]
) -> Plan:
    wsl = env.wsl2
    if wsl is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.wsl2] table")
    rocdxg = rocm is not None and rocm.wsl_stack == "rocdxg"
    if rocdxg:
        variables = {**variables, "HSA_ENABLE_DXG_DETECTION": "1"}
    base, pinned = _base(wsl.base, lock)
    system = ["ca-certificates"]
    if wsl.systemd:
        system += ["systemd", "systemd-sysv"]
    rootfs: list[Step] = [AptInstall(_python_packages((*env.apt, *system)))]
    rootfs += _wsl_stack(env, rocm, wsl.ubuntu)
    if wsl.systemd:
        # Which units: compatibility data (envbuilder/data/wsl.toml, with its sources).
        rootfs.append(MaskUnits(load_compat().wsl_units.masked))
    rootfs += [
        CreateUser(wsl.user, UID, GPU_GROUPS),
        WriteFile("/etc/profile.d/envbuilder.sh", _profile_lines(variables)),
    ]
    build = _build_stage("rootfs", "python3", env.python)
    if env.accelerator == "rocm" and rocm is not None and rocm.libhsa_fix is not None:
        torch_lib = f"{VENV}/lib/python{env.python}/site-packages/torch/lib"
        build = replace(build, steps=(*build.steps, LibhsaFix(rocm.libhsa_fix, torch_lib)))
    final = Stage(None, "rootfs", True, (
        CopyFromStage("build", VENV, VENV),
        InstallConfFiles((
            ("envbuilder/wsl.conf", "/etc/wsl.conf", "0644"),
            ("envbuilder/wsl-distribution.conf", "/etc/wsl-distribution.conf", "0644"),
            ("envbuilder/oobe.sh", OOBE_PATH, "0755"),
        )),
        _labels(env, lock),
    ))
    welcome = (
        f"This is the envbuilder distro {wsl.distro!r}: {env.description}",
        f"Python {env.python} venv with the locked packages: {VENV} (on PATH in login shells).",
    )
    config = WslConfig(wsl.distro, wsl.user, UID, wsl.systemd, OOBE_PATH, VENV, rocdxg, welcome)
    stages = (Stage("rootfs", base, pinned, tuple(rootfs)), build, final)
    return Plan(env.name, "wsl2", env.description, lock.locked, stages, wsl=config)


def _windows_plan(env: EnvSpec, lock: LockPins, variables: Mapping[str, str]) -> Plan:
    if env.windows is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.windows] table")
    pylock = f"lockfiles/{lock.pylock or pylock_name(env.name, 'windows')}"
    # The same blocks `envbuilder build --target windows` writes (envbuilder.activate), so the
    # script and the tool leave identical venvs. Script names as `python -m venv` writes them.
    makers = (("activate", activate.bash_block), ("Activate.ps1", activate.powershell_block),
              ("activate.bat", activate.cmd_activate_block),
              ("deactivate.bat", activate.cmd_deactivate_block))
    scripts = tuple(
        (name, tuple(make(variables).replace("\r\n", "\n").splitlines()) if variables else (),
         "crlf" if name.endswith(".bat") else "auto")
        for name, make in makers
    )
    steps: tuple[Step, ...] = (
        FindPython(env.windows.python),
        CreateVenv("py", ".venv"),
        InstallPylock(WINDOWS_PIP, pylock, lock.pylock_sha256),
        WriteActivation(activate.BEGIN, activate.END, scripts, tuple(variables.items())),
    )
    return Plan(env.name, "windows", env.description, lock.locked, steps=steps)

"""One typed, ordered plan between the lock and the rendered files: the plan primitives.

Each target's descriptor (`envbuilder.targets.<name>`, its `plan`) turns (env spec, `PlanInputs`:
ROCm release facts, lock pins, the env's variables) into a `Plan`: stages of small, frozen steps
such as "apt-install", "create-user", "create-venv", "install-locked", "rocm-wsl-stack",
"libhsa-fix", "write-file". Templates only loop and branch over the plan (by `step.kind`); they
never read the spec or the lock. Every fact the steps encode comes from the compatibility data
(`envbuilder/data/*.toml`) or from constants with their source (here and in the descriptors).

Plans are pure values: the same inputs give an equal plan, and `Plan.input_sha256` (a hash of
its canonical JSON) is what the generated files carry in their header instead of a timestamp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, Literal, TypeVar

from envbuilder.core.compat import RocmRelease
from envbuilder.core.fsutil import sha256_bytes
from envbuilder.core.imagedefs import CONTEXT_DIR, ENV_LABEL, LOCK_LABEL, LOCK_SHA_ARG, VENV
from envbuilder.core.model import EnvSpec

#: Field metadata: a field added to a step later is left out of the canonical JSON while it
#: holds its default, so the plans (and the input-sha256 of the files) of envs it does not
#: concern stay as they were.
OMIT_DEFAULT = "envbuilder.omit_default"

#: Groups that own the GPU device nodes (/dev/kfd is root:render, /dev/dri root:video;
#: ROCm/ROCm-docker#90, #116). `render` is created when the base image lacks it.
GPU_GROUPS = ("video", "render")


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """Base of all steps; `kind` is what templates branch on."""

    kind: ClassVar[str] = "step"


@dataclass(frozen=True)
class AptInstall(Step):
    """`apt-get update && install --no-install-recommends PACKAGES && rm -rf lists`, one RUN.
    `versions` (from the lock, envbuilder.lock.apt): every package the step installs, pinned
    (name, version); the template then writes `name=version` for each instead of `packages`."""

    kind: ClassVar[str] = "apt-install"
    packages: tuple[str, ...]
    versions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AptSnapshotSources(Step):
    """Point apt at a snapshot archive before any apt-install of the stage: remove the base's
    own source files (`remove`), write `lines` to /etc/apt/sources.list. From the lock's
    `source_date_epoch` (`timestamp`) and envbuilder/data/apt.toml (envbuilder.lock.aptsnapshot)."""

    kind: ClassVar[str] = "apt-sources"
    lines: tuple[str, ...]
    remove: tuple[str, ...]
    timestamp: str


@dataclass(frozen=True)
class CreateUser(Step):
    """A user with uid `uid`, its own group, a home, and membership in `groups` (created as
    system groups when missing). Any other user holding `uid` (Ubuntu's `ubuntu`) is removed."""

    kind: ClassVar[str] = "create-user"
    name: str
    uid: int
    groups: tuple[str, ...]


@dataclass(frozen=True)
class ReserveUid(Step):
    """The GPU `groups` exist (created as system groups when missing) and no user holds `uid`
    (Ubuntu's `ubuntu` is removed): WSL's first launch creates the user with it (the modern
    `.wsl` format ships no default user)."""

    kind: ClassVar[str] = "reserve-uid"
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
    # The wheelhouse, for a lock with an sdist (the pip SDK's `rocm`): pip's isolated build
    # environment then installs the sdist's build backend from it (`--find-links`, still
    # `--no-index`). None: wheels only, the command as before.
    find_links: str | None = field(default=None, metadata={OMIT_DEFAULT: True})


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
class AmdgpuInstall(Step):
    """ROCm of an amdgpu-install release on a plain Ubuntu image: the release's amdgpu-install
    .deb (its URL from the compatibility data), then `amdgpu-install -y --usecase=rocm
    --no-dkms` (the kernel driver is the host's). The same commands as RocmWslStack's."""

    kind: ClassVar[str] = "amdgpu-install"
    rocm: str
    ubuntu: str
    deb_url: str
    usecase: str = "rocm"


@dataclass(frozen=True)
class InstallDeb(Step):
    """Download one .deb, check its sha256, install it with apt (its dependencies from the
    distribution). `sha256` None: not locked (no confirmed hash): the build stops there, saying
    so, instead of installing an unchecked file. `check_file`: a file the package must install."""

    kind: ClassVar[str] = "install-deb"
    what: str
    url: str
    sha256: str | None
    check_file: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class LinkRocmSdkRoot(Step):
    """A pip-SDK venv has no /opt/rocm: ROCm's root is what `rocm-sdk path --root` says, asked
    at build time and recorded as the link `link` (which ROCM_PATH names)."""

    kind: ClassVar[str] = "rocm-sdk-root"
    rocm_sdk: str  # the venv's rocm-sdk command
    link: str


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
class WriteBinaryFile(Step):
    """Write a binary file from its base64 text (`base64_lines`, joined), root-owned; `why`
    becomes the comment above it."""

    kind: ClassVar[str] = "write-binary"
    path: str
    base64_lines: tuple[str, ...]
    why: str
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


# venv steps (windows: rendered into PowerShell; native: carried out by envbuilder.builders.venv)


@dataclass(frozen=True)
class FindPython(Step):
    """Find Python `version` (Windows: the py launcher; Linux: uv's interpreter discovery); fail
    naming the version when absent."""

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
class SyncPylock(Step):
    """Fetch every artifact of the pylock into the wheel cache (sha256-verified), then make the
    venv hold exactly them: `uv pip sync --offline --require-hashes` (the native venv)."""

    kind: ClassVar[str] = "sync-pylock"
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


_S = TypeVar("_S", bound=Step)


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
    icon_path: str
    append_windows_path: bool = True  # /etc/wsl.conf [interop] appendWindowsPath
    terminal_profile: bool = True  # /etc/wsl-distribution.conf [windowsterminal] enabled


@dataclass(frozen=True)
class Plan:
    """Everything a target's templates need, and nothing else."""

    env: str
    target: str
    description: str
    locked: bool
    stages: tuple[Stage, ...] = ()
    steps: tuple[Step, ...] = ()  # single-stage targets (windows)
    wsl: WslConfig | None = None

    def first(self, kind: type[_S]) -> _S | None:
        """The plan's first step of type `kind` (its stages' steps, then its own), if any."""
        for step in (*(s for st in self.stages for s in st.steps), *self.steps):
            if isinstance(step, kind):
                return step
        return None

    @property
    def input_sha256(self) -> str:
        """sha256 of the plan's canonical JSON: what the generated files depend on."""
        text = json.dumps(_canonical(self), sort_keys=True, separators=(",", ":"))
        return sha256_bytes(text.encode("utf-8"))


def _canonical(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        out = {
            f.name: _canonical(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get(OMIT_DEFAULT) and getattr(value, f.name) == f.default)
        }
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
    system_file: str | None = None  # "<url>#sha256=<hex>" (lockfile.TargetLock.system_file)
    apt: Mapping[str, Mapping[str, str]] | None = None  # stage -> package -> version (aptlock)
    apt_epoch: int | None = None  # the lock's apt_snapshot_epoch: which snapshot apt reads

    @property
    def locked(self) -> bool:
        return self.pylock_sha256 is not None


@dataclass(frozen=True)
class PlanInputs:
    """What a target's plan is made from besides the env: the ROCm release facts (None for a
    non-ROCm env), the lock's pins, and the env's variables for that target, in order (the
    target descriptor's `variables`)."""

    rocm: RocmRelease | None
    lock: LockPins
    variables: Mapping[str, str]


# --- pieces several targets' plans share ---------------------------------------------------------


def pin_apt(p: Plan, apt: Mapping[str, Mapping[str, str]] | None) -> Plan:
    """Each named stage's apt-install steps with the lock's versions for that stage (a stage
    the lock does not pin stays unpinned; `envbuilder lock --check` reports it). Applied to
    every target's plan by envbuilder.builders.render, so a descriptor's plan names packages
    only."""
    if not apt:
        return p

    def pinned(st: Stage) -> Stage:
        versions = apt.get(st.name) if st.name is not None else None
        if versions is None:
            return st
        pins = tuple(sorted(versions.items()))
        return replace(
            st,
            steps=tuple(
                replace(step, versions=pins) if isinstance(step, AptInstall) else step
                for step in st.steps
            ),
        )

    return replace(p, stages=tuple(pinned(st) for st in p.stages))


def with_snapshot_sources(p: Plan, sources: AptSnapshotSources | None) -> Plan:
    """The plan with `sources` as the first step of each stage built on an outside image whose
    stages (it, or one built on it) install apt packages; the plan as it was for None. Applied
    by envbuilder.builders.render after pin_apt, so a descriptor's plan names packages only."""
    if sources is None:
        return p
    by_name = {st.name: st for st in p.stages if st.name}

    def root(st: Stage) -> Stage:
        while st.base in by_name:
            st = by_name[st.base]
        return st

    roots = {
        id(root(st)) for st in p.stages if any(isinstance(step, AptInstall) for step in st.steps)
    }
    return replace(
        p,
        stages=tuple(
            replace(st, steps=(sources, *st.steps)) if id(st) in roots else st for st in p.stages
        ),
    )


def from_image(image_tag: str, lock: LockPins) -> tuple[str, bool]:
    """The FROM reference: the lock's pin when it has a digest (a lock made without an engine may
    record only the tag), else the spec's tag."""
    if lock.base_image:
        return lock.base_image, "@sha256:" in lock.base_image
    return image_tag, False


def python_packages(extra: tuple[str, ...]) -> tuple[str, ...]:
    """The apt packages of a stage that needs the distribution's python3, plus `extra`."""
    return ("python3", *sorted(set(extra) - {"python3"}))


def build_stage(base_stage: str, python: str, version: str, *, sdists: bool = False) -> Stage:
    """The "build" stage: the venv made by the base's `python`, checked to be `version`, holding
    the locked wheels of the build context. `sdists`: the lock holds an sdist (a pip-SDK
    release's `rocm`), built offline with its backend from the context's wheels."""
    venv_python = f"{VENV}/bin/python"
    steps: list[Step] = [
        AptInstall(("python3", "python3-venv")),
        CopyContext(f"{CONTEXT_DIR}/"),
        CreateVenv(python, VENV),
        CheckPython(venv_python, version),
        InstallLocked(
            VENV,
            f"{CONTEXT_DIR}/requirements.txt",
            CONTEXT_DIR,
            f"{CONTEXT_DIR}/wheels" if sdists else None,
        ),
    ]
    return Stage("build", base_stage, True, tuple(steps))


def labels(env: EnvSpec, lock: LockPins) -> Labels:
    """The image's OCI labels and envbuilder's own (the lock's sha256 from a build arg)."""
    pairs = (
        ("org.opencontainers.image.title", env.name),
        ("org.opencontainers.image.description", env.description),
        ("org.opencontainers.image.version", lock.pylock_sha256 or "unlocked"),
        (ENV_LABEL, env.name),
    )
    return Labels(pairs, ((LOCK_LABEL, LOCK_SHA_ARG),))

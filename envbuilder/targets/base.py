"""What a deployment target is: one `TargetDescriptor` per target, with declared capabilities,
and the typed options and protocols its builder is driven through.

A descriptor is a value (no behaviour of its own beyond small, pure functions): its spec table
(dataclass, key schema, parser), its uv platform(s) and OS, its base image and Python, its plan
builder and templates, its output folder, its variables and their quoting, its capabilities, and
where its builder lives (imported only when a command needs it). `envbuilder.targets.registry`
is the one list of descriptors; everything that lists targets asks it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from envbuilder.core import activate, records
from envbuilder.core.activate import checked_variables
from envbuilder.core.compat import Compat
from envbuilder.core.imagedefs import VENV
from envbuilder.core.model import EnvSpec, FindingSink, Index, Severity, TargetTable
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import Plan, PlanInputs, WriteActivation
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.core.records import Field

#: A table's key schema: key -> "str", "bool", "list[str]", "map[str]", or a nested schema.
Schema = Mapping[str, Any]
#: The key schema's kind of each record kind (envbuilder.core.records): a target table holds
#: strings, booleans, lists of strings and tables of strings.
_SCHEMA_KINDS: dict[type, str] = {str: "str", bool: "bool", list: "list[str]", dict: "map[str]"}
#: `packages` and `index_pins` in a target's table replace the env's for that target; the spec
#: loader keeps them on EnvSpec.target_packages / target_index_pins, not in the table's record.
PACKAGE_KEYS = (
    Field("packages", list, "the target's packages, in place of the env's", required=False),
    Field("index_pins", dict, "the target's index pins, in place of the env's", required=False),
)


def table_keys(table: type[TargetTable], *extra: Field) -> Schema:
    """The key schema of a target's table, which the spec loader checks keys and types with:
    the record's `key(...)` fields in the order they are declared, then `extra`."""
    return {k.name: _SCHEMA_KINDS[k.kind] for k in (*records.fields_of(table), *extra)}


#: Where a target's env variables are written, and the quoting there: (what, refusal), where
#: refusal(value) says why that quoting cannot carry `value` (None: it can).
VariableQuoting = tuple[tuple[str, Callable[[str], str | None]], ...]
#: The capability names, as `Capabilities` fields and `registry.with_capability` takes them.
Capability = Literal[
    "build",
    "push",
    "pull",
    "path",
    "no_cache",
    "verify",
    "cluster",
    "needs_docker",
    "run",
    "install",
]
#: The ROCm location a Linux target's activation sets for a ROCm env.
LINUX_ROCM_PATH = "/opt/rocm"
#: Ubuntu release -> codename, for AMD's amdgpu-install package paths
#: (`amdgpu-install/<ver>/ubuntu/{codename}/`): the releases those paths exist for.
UBUNTU_CODENAMES = {"22.04": "jammy", "24.04": "noble"}
#: How Docker Hub's official Ubuntu image may be written (a plain Ubuntu base).
UBUNTU_REPOSITORIES = ("ubuntu", "library/ubuntu", "docker.io/ubuntu", "docker.io/library/ubuntu")


def plain_ubuntu_release(ref: str) -> str | None:
    """ "24.04" for `ubuntu:24.04` (or `ubuntu:noble`, a registry prefix, a digest), None for
    any other image (a rocm/* image, another distribution, no tag)."""
    name = ref.split("@", 1)[0]
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag or repo not in UBUNTU_REPOSITORIES:
        return None
    by_codename = {c: v for v, c in UBUNTU_CODENAMES.items()}
    return by_codename.get(tag, tag)


#: In an image's venv on a pip-SDK release: a link to what `rocm-sdk path --root` says, made at
#: build time (plan.LinkRocmSdkRoot); there is no /opt/rocm.
PIP_SDK_ROCM_LINK = f"{VENV}/rocm"


@dataclass(frozen=True)
class Capabilities:
    """What a target can do, as declared facts (the CLI checks them before calling a builder)."""

    build: bool = True
    push: bool = False  # `envbuilder push` (a registry holds the artifact)
    pull: bool = False  # `envbuilder pull`
    path: bool = False  # build/validate take --path DIR and build takes --force (venv targets)
    no_cache: bool = False  # build takes --no-cache (image targets)
    verify: bool = False  # the lock predicts the artifact's image; build takes --verify
    cluster: bool = False  # can run on a cluster (Slurm; issue 16)
    run: bool = False  # `envbuilder run`/`shell`: a user's command in the built artifact
    needs_docker: bool = False  # building needs a Docker engine (doctor checks it for such envs)
    install: bool = False  # build and pull install the artifact on this host (InstallOptions)
    host: tuple[str, ...] = ("linux",)  # where `envbuilder build` runs for it: linux, windows


@dataclass(frozen=True)
class TableContext:
    """What a descriptor's `parse` gets: the env's merged `[env.NAME.<target>]` table (unknown keys
    and wrong types already dropped and reported, by the key schema), the env-level values a table
    may default from (None when missing or invalid: reported already), and where to report."""

    target: str
    env: str
    raw: Mapping[str, Any]
    accelerator: str | None
    python: str | None
    rocm: str | None
    sink: FindingSink

    def values(self, table: type[TargetTable]) -> dict[str, Any]:
        """The record's keys as written, each one not written at the default the record
        declares (a parser restates no default; a key added to the record reaches it). A value
        not in the form its key declares (a pattern, choices, a range) is reported."""
        values = {}
        declared = {k.name: k for k in records.fields_of(table)}
        for f in dataclasses.fields(table):
            if f.name in self.raw:
                values[f.name] = self.raw[f.name]
                if f.name in declared:  # the form the record declares (a pattern, choices)
                    wrong = declared[f.name].problem(self.raw[f.name])
                    self.report(
                        f.name, f"{records.shown(self.raw[f.name])} {wrong}" if wrong else None
                    )
            elif f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                values[f.name] = f.default_factory()
        return values

    def report(self, key: str, problem: str | None, severity: Severity = "error") -> None:
        """A finding on `env.NAME.<target>.<key>` when `problem` is not None."""
        if problem is not None:
            self.sink.env_finding(self.env, (self.target, key), problem, severity)


@dataclass(frozen=True)
class CheckContext:
    """What a descriptor's `checks` get from `envbuilder check`: the compatibility data, the
    spec's indexes, and where to report (findings on `env.NAME.<key>`)."""

    compat: Compat
    indexes: Mapping[str, Index]
    sink: FindingSink


#: A target's own compatibility rules for one env that lists it (`TargetDescriptor.checks`).
EnvChecks = Callable[[EnvSpec, CheckContext], None]
#: A target's rules across the envs that list it (names that must be unique on one machine).
SpecChecks = Callable[[Sequence[EnvSpec], FindingSink], None]
#: The spec key a variable of `variables(env)` comes from, where the target has its own
#: (windows: HIP_PATH from `hip_path`); None: the generic rules decide (env, rccl).
VariableKey = Callable[[EnvSpec, str], tuple[str, ...] | None]


def no_env_checks(env: EnvSpec, ctx: CheckContext) -> None:
    """For targets with no rules of their own."""


def no_spec_checks(envs: Sequence[EnvSpec], sink: FindingSink) -> None:
    """For targets with no rules across envs."""


def no_variable_key(env: EnvSpec, name: str) -> tuple[str, ...] | None:
    """For targets whose variables all come from the env's `env` and `rccl` tables."""
    return None


def requirement_for(env: EnvSpec, target: str, name: str) -> Requirement | None:
    """The first of the target's packages that is project `name` (PEP 503 compared), or None."""
    want = canonicalize_name(name)
    for spec in env.packages_for(target):
        req = Requirement(spec)
        if canonicalize_name(req.name) == want:
            return req
    return None


def packages_key(env: EnvSpec, target: str) -> tuple[str, ...]:
    """Where the target's packages are set: its own table's, else the env's."""
    return (target, "packages") if target in env.target_packages else ("packages",)


def python_key(env: EnvSpec, target: str) -> tuple[str, ...]:
    """Where the target's Python is set: its own table's `python` when that differs from the
    env's, else the env's."""
    return (target, "python") if env.python_for(target) != env.python else ("python",)


def check_base_python(
    env: EnvSpec, path: tuple[str, ...], ref: str, interpreter: str | None, ctx: CheckContext
) -> None:
    """An image target's base: its python3 must be the env's Python (the venv is made with it),
    and a ROCm dev image must be of the env's ROCm release."""
    known = ctx.compat.base_image(ref)
    if known is not None and interpreter == "python3" and known.python != env.python:
        ctx.sink.env_finding(
            env.name,
            path,
            f"{ref}'s python3 is {known.python}, but the env's "
            f"Python is {env.python} (the venv is made with the base image's "
            f"python3); use a base with Python {env.python} or set python = "
            f'"{known.python}"',
        )
    m = re.fullmatch(r"rocm/dev-ubuntu-[0-9.]+:([0-9]+(?:\.[0-9]+)*)(?:-.*)?", ref)
    if m and env.rocm and not same_release(m.group(1), env.rocm):
        ctx.sink.env_finding(
            env.name,
            path,
            f"{ref} is ROCm {m.group(1)}, but the env's rocm is "
            f"{env.rocm}; use the image of that release",
            "warning",
        )


def same_release(a: str, b: str) -> bool:
    """Whether two release strings agree as far as both go ("7.14" and "7.14.1" do)."""
    va, vb = Version(a), Version(b)
    n = min(len(va.release), len(vb.release))
    return va.release[:n] == vb.release[:n]


@dataclass(frozen=True)
class InstallOptions:
    """Capability `install`: how a build or pull installs its artifact on this host (wsl2 on
    Windows: the `.wsl` becomes a distro)."""

    replace: bool = False  # an installed artifact of the same name is removed first
    location: Path | None = None  # where installed artifacts' disks go (None: the target's default)


@dataclass(frozen=True)
class BuildOptions:
    """What `envbuilder build` passes to a builder (each field needs a capability)."""

    path: Path | None = None  # capability `path`: where the venv goes
    force: bool = False  # capability `path`: replace a venv envbuilder did not make
    no_cache: bool = False  # capability `no_cache`: build every step again
    verify: bool = False  # capability `verify`: rebuild without cache, fail unless predicted
    install: InstallOptions = field(default_factory=InstallOptions)  # capability `install`


@dataclass(frozen=True)
class ValidateOptions:
    """What `envbuilder validate` passes to the probe (and, for venv targets, where the venv is)."""

    level: str = "quick"
    expect: str | None = None  # defaults to the env's accelerator
    repeat: int = 1
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    timeout_s: float | None = None
    path: Path | None = None  # capability `path`: the venv to validate
    # validate an artifact that is not the lock's (its marker, label or sha256 names another),
    # which is refused otherwise (as `run` refuses it); the report says so (`other_lock`)
    allow_other_lock: bool = False
    find_batch: bool = False  # the probe's --find-batch (its train check)


@dataclass(frozen=True)
class RunOptions:
    """What `envbuilder run` and `shell` pass: the user's command (empty: an interactive shell)."""

    command: tuple[str, ...] = ()
    tty: bool = False  # stdin and stdout are a terminal: the container gets one (docker -t)
    path: Path | None = None  # capability `path`: the venv to run in
    workspace: Path | None = None  # image targets: this folder is mounted at /workspace


@dataclass(frozen=True)
class RunCommand:
    """How to run a command in an artifact: the argv envbuilder starts (with `environment`
    as its whole environment, or envbuilder's own when None) and `line`, the same as one line
    a user pastes into `shell` ("sh": a POSIX shell; "powershell")."""

    argv: tuple[str, ...]
    line: str
    shell: str = "sh"
    environment: Mapping[str, str] | None = None
    #: what `run` says (EngineError, nothing run) when argv[0] is not on PATH: why the target
    #: needs that program and how to get it; None: the plain "no such program" (exit 127).
    #: `--print` needs no program.
    requires: str | None = None


@dataclass(frozen=True)
class PushOptions:
    """What `envbuilder push` passes: the registry, HOST[:PORT]/PATH (env name appended)."""

    registry: str


@dataclass(frozen=True)
class PullOptions:
    """What `envbuilder pull` passes (the lock says what to pull)."""

    install: InstallOptions = field(default_factory=InstallOptions)  # capability `install`


@dataclass(frozen=True)
class Artifact:
    """What a build produced: an image id, a .wsl path, a venv path; with its digest/sha256."""

    target: str
    env: str
    reference: str  # image tag, file path or venv path
    digest: str | None = None  # image id / sha256 of the file / None for a venv
    details: dict[str, str] = field(default_factory=dict)


class Builder(Protocol):
    """Builds a target's artifact from the locked, rendered definition and validates it by
    running the probe inside it. Builders never print: they report through `progress`."""

    def build(
        self, project: Project, env: EnvSpec, options: BuildOptions, progress: ProgressFn
    ) -> Artifact: ...

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        """Run the probe inside the built artifact; return the path of the JSON report written
        to project.report(env.name, target). Raises ValidationError if it cannot run."""
        ...


@runtime_checkable
class RegistryBuilder(Builder, Protocol):
    """A builder of a target with the `push` and `pull` capabilities."""

    def push(
        self, project: Project, env: EnvSpec, options: PushOptions, progress: ProgressFn
    ) -> str:
        """Push the artifact; record and return its repository digest reference."""
        ...

    def pull(
        self, project: Project, env: EnvSpec, options: PullOptions, progress: ProgressFn
    ) -> str:
        """Pull what the lock records; return what was made (image id, path and sha256)."""
        ...


@runtime_checkable
class DpkgStatusBuilder(Builder, Protocol):
    """A builder whose artifact holds a dpkg database: the SBOM's deb purls say each package's
    own `Architecture` from it (docs/sbom.md)."""

    def dpkg_status(self, artifact: Artifact) -> bytes | None:
        """The artifact's /var/lib/dpkg/status, or None when it cannot be read."""
        ...


@runtime_checkable
class LocalImageBuilder(Builder, Protocol):
    """A builder whose artifact is an image in the local engine (what a cluster's nodes sharing
    this engine run when no pushed image is recorded)."""

    def local_image(self, env: str, pylock_sha256: str) -> str | None:
        """The id of the local image built from that pylock, or None."""
        ...


@runtime_checkable
class VenvBuilderProtocol(Builder, Protocol):
    """A builder whose artifact is a venv at a path (`--path DIR`, else its default folder)."""

    def venv_path(self, project: Project, env: EnvSpec, path: Path | None = None) -> Path:
        """Where the env's venv is, absolute."""
        ...


@runtime_checkable
class RunnableBuilder(Builder, Protocol):
    """A builder of a target with the `run` capability."""

    def command(
        self, project: Project, env: EnvSpec, options: RunOptions, progress: ProgressFn
    ) -> RunCommand:
        """The command line that runs `options.command` in the built artifact with what
        `validate` gives the probe there (device flags, groups, mounts, variables); raises
        (ValidationError, LockError) for an artifact that is missing or not the lock's."""
        ...


def no_base_image(env: EnvSpec) -> str | None:
    """For targets that build on no image (venvs)."""
    return None


def linux_variables(env: EnvSpec) -> dict[str, str]:
    """The variables a Linux venv's activation sets, in a fixed order: ROCM_PATH (ROCm envs
    only; on a pip-SDK release the root is inside the venv, known once it is installed, so the
    venv builder adds ROCM_PATH from `rocm-sdk path --root` after installing), then the spec's
    `env`, then its RCCL/NCCL settings."""
    return _linux(env, None)


def image_variables(env: EnvSpec) -> dict[str, str]:
    """As linux_variables, for an image whose venv is /opt/venv: on a pip-SDK release ROCM_PATH
    names the link the build makes to `rocm-sdk path --root` (PIP_SDK_ROCM_LINK)."""
    return _linux(env, PIP_SDK_ROCM_LINK)


def _linux(env: EnvSpec, sdk_root: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if env.accelerator == "rocm" and env.rocm:
        root = sdk_root if sdk_release(env) is not None else LINUX_ROCM_PATH
        if root is not None:
            out["ROCM_PATH"] = root
    out.update(env.env)
    out.update(env.rccl)
    return checked_variables(out)


def no_system_file(env: EnvSpec) -> str | None:
    """For targets that install nothing besides their wheels."""
    return None


def activation_step(variables: Mapping[str, str], scripts: tuple[str, ...]) -> WriteActivation:
    """The env's block for each of a venv's activate `scripts` (file names as the venv's maker
    writes them: `python -m venv` Activate.ps1, uv activate.ps1), the same blocks
    `envbuilder build` writes (envbuilder.core.activate)."""
    values = dict(variables)
    makers = {
        "activate": activate.bash_block,
        "activate.ps1": activate.powershell_block,
        "activate.bat": activate.cmd_activate_block,
        "deactivate.bat": activate.cmd_deactivate_block,
    }
    blocks = tuple(
        (
            name,
            tuple(makers[name.lower()](values).replace("\r\n", "\n").splitlines())
            if values
            else (),
            "crlf" if name.endswith(".bat") else "auto",
        )
        for name in scripts
    )
    return WriteActivation(activate.BEGIN, activate.END, blocks, tuple(values.items()))


@dataclass(frozen=True)
class TargetDescriptor:
    """Everything envbuilder knows about one target, in one place (see the module docstring)."""

    name: str  # "docker": the spec's target name; lock, report and folder names use it
    summary: str  # one line for --help
    table: type[TargetTable]  # the [env.NAME.<name>] dataclass
    keys: Schema  # its key schema (the spec loader checks keys and types with it): table_keys
    parse: Callable[[TableContext], TargetTable | None]  # typed table from the merged raw one
    platforms: tuple[str, ...]  # uv --python-platform values; the first is the lock's
    os: Literal["linux", "windows"]  # what the env's packages run on
    builder: str  # "module:Class" of its Builder, imported when a command needs it
    capabilities: Capabilities = Capabilities()
    base_image: Callable[[EnvSpec], str | None] = no_base_image  # the base image to pin
    #: a system file the target installs, pinned in the lock ("<url>#sha256=<hex>")
    system_file: Callable[[EnvSpec], str | None] = no_system_file
    variables: Callable[[EnvSpec], dict[str, str]] = linux_variables  # its activation's
    variable_quoting: VariableQuoting = ()  # where variables are written, and the quoting
    plan: Callable[[EnvSpec, PlanInputs], Plan] | None = None  # the target's typed plan
    templates: tuple[tuple[str, str], ...] = ()  # (output file, template) rendered per env
    template_package: tuple[str, str] = ("envbuilder", "data/templates")  # jinja2 PackageLoader
    template_globals: Mapping[str, Any] = field(default_factory=dict)  # extra template values
    output_dir: str | None = None  # committed folder of rendered files, beside the spec
    #: which GPU stack the env's packages meet there: the Linux driver (docker, native), WSL's
    #: /dev/dxg bridge, or the Windows driver (what the GPU and HSA rules go by)
    gpu_stack: Literal["linux", "wsl", "windows"] = "linux"
    checks: EnvChecks = no_env_checks  # the target's own rules (`envbuilder check`)
    checks_across: SpecChecks = no_spec_checks  # its rules across envs
    variable_key: VariableKey = no_variable_key  # where its own variables come from
    #: with the `run` capability: what `envbuilder run` starts in its artifact and with which
    #: devices, groups and variables (one paragraph of `envbuilder run --help`)
    run_help: str = ""

    @property
    def on_windows(self) -> bool:
        """Whether the env's packages run on Windows (no RCCL, no HSA variables there)."""
        return self.os == "windows"

    @property
    def lock_platform(self) -> str:
        """The uv platform the target's pylock is resolved for."""
        return self.platforms[0]

    @property
    def rendered(self) -> bool:
        """Whether `envbuilder render` writes files for this target."""
        return bool(self.templates) and self.output_dir is not None

    def rendered_folder(self, project: Project, env: str) -> Path:
        """Where env `env`'s rendered files are: <project>/<output_dir>/<env>."""
        if self.output_dir is None:
            raise ValueError(f"target {self.name} has no rendered files")
        return project.root / self.output_dir / env

    def has(self, capability: Capability) -> bool:
        return bool(getattr(self.capabilities, capability))

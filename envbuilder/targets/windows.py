"""The `windows` target: a venv on native Windows (AMD's Windows PyTorch wheels), made by
`envbuilder build` on Windows or, without envbuilder, by the rendered `windows/<env>/setup.ps1`.
Its builder is `envbuilder.builders.venv`."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder import activate, grammar, quoting
from envbuilder.errors import RenderError
from envbuilder.model import EnvSpec, TargetTable
from envbuilder.pipsdk import sdk_release
from envbuilder.plan import (
    CreateVenv,
    FindPython,
    InstallPylock,
    Plan,
    PlanInputs,
    Step,
)
from envbuilder.project import pylock_name
from envbuilder.targets import registry
from envbuilder.targets.base import (
    Capabilities,
    Schema,
    TableContext,
    TargetDescriptor,
    activation_step,
)

NAME = "windows"
#: The rendered PowerShell script upgrades pip to at least this (pip installs pylock.toml from 26).
WINDOWS_PIP = "pip>=26"
#: Does nothing on Windows (rocm-reference.md, "Native Windows"); never written there.
WINDOWS_IGNORED = frozenset({"HSA_OVERRIDE_GFX_VERSION"})


@dataclass(frozen=True)
class WindowsTable(TargetTable):
    """[env.NAME.windows]"""

    python: str  # "3.12"; found with the py launcher
    hip_path: str | None = None  # defaults to C:\Program Files\AMD\ROCm\<major.minor>\

    def venv_python(self, env_python: str) -> str:
        return self.python


#: `packages` and `index_pins` replace the env-wide ones for this target (the spec loader keeps
#: them on EnvSpec.target_packages / target_index_pins).
KEYS: Schema = {
    "python": "str",
    "hip_path": "str",
    "packages": "list[str]",
    "index_pins": "map[str]",
}


def parse(ctx: TableContext) -> WindowsTable:
    py = ctx.raw.get("python", ctx.python)
    if py is not None and not grammar.PYTHON_RE.fullmatch(py):
        ctx.report("python", f'{py!r} is not a Python major.minor version; write e.g. "3.12"')
    hip_path = ctx.raw.get("hip_path")
    if hip_path is not None:
        ctx.report("hip_path", grammar.windows_path_problem(hip_path))
    return WindowsTable(python=py or "", hip_path=hip_path)


def default_hip_path(rocm: str) -> str:
    r"""Where the HIP SDK installs on Windows: C:\Program Files\AMD\ROCm\<major.minor>\."""
    major_minor = ".".join(rocm.split(".")[:2])
    return f"C:\\Program Files\\AMD\\ROCm\\{major_minor}\\"


def variables(env: EnvSpec) -> dict[str, str]:
    """The variables the venv's activation sets, in a fixed order: HIP_PATH (ROCm envs only, not
    on a pip-SDK release),
    then the spec's `env` without what does nothing on Windows; no RCCL settings (Windows' torch
    has no RCCL)."""
    out: dict[str, str] = {}
    # A pip-SDK release has no HIP SDK install: its root is inside the venv, where
    # `rocm-sdk path --root` finds it (a venv placed at build time has no fixed path to write).
    if env.accelerator == "rocm" and env.rocm and sdk_release(env) is None:
        table = env.table(WindowsTable)
        out["HIP_PATH"] = (
            table.hip_path if table and table.hip_path else None
        ) or default_hip_path(env.rocm)
    out.update(env.env)
    for name in WINDOWS_IGNORED:
        out.pop(name, None)
    return activate.checked_variables(out)


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    """Find Python with the py launcher, make the venv, install the pylock with pip (hash
    checked), write the env's variables into the activate scripts."""
    table = env.table(WindowsTable)
    if table is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.windows] table")
    lock = inputs.lock
    pylock = f"lockfiles/{lock.pylock or pylock_name(env.name, NAME)}"
    steps: tuple[Step, ...] = (
        FindPython(table.python),
        CreateVenv("py", ".venv"),
        InstallPylock(WINDOWS_PIP, pylock, lock.pylock_sha256),
        activation_step(
            dict(inputs.variables), ("activate", "Activate.ps1", "activate.bat", "deactivate.bat")
        ),
    )
    return Plan(env.name, NAME, env.description, lock.locked, steps=steps)


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary=(
            "a venv on native Windows (--path DIR), or windows/<env>/setup.ps1 without envbuilder"
        ),
        table=WindowsTable,
        keys=KEYS,
        parse=parse,
        platforms=("x86_64-pc-windows-msvc",),
        os="windows",
        builder="envbuilder.builders.venv:WindowsVenvBuilder",
        capabilities=Capabilities(path=True, run=True, host=("windows",)),
        variables=variables,
        variable_quoting=(
            ("the venv's activate.bat", quoting.cmd_set_refusal),
            ("setup.ps1 and the venv's Activate.ps1", quoting.ps_refusal),
            ("the venv's activate script", quoting.sh_refusal),
        ),
        plan=plan,
        templates=(
            ("setup.ps1", "windows/setup.ps1.j2"),
            ("README.md", "windows/README.md.j2"),
        ),
        output_dir="windows",
    )
)

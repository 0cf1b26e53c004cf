"""The `windows` target: a venv on native Windows (AMD's Windows PyTorch wheels), made by
`envbuilder build` on Windows or, without envbuilder, by the rendered `windows/<env>/setup.ps1`.
Its builder is `envbuilder.builders.venv`."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from envbuilder.core import activate, grammar, quoting
from envbuilder.core.compat import Compat, Gpu, WindowsWheels
from envbuilder.core.errors import RenderError
from envbuilder.core.model import EnvSpec, FindingSink, Index, TargetTable
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import (
    CreateVenv,
    FindPython,
    InstallPylock,
    Plan,
    PlanInputs,
    Step,
)
from envbuilder.core.project import pylock_name
from envbuilder.core.records import key
from envbuilder.targets import registry
from envbuilder.targets.base import (
    PACKAGE_KEYS,
    Capabilities,
    CheckContext,
    Schema,
    TableContext,
    TargetDescriptor,
    activation_step,
    packages_key,
    python_key,
    requirement_for,
    table_keys,
)

NAME = "windows"
#: The rendered PowerShell script upgrades pip to at least this: `pip install -r pylock.toml`
#: first shipped in pip 26.1 (2026-04-26; pip's NEWS.rst: "Add experimental support to read
#: requirements from standardized pylock.toml files (-r pylock.toml)", pypa/pip#13876); pip
#: 26.0 reads the file as a requirements.txt and fails.
WINDOWS_PIP = "pip>=26.1"
#: Does nothing on Windows (rocm-reference.md, "Native Windows"); never written there.
WINDOWS_IGNORED = frozenset({"HSA_OVERRIDE_GFX_VERSION"})


@dataclass(frozen=True)
class WindowsTable(TargetTable):
    """[env.NAME.windows]: each key declared once (its schema and default follow from it)."""

    python: str = key(
        "the venv's Python as 'X.Y' (e.g. \"3.12\"), found with the py launcher; defaults to the "
        "env's"
    )
    hip_path: str | None = key(
        "where the HIP SDK is installed; defaults to C:\\Program Files\\AMD\\ROCm\\<major.minor>\\",
        default=None,
    )

    def venv_python(self, env_python: str) -> str:
        return self.python


#: `packages` and `index_pins` replace the env-wide ones for this target (the spec loader keeps
#: them on EnvSpec.target_packages / target_index_pins).
KEYS: Schema = table_keys(WindowsTable, *PACKAGE_KEYS)


def parse(ctx: TableContext) -> WindowsTable:
    t = ctx.values(WindowsTable)
    py = t.get("python", ctx.python)
    if py is not None and not grammar.PYTHON_RE.fullmatch(py):
        ctx.report("python", f'{py!r} is not a Python major.minor version; write e.g. "3.12"')
    if t["hip_path"] is not None:
        ctx.report("hip_path", grammar.windows_path_problem(t["hip_path"]))
    return WindowsTable(**{**t, "python": py or ""})


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


# --- the windows target's compatibility rules (`envbuilder check`) ---------------------------


def checks(env: EnvSpec, ctx: CheckContext) -> None:
    """The windows rules for a ROCm env that lists the target: the GPU is covered by AMD's
    native-Windows wheels, the table's Python is one those wheels are built for, and torch is
    AMD's Windows wheel (a URL, or the multi-arch index of 7.14+)."""
    if env.accelerator != "rocm":
        return
    gpu = ctx.compat.gpu(env.gpu) if env.gpu else None
    if gpu is not None:
        _check_gpu(env, gpu, ctx.compat.windows_set(env.rocm) if env.rocm else None, ctx.sink)
    table = env.table(WindowsTable)
    if table is None:
        return
    wheels = _wheels_for(env, ctx.compat)
    _check_python(env, table.python, ctx.compat, wheels, ctx.sink)
    if env.rocm and ctx.compat.windows_set(env.rocm) is None:
        known = ", ".join(w.rocm for w in ctx.compat.windows_wheels)
        ctx.sink.env_finding(
            env.name,
            ("rocm",),
            f"AMD publishes native-Windows PyTorch wheels for ROCm "
            f"{known}, not {env.rocm}; the windows target uses those wheels' own ROCm",
            "warning",
        )
    _check_torch(env, ctx, wheels)


def variable_key(env: EnvSpec, name: str) -> tuple[str, ...] | None:
    """HIP_PATH comes from the table's `hip_path` when it sets one."""
    table = env.table(WindowsTable)
    if name == "HIP_PATH" and table and table.hip_path:
        return (NAME, "hip_path")
    return None


def _check_gpu(env: EnvSpec, gpu: Gpu, wheels: WindowsWheels | None, sink: FindingSink) -> None:
    """The Windows wheel set of the env's release decides (7.14+: its own gfx list); without
    one, the GPU table's `windows` flag (AMD's gfx110X, gfx1151, gfx120X wheels up to 7.2.x)."""
    if wheels.covers(gpu) if wheels else gpu.windows:
        return
    which = (
        f"for ROCm {wheels.rocm} ({', '.join(wheels.gfx)})"
        if wheels and wheels.gfx
        else "(gfx110X, gfx1151, gfx120X)"
    )
    sink.env_finding(
        env.name,
        ("targets",),
        f"{env.gpu} ({gpu.gfx}) is not covered by AMD's native-Windows "
        f"PyTorch wheels {which}; remove 'windows' or use wsl2/docker",
    )


def _wheels_for(env: EnvSpec, compat: Compat) -> WindowsWheels | None:
    """The Windows wheel set the target uses: the one its torch URL points into, else the one
    of the env's ROCm release line."""
    req = requirement_for(env, NAME, "torch")
    if req is not None and req.url is not None:
        url = req.url
        hit = next(
            (w for w in compat.windows_wheels if not w.index and url.startswith(w.url)), None
        )
        if hit is not None:
            return hit
    return compat.windows_set(env.rocm) if env.rocm else None


def _py_versions(spec: SpecifierSet) -> list[str]:
    """The Python major.minor versions 3.8 - 3.15 a specifier admits ("3.11", "3.12")."""
    return [f"3.{m}" for m in range(8, 16) if spec.contains(f"3.{m}.0", prereleases=True)]


def _check_python(
    env: EnvSpec, python: str, compat: Compat, wheels: WindowsWheels | None, sink: FindingSink
) -> None:
    sets = [wheels] if wheels else [w for w in compat.windows_wheels if not w.index]
    if any(w.python.contains(python + ".0", prereleases=True) for w in sets):
        return
    ok = list(dict.fromkeys(v for w in sets for v in _py_versions(w.python)))
    which = f" for ROCm {wheels.rocm}" if wheels else ""
    table = f"[env.{env.name}.windows]"
    sink.env_finding(
        env.name,
        python_key(env, NAME),
        f"Python {python}: "
        f"AMD's native-Windows PyTorch wheels{which} need Python {' or '.join(ok)}; "
        f'set {table} python = "{ok[-1] if ok else "3.12"}" or drop the windows '
        "target",
    )


def _check_torch(env: EnvSpec, ctx: CheckContext, wheels: WindowsWheels | None) -> None:
    compat = ctx.compat
    table = f"[env.{env.name}.windows]"
    req = requirement_for(env, NAME, "torch")
    pin = env.index_pins_for(NAME).get("torch")
    if req is None:
        example = wheels if wheels and not wheels.index else compat.windows_wheels[0]
        ctx.sink.env_finding(
            env.name,
            packages_key(env, NAME),
            "no torch for the windows target; "
            f"give it AMD's Windows wheel, e.g. {table} packages = "
            f'["torch @ {example.wheel_urls()[0]}"]',
            "warning",
        )
    elif req.url is None and pin is not None and not _is_amd_index(compat, ctx.indexes.get(pin)):
        ctx.sink.env_finding(
            env.name,
            (NAME, "index_pins"),
            "torch for windows is pinned to a "
            f"Linux wheel index; set {table} packages to AMD's Windows wheel and "
            "index_pins = {}",
        )
    elif req.url is not None and any(
        req.url.startswith(w.url) and w.unverified for w in compat.windows_wheels
    ):
        ctx.sink.env_finding(
            env.name,
            packages_key(env, NAME),
            "AMD's Windows wheel URLs are unverified here (see envbuilder/data/torch.toml)",
            "warning",
        )


def _is_amd_index(compat: Compat, index: Index | None) -> bool:
    """Whether `index` is the multi-arch index AMD's 7.14+ Windows wheels come from."""
    return index is not None and any(
        w.index and index.url.rstrip("/") == w.url.rstrip("/") for w in compat.windows_wheels
    )


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
        gpu_stack="windows",
        checks=checks,
        variable_key=variable_key,
        run_help="the Windows venv (--path DIR, on Windows), with the env's variables and the "
        "venv first on PATH, as its Activate.ps1 sets them.",
    )
)

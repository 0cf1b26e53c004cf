"""The `native` target: a venv on a Linux host (e.g. a machine with ROCm installed), made by
`envbuilder build` with the Python uv finds. It has a plan like the other targets (which its
builder, `envbuilder.builders.venv`, carries out) and no rendered files."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder.core import grammar, quoting
from envbuilder.core.errors import RenderError
from envbuilder.core.model import EnvSpec, TargetTable
from envbuilder.core.plan import CreateVenv, FindPython, Plan, PlanInputs, Step, SyncPylock
from envbuilder.core.project import pylock_name, venv_folder
from envbuilder.core.records import key
from envbuilder.targets import registry
from envbuilder.targets.base import (
    Capabilities,
    Schema,
    TableContext,
    TargetDescriptor,
    activation_step,
    table_keys,
)

NAME = "native"


@dataclass(frozen=True)
class NativeTable(TargetTable):
    """[env.NAME.native]: each key declared once (its schema follows from it)."""

    python: str = key(
        "the venv's Python as 'X.Y', found with uv's interpreter discovery; defaults to the env's"
    )

    def venv_python(self, env_python: str) -> str:
        return self.python


KEYS: Schema = table_keys(NativeTable)


def parse(ctx: TableContext) -> NativeTable:
    t = ctx.values(NativeTable)
    py = t.get("python", ctx.python)
    if py is not None and not grammar.PYTHON_RE.fullmatch(py):
        ctx.report("python", f'{py!r} is not a Python major.minor version; write e.g. "3.12"')
    return NativeTable(**{**t, "python": py or ""})


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    """Find Python with uv, make the venv (default folder; --path moves it), sync it to the
    pylock offline from the wheel cache (hash checked), write the env's variables into the
    activate scripts uv writes."""
    table = env.table(NativeTable)
    if table is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.native] table")
    lock = inputs.lock
    steps: tuple[Step, ...] = (
        FindPython(table.python),
        CreateVenv("uv", venv_folder(env.name, NAME)),
        SyncPylock(f"lockfiles/{lock.pylock or pylock_name(env.name, NAME)}", lock.pylock_sha256),
        activation_step(dict(inputs.variables), ("activate", "activate.ps1")),
    )
    return Plan(env.name, NAME, env.description, lock.locked, steps=steps)


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary="a venv on this Linux host (--path DIR, default .envbuilder/venvs/<env>-native)",
        table=NativeTable,
        keys=KEYS,
        parse=parse,
        platforms=("x86_64-manylinux_2_28",),
        os="linux",
        builder="envbuilder.builders.venv:NativeVenvBuilder",
        capabilities=Capabilities(path=True, cluster=True, run=True),
        variable_quoting=(
            ("the venv's activate script", quoting.sh_refusal),
            ("the venv's Activate.ps1", quoting.ps_refusal),
        ),
        plan=plan,
        run_help="the venv (--path DIR as for build), with the env's variables and the venv "
        "first on PATH, as its activate script sets them.",
    )
)

"""The `native` target: a venv on a Linux host (e.g. a machine with ROCm installed), made by
`envbuilder build` with the Python uv finds. It has no rendered files. Its builder is
`envbuilder.builders.venv`."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder import grammar, quoting
from envbuilder.model import TargetTable
from envbuilder.targets import registry
from envbuilder.targets.base import Capabilities, Schema, TableContext, TargetDescriptor

NAME = "native"


@dataclass(frozen=True)
class NativeTable(TargetTable):
    """[env.NAME.native]"""

    python: str  # found with uv's interpreter discovery

    def venv_python(self, env_python: str) -> str:
        return self.python


KEYS: Schema = {"python": "str"}


def parse(ctx: TableContext) -> NativeTable:
    py = ctx.raw.get("python", ctx.python)
    if py is not None and not grammar.PYTHON_RE.fullmatch(py):
        ctx.report("python", f"{py!r} is not a Python major.minor version; write e.g. \"3.12\"")
    return NativeTable(python=py or "")


DESCRIPTOR = registry.register(TargetDescriptor(
    name=NAME,
    summary="a venv on this Linux host (--path DIR, default .envbuilder/venvs/<env>-native)",
    table=NativeTable,
    keys=KEYS,
    parse=parse,
    platforms=("x86_64-manylinux_2_28",),
    os="linux",
    builder="envbuilder.builders.venv:NativeVenvBuilder",
    capabilities=Capabilities(path=True, cluster=True),
    variable_quoting=(("the venv's activate script", quoting.sh_refusal),
                      ("the venv's Activate.ps1", quoting.ps_refusal)),
))

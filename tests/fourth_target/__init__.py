"""A throw-away fourth target, "note", for tests/test_fourth_target.py (issue 14, point 2): a
spec table, a template and a builder that writes a file, added by registering a descriptor.
Nothing in envbuilder knows about it; importing this package registers it."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder import grammar
from envbuilder.errors import RenderError
from envbuilder.model import EnvSpec, TargetTable
from envbuilder.plan import Plan, PlanInputs, WriteFile
from envbuilder.targets import registry
from envbuilder.targets.base import TableContext, TargetDescriptor

NAME = "note"


@dataclass(frozen=True)
class NoteTable(TargetTable):
    """[env.NAME.note]"""

    message: str = "hello"


def parse(ctx: TableContext) -> NoteTable:
    message = ctx.raw.get("message", "hello")
    ctx.report("message", grammar.text_problem(message))
    return NoteTable(message=message)


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    table = env.table(NoteTable)
    if table is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.note] table")
    steps = (WriteFile("note.txt", (table.message, f"python {env.python}")),)
    return Plan(env.name, NAME, env.description, inputs.lock.locked, steps=steps)


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary="a note file, dist/<env>.note (a test target)",
        table=NoteTable,
        keys={"message": "str"},
        parse=parse,
        platforms=("x86_64-manylinux_2_28",),
        os="linux",
        builder="fourth_target.builder:NoteBuilder",
        plan=plan,
        templates=(("note.txt", "note.txt.j2"),),
        template_package=("fourth_target", "templates"),
        output_dir="notes",
    )
)

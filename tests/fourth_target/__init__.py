"""A throw-away fourth target, "note", for tests/targets/test_fourth_target.py (issue 14, point 2):
a
spec table, a template and a builder that writes a file, added by registering a descriptor.
Nothing in envbuilder knows about it; importing this package registers it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envbuilder.core import grammar
from envbuilder.core.errors import RenderError
from envbuilder.core.model import EnvSpec, FindingSink, TargetTable
from envbuilder.core.plan import Plan, PlanInputs, WriteFile
from envbuilder.core.records import key
from envbuilder.targets import registry
from envbuilder.targets.base import CheckContext, TableContext, TargetDescriptor, table_keys

NAME = "note"


@dataclass(frozen=True)
class NoteTable(TargetTable):
    """[env.NAME.note]"""

    message: str = key("what the note says", default="hello")


def parse(ctx: TableContext) -> NoteTable:
    t = ctx.values(NoteTable)  # the keys as written, the record's defaults for the others
    ctx.report("message", grammar.text_problem(t["message"]))
    return NoteTable(**t)


def plan(env: EnvSpec, inputs: PlanInputs) -> Plan:
    table = env.table(NoteTable)
    if table is None:
        raise RenderError(f"env {env.name!r} has no [env.{env.name}.note] table")
    steps = (WriteFile("note.txt", (table.message, f"python {env.python}")),)
    return Plan(env.name, NAME, env.description, inputs.lock.locked, steps=steps)


def checks(env: EnvSpec, ctx: CheckContext) -> None:
    """The target's own rule, run by `envbuilder check` through the descriptor: a note is not
    for GPU envs (a warning, so the env still checks)."""
    if env.accelerator != "cpu":
        ctx.sink.env_finding(
            env.name, ("targets",), f"a note cannot use the {env.accelerator} GPU", "warning"
        )


def checks_across(envs: Sequence[EnvSpec], sink: FindingSink) -> None:
    """Across the envs that list it: two notes may not say the same."""
    seen: dict[str, str] = {}
    for env in envs:
        table = env.table(NoteTable)
        if table is None:
            continue
        if table.message in seen:
            sink.env_finding(
                env.name, (NAME, "message"), f"says what env {seen[table.message]!r} says"
            )
        seen.setdefault(table.message, env.name)


DESCRIPTOR = registry.register(
    TargetDescriptor(
        name=NAME,
        summary="a note file, dist/<env>.note (a test target)",
        table=NoteTable,
        keys=table_keys(NoteTable),
        parse=parse,
        platforms=("x86_64-manylinux_2_28",),
        os="linux",
        builder="fourth_target.builder:NoteBuilder",
        plan=plan,
        templates=(("note.txt", "note.txt.j2"),),
        template_package=("fourth_target", "templates"),
        output_dir="notes",
        checks=checks,
        checks_across=checks_across,
    )
)

"""Records declared once: a dataclass's fields, with a `key(...)` each, are the record's table.

One declaration of a field gives everything a record's file or JSON form needs (issue 33):

    @dataclass(frozen=True)
    class TargetLock:
        python: str = key("the env's Python, as 'X.Y'", pattern=r"3\\.[0-9]{1,2}",
                          form="a Python version like '3.12'")
        base_source: str | None = key("the registry the base digest was read from", default=None)

    check_table(data, fields_of(TargetLock), where, fix)   strict reading: unknown and missing
                                        keys, types, forms, ranges, choices; one message each
                                        (where, key, the value, what would be right, the fix)
    schema_properties(fields_of(TargetLock))   the JSON Schema of the same table
    toml_lines(record, fields_of(TargetLock), value)  the canonical `key = value` lines
    to_json(record) / from_json(TargetLock, data)   the JSON form and back

The type comes from the annotation (`str`, `int`, `float`, `bool`, `tuple[str, ...]`,
`Mapping`/`dict`, each optionally `| None`); `default`/`default_factory` make a key optional.
A key that is not a dataclass field (a digest computed when the table is written) is declared
with `Field(...)` beside the record and passed in with its fields.

Standard library only, and Python 3.10 at run time: the probe (envbuilder.probe, a
zipapp run by whatever Python a target has) declares its options and report records with it,
and its zipapp ships this module.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

#: The metadata key a field's declaration is kept under.
META = "envbuilder.records"

#: How a value's kind is named in messages ("must be an integer", not "a int").
KIND_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    float: "a number",
    list: "an array",
    dict: "a table",
}
#: The JSON Schema type of each kind.
JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    bool: "boolean",
    float: "number",
    list: "array",
    dict: "object",
}

R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class Field:
    """One key of a record's table: what it is, and what a right value looks like."""

    name: str
    kind: type  # str, int, bool, float, list (a TOML array / tuple), dict (a table)
    desc: str
    required: bool = True
    pattern: str | None = None  # a string value must match it whole
    form: str | None = None  # what a right value looks like, for messages
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[object, ...] = ()
    #: extra JSON Schema for the key (a table's own schema), merged over the generated one
    schema: Mapping[str, Any] | None = None
    #: the command-line flag that sets it, where a record is a command's options
    flag: str | None = None
    #: on the command line: "store_true" for a switch, "append" for a repeatable one
    action: str | None = None
    #: on the command line: the value's name in --help, the function that reads the text
    #: (argparse's `type`, raising ArgumentTypeError with what is wrong), and the value an
    #: absent flag gives where the record has no default (a run always has a level; the
    #: command line's is "quick")
    metavar: str | None = None
    arg_type: Callable[[str], Any] | None = None
    arg_default: Any = None
    nullable: bool = False  # `X | None`: its JSON form may be null (last: Fields are positional)

    def problem(self, value: object) -> str | None:
        """What is wrong with a value of the right kind, as "is not <form>"; None if right."""
        if (
            self.pattern is not None
            and isinstance(value, str)
            and not re.fullmatch(self.pattern, value)
        ):
            return f"is not {self.form or 'of the form ' + self.pattern}"
        if self.choices and value not in self.choices:
            return f"is not one of {', '.join(map(repr, self.choices))}"
        if isinstance(value, int) and not isinstance(value, bool):
            low = self.minimum if self.minimum is not None else -(2**63)
            high = self.maximum if self.maximum is not None else 2**63 - 1
            if not low <= value <= high:
                return f"is not {self.form or f'a number from {low} to {high}'}"
        return None


def key(  # noqa: PLR0913 (one keyword per property of a key, as dataclasses.field)
    desc: str,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    pattern: str | None = None,
    form: str | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[object, ...] = (),
    schema: Mapping[str, Any] | None = None,
    flag: str | None = None,
    action: str | None = None,
    metavar: str | None = None,
    arg_type: Callable[[str], Any] | None = None,
    arg_default: Any = None,
) -> Any:
    """A dataclass field declared as a key of its record (see the module's docstring)."""
    spec = {
        "desc": desc,
        "pattern": pattern,
        "form": form,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "schema": schema,
        "flag": flag,
        "action": action,
        "metavar": metavar,
        "arg_type": arg_type,
        "arg_default": arg_default,
    }
    metadata = {META: spec}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def fields_of(cls: type) -> tuple[Field, ...]:
    """The keys of a record class, in declaration order: its fields declared with `key`."""
    hints = typing.get_type_hints(cls)  # each base class's annotations in its own module
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(META)
        if spec is None:
            continue
        optional = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        hint = hints[f.name]
        nullable = type(None) in typing.get_args(hint)
        out.append(
            Field(
                name=f.name,
                kind=_kind(hint),
                required=not optional,
                nullable=nullable,
                **spec,
            )
        )
    return tuple(out)


def _kind(hint: Any) -> type:
    """The value kind of an annotation: `X | None` is X, a Mapping a dict, a tuple a list."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and type(None) in typing.get_args(hint)):
        return _kind(args[0])
    if origin is not None:
        hint = origin
    if isinstance(hint, type) and issubclass(hint, Mapping):
        return dict
    if hint in (tuple, list):
        return list
    if hint in KIND_NAMES:
        return hint  # type: ignore[no-any-return]
    raise TypeError(f"a record key cannot be of type {hint!r}")


def kind_ok(value: object, kind: type) -> bool:
    """`value` is of `kind` as TOML and JSON read it (a bool is no integer; an int is a float)."""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def shown(value: object) -> str:
    """A value as a message shows it: repr, cut at 100 characters."""
    if isinstance(value, str) and len(value) > 100:
        return repr(value[:97] + "...")  # cut inside the quotes: the value still reads as one
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def table_problems(
    data: Mapping[str, Any], keys: tuple[Field, ...], where: str, path: str = ""
) -> list[str]:
    """Every problem of a table against its keys (empty: it is right), each "<where>: <path>.<key>
    ..." (`where` names the file, `path` the table in it, "" for the top level). Unknown keys
    first, then each declared key in order: missing, wrong kind, wrong form."""
    known = {k.name: k for k in keys}
    table = f"{where}: {path}: " if path else f"{where}: "
    problems = [
        f"{table}unknown key {name!r} (known: {', '.join(known)})"
        for name in data
        if name not in known
    ]
    for k in keys:
        name = f"{path}.{k.name}" if path else k.name
        if k.name not in data:
            if k.required:
                problems.append(f"{table}missing key {k.name!r}")
            continue
        value = data[k.name]
        if not kind_ok(value, k.kind):
            what = KIND_NAMES.get(k.kind, k.kind.__name__)
            problems.append(f"{where}: {name} must be {what}, not {value!r}")
            continue
        wrong = k.problem(value)
        if wrong is not None:
            problems.append(f"{where}: {name} = {shown(value)} {wrong}")
    return problems


def schema_properties(keys: tuple[Field, ...], nulls: bool = False) -> dict[str, Any]:
    """The JSON Schema `properties` of a table: each key's type, form, range and choices (an
    array's items hold the form and choices). `nulls`: of the JSON form, where a key that may
    be None is null (in TOML it is left out)."""
    props: dict[str, Any] = {}
    for k in keys:
        kind: Any = JSON_TYPES[k.kind]
        prop: dict[str, Any] = {"type": [kind, "null"] if nulls and k.nullable else kind}
        prop["description"] = k.desc
        value = _value_schema(k)
        if k.kind is list and value:
            prop["items"] = value
        else:
            prop.update(value)
            if nulls and k.nullable and "enum" in prop:
                prop["enum"] = [*prop["enum"], None]
        props[k.name] = {**prop, **(k.schema or {})}
    return props


def _value_schema(k: Field) -> dict[str, Any]:
    """A value's (an array's item's) pattern, choices and range."""
    out: dict[str, Any] = {}
    if k.pattern is not None:
        # named groups are Python's alone: JSON Schema's regexes are ECMA-262
        out["pattern"] = "^(?:" + re.sub(r"\(\?P<\w+>", "(?:", k.pattern) + ")$"
    if k.choices:
        out["enum"] = list(k.choices)
    if k.minimum is not None:
        out["minimum"] = k.minimum
    if k.maximum is not None:
        out["maximum"] = k.maximum
    return out


def schema_required(keys: tuple[Field, ...]) -> list[str]:
    return [k.name for k in keys if k.required]


def toml_lines(record: object, keys: tuple[Field, ...], value: Callable[[Any], str]) -> list[str]:
    """`key = value` for each scalar key of `record` that has a value (None is left out), in
    the order the keys are declared (a field's name is a bare TOML key); `value` writes one
    value: the caller's TOML library, since this module stays standard library for the probe."""
    lines = []
    for k in keys:
        item = getattr(record, k.name)
        if item is not None and k.kind not in (dict, list):
            lines.append(f"{k.name} = {value(item)}")
    return lines


def to_json(record: object) -> dict[str, Any]:
    """The record's JSON form: every declared key, tuples as lists, mappings as dicts."""
    return {k.name: _jsonable(getattr(record, k.name)) for k in fields_of(type(record))}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def to_argv(record: object, names: Collection[str] | None = None) -> list[str]:
    """The command line that gives `record` (its keys in `names`, when given): each key with a
    flag, in declaration order, unless its value is the record's default (or None, false or
    empty); a repeatable key once per item, a mapping's items as `key=value`, a switch as the
    flag alone."""
    argv: list[str] = []
    defaults = {f.name: f.default for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    for k in fields_of(type(record)):
        if names is not None and k.name not in names:
            continue
        value = getattr(record, k.name)
        if k.flag is None or value is None or value is False or value == defaults[k.name]:
            continue
        if isinstance(value, Mapping):
            value = [f"{name}={item}" for name, item in value.items()]
        if k.action == "store_true":
            argv.append(k.flag)
        elif isinstance(value, (tuple, list)):
            argv += [word for item in value for word in (k.flag, str(item))]
        else:
            argv += [k.flag, str(value)]
    return argv


def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
    """The record back from its JSON form: known keys only, lists back to tuples."""
    values = {}
    for k in fields_of(cls):
        if k.name in data:
            value = data[k.name]
            values[k.name] = tuple(value) if k.kind is list and value is not None else value
    return cls(**values)

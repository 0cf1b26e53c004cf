"""environments.toml -> typed, merged, checked `Spec` (the TOML loader; the types it makes
live in `envbuilder.core.model`).

The file is read with tomlkit (later commands that edit it keep its comments and order).
`[defaults]` is merged into each `[env.NAME]` (tables merge key by key, an env's value wins).

CONTRACT (other modules code against these names; keep them stable):

    load_spec(path) -> Spec          raises SpecError (all error findings in its message) when
                                     the spec has errors; warnings are kept on `Spec.findings`
    check_spec(path) -> SpecCheck  never raises for a user's mistake; `.spec` is None on errors
    FindingCollector(file)           the findings of one file (a `model.FindingSink`)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import tomlkit
import tomlkit.exceptions
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.core import grammar
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import SpecError
from envbuilder.core.fsutil import read_input_bytes
from envbuilder.core.grammar import CUDA_RE, PYTHON_RE, ROCM_RE
from envbuilder.core.model import (
    Accelerator,
    EnvSpec,
    Finding,
    FindingSink,
    Index,
    Severity,
    Spec,
    TargetTable,
    did_you_mean,
)
from envbuilder.core.project import pylock_name
from envbuilder.spec import rules
from envbuilder.targets import registry
from envbuilder.targets.base import Schema, TableContext


@dataclass(frozen=True)
class SpecCheck:
    """What `check_spec` found: the spec (None when there are errors) and every finding."""

    spec: Spec | None
    findings: tuple[Finding, ...]
    #: the [env.NAME] tables as written, also when the spec has errors (empty if unparsable)
    env_names: tuple[str, ...] = ()

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors


def load_spec(path: str | Path) -> Spec:
    """Load and check `path`. Returns the Spec (warnings on `Spec.findings`); raises SpecError
    listing every error, one per line, when there is any."""
    result = check_spec(path)
    if result.spec is None:
        lines = [str(f) for f in result.errors]
        raise SpecError(f"{len(lines)} error(s) in the spec:\n" + "\n".join(lines))
    return result.spec


def check_spec(path: str | Path) -> SpecCheck:
    """Read, parse, merge and check the spec at `path`. Never raises for a user's mistake (a
    missing file, bad TOML, a wrong value): those are findings. Writes nothing."""
    ctx = FindingCollector(str(path))
    doc = _parse(Path(path), ctx)
    if doc is None:
        return SpecCheck(None, ctx.result())
    spec = _build(Path(path), doc, ctx)
    findings = ctx.result()
    envs = doc.get("env")
    names = tuple(str(n) for n in envs) if isinstance(envs, Mapping) else ()
    if any(f.severity == "error" for f in findings) or spec is None:
        return SpecCheck(None, findings, names)
    return SpecCheck(replace(spec, findings=findings), findings, names)


# --- schema -----------------------------------------------------------------------------------

#: Kinds: "str", "bool", "list[str]", "map[str]", or a nested schema (a table). Each target's
#: table ([env.NAME.<target>]) has the schema its descriptor declares (`env_keys`).
BASE_ENV_KEYS: Schema = {
    "description": "str",
    "accelerator": "str",
    "rocm": "str",
    "cuda": "str",
    "gpu": "str|list[str]",
    "python": "str",
    "packages": "list[str]",
    "index_pins": "map[str]",
    "targets": "list[str]",
    "env": "map[str]",
    "apt": "list[str]",
    "rccl": "map[str]",
}
INDEX_KEYS: Schema = {"url": "str", "mirror": "str"}
TOP_KEYS = ("defaults", "env", "indexes")


def env_keys() -> Schema:
    """The schema of an [env.NAME] (and [defaults]) table: the env-level keys, then one table
    per registered target."""
    return {**BASE_ENV_KEYS, **{d.name: d.keys for d in registry.all()}}


ACCELERATORS: tuple[Accelerator, ...] = ("rocm", "cuda", "cpu")

_KIND_WORDS = {
    "str": "a string",
    "bool": "true or false",
    "list[str]": "a list of strings",
    "map[str]": "a table of strings",
    "str|list[str]": "a string or a list of strings",
}


def _one_line(text: str) -> str:
    """A finding is one line: control characters a user wrote are shown escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "map[str]":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if kind == "str|list[str]":  # one GPU, or several (`gpu`)
        return _kind_ok(value, "str") or (_kind_ok(value, "list[str]") and bool(value))
    raise AssertionError(kind)


def _type_name(value: Any) -> str:
    names = {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        list: "an array",
        dict: "a table",
    }
    if isinstance(value, list):
        if not value:
            return "an empty array"
        odd = next((v for v in value if not isinstance(v, str)), None)
        if odd is not None:  # what is in it, since "not an array" would be wrong
            return f"an array holding {_type_name(odd)}"
    return names.get(type(value), type(value).__name__)


class FindingCollector:
    """Collects the findings of one file (a `model.FindingSink`); remembers where merged values
    came from, so a finding on an inherited value says "(set in [defaults])"."""

    def __init__(self, file: str) -> None:
        self.file = _one_line(file)
        self.findings: list[Finding] = []
        self.defaults: dict[str, Any] = {}
        self.raw_envs: dict[str, dict[str, Any]] = {}
        self.doc: tomlkit.TOMLDocument | None = None
        self.bad: dict[str, set[str]] = {}  # env name ("" for defaults) -> rejected keys

    def add(self, severity: Severity, key: str, message: str) -> None:
        self.findings.append(Finding(severity, self.file, _one_line(key), _one_line(message)))

    def error(self, key: str, message: str) -> None:
        self.add("error", key, message)

    def origin(self, env: str, *path: str) -> str:
        """ " (set in [defaults])" when the env's value at `path` came from [defaults]."""
        return (
            ""
            if _has(self.raw_envs.get(env, {}), path) or not _has(self.defaults, path)
            else " (set in [defaults])"
        )

    def env_finding(
        self, env: str, path: Sequence[str], message: str, severity: Severity = "error"
    ) -> None:
        """A finding on env key `path`, noting when the value was inherited from [defaults].
        A "missing" finding is dropped when that key was already reported as mistyped."""
        dotted = ".".join(path)
        if message.startswith("missing") and (
            dotted in self.bad.get(env, set()) or dotted in self.bad.get("", set())
        ):
            return
        self.add(severity, ".".join(("env", env, *path)), message + self.origin(env, *path))

    def result(self) -> tuple[Finding, ...]:
        return tuple(dict.fromkeys(self.findings))


def _has(table: Mapping[str, Any], path: Sequence[str]) -> bool:
    node: Any = table
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _parse(path: Path, ctx: FindingCollector) -> dict[str, Any] | None:
    try:
        text = read_input_bytes(path).decode("utf-8")
    except FileNotFoundError:
        ctx.error("file", "not found; create it (see docs/spec.md) or pass --spec PATH")
        return None
    except IsADirectoryError:
        ctx.error("file", "is a folder; pass the spec file itself with --spec PATH")
        return None
    except OSError as exc:
        ctx.error("file", f"cannot be read ({exc.strerror or exc}); check the path and permissions")
        return None
    except UnicodeDecodeError as exc:
        ctx.error("file", f"is not UTF-8 (byte {exc.start}); save it as UTF-8")
        return None
    try:
        doc = tomlkit.parse(text)
        plain = doc.unwrap()
    except tomlkit.exceptions.ParseError as exc:
        ctx.error(
            f"line {exc.line}",
            f"invalid TOML: {_parse_message(exc)}; fix the syntax "
            f"near column {exc.col} (strings need quotes, tables [name], arrays [a, b])",
        )
        return None
    except (tomlkit.exceptions.TOMLKitError, ValueError, TypeError, OverflowError) as exc:
        where = _duplicate_line(text, str(exc))
        ctx.error(
            where,
            f"invalid TOML: {str(exc).rstrip('.')}; each key may appear once per "
            "table: remove or rename the repeated one",
        )
        return None
    ctx.doc = doc
    return plain


def _duplicate_line(text: str, message: str) -> str:
    """ "line N" of the repeated key in tomlkit's 'Key "x" already exists.' (else "file")."""
    m = re.search(r'Key "([^"]+)" already exists', message)
    if m is None:
        return "file"
    key = re.escape(m.group(1).split(".")[-1])
    lines = [
        i
        for i, line in enumerate(text.splitlines(), 1)
        if re.match(rf'\s*["\']?{key}["\']?\s*[=.]', line)
        or re.match(rf"\s*\[+\s*([^\]]*\.)?{key}\s*\]", line)
    ]
    return f"line {lines[1]}" if len(lines) > 1 else "file"


def _parse_message(exc: tomlkit.exceptions.ParseError) -> str:
    msg = str(exc)
    # tomlkit appends " at line L col C"; the finding's key already says the line.
    return re.sub(r" at line \d+ col \d+$", "", msg).replace("\x00", "end of file")


def _clean_table(
    table: Any,
    schema: Schema,
    parts: tuple[str, ...],
    ctx: FindingCollector,
    bad: set[str],
    prefix: str = "",
) -> dict[str, Any]:
    """Report unknown keys and wrong types in one table (recursively); return the table without
    them. `bad` collects the relative dotted keys that were rejected (and the keys a typo
    probably meant), so later "missing" findings for them are not reported twice."""
    key = ".".join(parts)
    if not isinstance(table, dict):
        ctx.error(key, f"must be a table, not {_type_name(table)}; write [{key}]")
        bad.add(prefix.rstrip("."))
        return {}
    out: dict[str, Any] = {}
    for name, value in table.items():
        where = f"{key}.{name}"
        if name not in schema:
            hint = did_you_mean(name, schema)
            ctx.error(where, f"unknown key{hint}; known keys here: {', '.join(schema)}")
            bad.update(prefix + c for c in difflib.get_close_matches(name, list(schema), 1, 0.6))
            continue
        kind = schema[name]
        if isinstance(kind, Mapping):
            out[name] = _clean_table(value, kind, (*parts, name), ctx, bad, f"{prefix}{name}.")
        elif kind == "map[str]" and isinstance(value, dict):
            out[name] = _clean_map(value, (*parts, name), ctx)
        elif not _kind_ok(value, kind):
            written = _as_written(ctx.doc, (*parts, name))
            ctx.error(
                where,
                f"must be {_KIND_WORDS[kind]}, not {_type_name(value)}"
                + _type_hint(value, kind, written),
            )
            bad.add(prefix + name)
        else:
            out[name] = value
    return out


def _clean_map(
    table: dict[str, Any], parts: tuple[str, ...], ctx: FindingCollector
) -> dict[str, str]:
    """A table of strings: each non-string entry is its own finding (and is dropped)."""
    out: dict[str, str] = {}
    for k, v in table.items():
        if isinstance(v, str):
            out[k] = v
            continue
        written = _as_written(ctx.doc, (*parts, k))
        ctx.error(
            ".".join((*parts, k)),
            f"must be a string, not {_type_name(v)}" + _type_hint(v, "str", written),
        )
    return out


def _as_written(doc: Any, parts: Sequence[str]) -> str | None:
    """The value's text as written in the file (3.10 stays "3.10"), when tomlkit has it."""
    node = doc
    try:
        for part in parts:
            node = node[part]
        text = node.as_string()
    except (KeyError, TypeError, AttributeError):
        return None
    return text.strip() if isinstance(text, str) and text.strip().isprintable() else None


def _type_hint(value: Any, kind: str, written: str | None = None) -> str:
    if kind == "str" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'; quote it: "{written or value}"'
    if kind == "list[str]" and isinstance(value, str):
        return f'; write ["{value}"]' if _printable(value) else "; write a list of strings"
    examples = {
        "str": '"..."',
        "bool": "true or false",
        "list[str]": '["..."]',
        "map[str]": '{ NAME = "value" }',
        "str|list[str]": '"RX 7900 XTX" or ["..."]',
    }
    return f"; write e.g. {examples[kind]}"


def _printable(value: str) -> bool:
    return value.isprintable()


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Tables merge key by key (recursively); any other value in `top` replaces base's."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _build(path: Path, doc: dict[str, Any], ctx: FindingCollector) -> Spec | None:
    _check_top_keys(doc, ctx)
    indexes = _indexes(doc.get("indexes", {}), ctx)
    schema = env_keys()
    defaults = _clean_table(
        doc.get("defaults", {}), schema, ("defaults",), ctx, ctx.bad.setdefault("", set())
    )
    envs_raw = _env_tables(doc, ctx)
    if envs_raw is None:
        return None
    ctx.defaults = defaults
    envs, merged = _make_envs(envs_raw, schema, indexes, ctx)
    for env in envs.values():
        rules.check_env(env, indexes, ctx)
    rules.check_spec_wide(list(envs.values()), ctx)
    unhashed = Spec(path=path, envs=envs, indexes=indexes, merged=merged)
    hashed = {n: replace(e, spec_hash=unhashed.env_hash(n)) for n, e in envs.items()}
    return Spec(path=path, envs=hashed, indexes=indexes, merged=merged, document=ctx.doc)


def _check_top_keys(doc: dict[str, Any], ctx: FindingCollector) -> None:
    for name in doc:
        if name not in TOP_KEYS:
            ctx.error(
                name,
                f"unknown top-level key{did_you_mean(name, TOP_KEYS)}; known: "
                f"{', '.join(TOP_KEYS)} (an environment goes under [env.{name}])",
            )


def _env_tables(doc: dict[str, Any], ctx: FindingCollector) -> dict[str, Any] | None:
    """The [env] table; None (with a finding) when there is none to build envs from. An empty
    one is reported but still returned: the rest of the spec is checked all the same."""
    envs_raw = doc.get("env")
    if envs_raw is None:
        ctx.error("env", "no environments; add one, e.g. [env.cpu] (see docs/spec.md)")
        return None
    if not isinstance(envs_raw, dict):
        ctx.error(
            "env", f"must be a table of environments, not {_type_name(envs_raw)}; write [env.NAME]"
        )
        return None
    if not envs_raw:
        ctx.error("env", "no environments; add one, e.g. [env.cpu] (see docs/spec.md)")
    return envs_raw


def _make_envs(
    envs_raw: dict[str, Any], schema: Schema, indexes: Mapping[str, Index], ctx: FindingCollector
) -> tuple[dict[str, EnvSpec], dict[str, dict[str, Any]]]:
    """The typed envs (those without unusable values) and every env's merged table."""
    envs: dict[str, EnvSpec] = {}
    merged: dict[str, dict[str, Any]] = {}
    for name, raw in envs_raw.items():
        if problem := grammar.env_name_problem(name):
            ctx.error(f"env.{name}", problem)
            continue
        # its content is still checked: one run, every finding
        pylocks = [pylock_name(name, t) for t in registry.names()]
        for problem in grammar.env_name_problems(name, pylocks):
            ctx.error(f"env.{name}", problem)
        clean = _clean_table(raw, schema, ("env", name), ctx, ctx.bad.setdefault(name, set()))
        ctx.raw_envs[name] = clean
        merged[name] = _merge(ctx.defaults, clean)
        env = _make_env(name, merged[name], indexes, ctx)
        if env is not None:
            envs[name] = env
    return envs, merged


def _indexes(raw: Any, ctx: FindingCollector) -> dict[str, Index]:
    if not isinstance(raw, dict):
        ctx.error(
            "indexes",
            f"must be a table of indexes, not {_type_name(raw)}; write "
            '[indexes.NAME] with url = "..."',
        )
        return {}
    out: dict[str, Index] = {}
    for name, table in raw.items():
        key = f"indexes.{name}"
        if problem := grammar.index_name_problem(name):
            ctx.error(key, problem)
            continue
        before = len(ctx.findings)
        table = _clean_table(table, INDEX_KEYS, ("indexes", name), ctx, set())
        if len(ctx.findings) > before:
            continue
        if "url" not in table:
            ctx.error(f"{key}.url", 'missing; every index needs url = "https://..."')
            continue
        problems = {f"{key}.url": grammar.url_problem(table["url"])}
        if "mirror" in table:
            problems[f"{key}.mirror"] = grammar.mirror_problem(table["mirror"])
        for where, problem in problems.items():
            if problem:
                ctx.error(where, problem)
        if not any(problems.values()):
            out[name] = Index(name=name, url=table["url"], mirror=table.get("mirror"))
    return out


def _make_env(
    name: str, m: dict[str, Any], indexes: Mapping[str, Index], ctx: FindingCollector
) -> EnvSpec | None:
    """Typed EnvSpec from the merged table; None (with findings) when a value it needs is
    unusable. The other values are still checked, so one run reports every mistake."""
    accelerator, python, rocm, cuda = _versions(name, m, ctx)
    targets = _targets(name, m, ctx)
    packages = _requirements(name, ("packages",), m.get("packages", []), ctx)
    pins = _pins(name, ("index_pins",), m.get("index_pins", {}), indexes, ctx)
    env_vars = _variables(name, ("env",), m.get("env", {}), ctx)
    rccl = _variables(name, ("rccl",), m.get("rccl", {}), ctx)
    apt = _apt(name, m, ctx)
    gpu, gfx, gfx_targets = _gpus(name, m, ctx)
    description = m.get("description", "")
    report(ctx, name, ("description",), grammar.text_problem(description))
    tp, tpins = _target_overrides(name, m, indexes, ctx)
    tables = _target_tables(name, m, targets, accelerator, python, rocm, ctx)
    if accelerator is None or python is None:
        return None
    return EnvSpec(
        name=name,
        description=description,
        accelerator=accelerator,
        python=python,
        packages=packages,
        index_pins=pins,
        targets=targets,
        rocm=rocm,
        cuda=cuda,
        gpu=gpu,
        gfx=gfx,
        gfx_targets=gfx_targets,
        env=env_vars,
        rccl=rccl,
        apt=apt,
        tables=tables,
        target_packages=tp,
        target_index_pins=tpins,
        indexes=_used_indexes(indexes, pins, tpins),
    )


def _apt(name: str, m: dict[str, Any], ctx: FindingCollector) -> tuple[str, ...]:
    apt = tuple(m.get("apt", []))
    for package in apt:
        report(ctx, name, ("apt",), grammar.apt_problem(package))
    return apt


def _gpus(
    name: str, m: dict[str, Any], ctx: FindingCollector
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """gpu, gfx and gfx_targets. One GPU ("RX 7900 XTX") or several (["RX 7900 XTX", "MI300X"]):
    the pip SDK locks the device code of each; the checks that need one GPU look at the first."""
    raw_gpu = m.get("gpu")
    gpus = [raw_gpu] if isinstance(raw_gpu, str) else list(raw_gpu or [])
    gfx_all = [resolve_gfx(name, g, ctx) for g in gpus]
    gfx_targets = tuple(dict.fromkeys(g for g in gfx_all if g is not None))
    gpu = gpus[0] if gpus else None
    gfx = gfx_all[0] if gfx_all else None
    return gpu, gfx, gfx_targets


def _target_tables(
    name: str,
    m: dict[str, Any],
    targets: Sequence[str],
    accelerator: Accelerator | None,
    python: str | None,
    rocm: str | None,
    ctx: FindingCollector,
) -> dict[str, TargetTable]:
    """Each listed target's [env.NAME.<target>] table, parsed by its descriptor (the env-level
    values are what a table may default from)."""
    tables: dict[str, TargetTable] = {}
    for descriptor in registry.all():  # registry order: findings come in a stable order
        if descriptor.name not in targets:
            continue
        table = descriptor.parse(
            TableContext(
                descriptor.name, name, m.get(descriptor.name, {}), accelerator, python, rocm, ctx
            )
        )
        if table is not None:
            tables[descriptor.name] = table
    return tables


def _used_indexes(
    indexes: Mapping[str, Index],
    pins: Mapping[str, str],
    target_pins: Mapping[str, Mapping[str, str]],
) -> dict[str, Index]:
    """The indexes an env's pins name (env-wide and per target), sorted by name."""
    used = set(pins.values()).union(*(p.values() for p in target_pins.values()))
    return {n: indexes[n] for n in sorted(used) if n in indexes}


def _versions(
    name: str, m: dict[str, Any], ctx: FindingCollector
) -> tuple[Accelerator | None, str | None, str | None, str | None]:
    """accelerator, python, rocm, cuda: each None when missing or unusable (with a finding)."""
    e = _env_err_fn(ctx, name)
    accelerator, python = m.get("accelerator"), m.get("python")
    rocm, cuda = m.get("rocm"), m.get("cuda")
    _check_accelerator(e, accelerator)
    _check_python(e, python)
    _check_sdk_version(e, _ROCM_KEY, rocm, accelerator)
    _check_sdk_version(e, _CUDA_KEY, cuda, accelerator)
    return (
        cast(Accelerator, accelerator) if accelerator in ACCELERATORS else None,
        python if python is not None and PYTHON_RE.fullmatch(python) else None,
        rocm if rocm is not None and ROCM_RE.fullmatch(rocm) else None,
        cuda if cuda is not None and CUDA_RE.fullmatch(cuda) else None,
    )


_EnvErr = Callable[[Sequence[str], str], None]


def _check_accelerator(e: _EnvErr, accelerator: Any) -> None:
    if accelerator is None:
        e(("accelerator",), 'missing; set accelerator = "rocm", "cuda" or "cpu"')
    elif accelerator not in ACCELERATORS:
        e(
            ("accelerator",),
            f"unknown accelerator {accelerator!r}"
            f"{did_you_mean(accelerator, ACCELERATORS)}; use one of: {', '.join(ACCELERATORS)}",
        )


def _check_python(e: _EnvErr, python: Any) -> None:
    if python is None:
        e(("python",), 'missing; set python = "3.12" (major.minor)')
    elif not PYTHON_RE.fullmatch(python):
        e(
            ("python",),
            f"{python!r} is not a Python major.minor version; write e.g. "
            f'"{_major_minor(python) or "3.12"}"',
        )


@dataclass(frozen=True)
class _SdkKey:
    """An accelerator's SDK version key (rocm, cuda): needed by that accelerator only."""

    key: str
    pattern: re.Pattern[str]
    missing: str  # the finding when the accelerator needs it and it is not set
    malformed: str  # ... when it does not match `pattern`; {value} is its repr


_ROCM_KEY = _SdkKey(
    "rocm",
    ROCM_RE,
    'missing for accelerator "rocm"; set rocm = "6.4.1" (a ROCm release)',
    '{value} is not a ROCm release number; write e.g. "6.4.1"',
)
_CUDA_KEY = _SdkKey(
    "cuda",
    CUDA_RE,
    'missing for accelerator "cuda"; set cuda = "12.8"',
    '{value} is not a CUDA major.minor version; write e.g. "12.8"',
)


def _check_sdk_version(e: _EnvErr, sdk: _SdkKey, value: Any, accelerator: Any) -> None:
    if accelerator == sdk.key and value is None:
        e((sdk.key,), sdk.missing)
    if value is not None and not sdk.pattern.fullmatch(value):
        e((sdk.key,), sdk.malformed.format(value=repr(value)))
    if value is not None and accelerator in ACCELERATORS and accelerator != sdk.key:
        e(
            (sdk.key,),
            f'set for accelerator "{accelerator}"; remove it, or set accelerator = "{sdk.key}"',
        )


def _env_err_fn(ctx: FindingCollector, name: str) -> _EnvErr:
    def e(path: Sequence[str], message: str) -> None:
        ctx.env_finding(name, path, message)

    return e


def _major_minor(text: str) -> str | None:
    try:
        v = Version(text)
    except InvalidVersion:
        return None
    return f"{v.major}.{v.minor}" if v.major == 3 else None


def _targets(name: str, m: dict[str, Any], ctx: FindingCollector) -> tuple[str, ...]:
    """The env's targets, each a registered one, in the order written."""
    known = registry.names()
    raw = m.get("targets")
    if raw is None:
        ctx.env_finding(
            name, ("targets",), f'missing; set targets = ["docker"] (any of: {", ".join(known)})'
        )
        return ()
    if not raw:
        ctx.env_finding(name, ("targets",), f"is empty; list at least one of: {', '.join(known)}")
    out: list[str] = []
    for t in raw:
        if t not in known:
            ctx.env_finding(
                name,
                ("targets",),
                f"unknown target {t!r}{did_you_mean(t, known)}; use any of: {', '.join(known)}",
            )
        elif t in out:
            ctx.env_finding(name, ("targets",), f"{t!r} is listed twice; list it once")
        else:
            out.append(t)
    for t in known:
        if t in m and t not in out:
            ctx.env_finding(
                name,
                (t,),
                f"[env.{name}.{t}] is set but {t!r} is not in targets; "
                f"add it to targets or remove the table",
                "warning",
            )
    return tuple(out)


def _pins(
    name: str,
    path: tuple[str, ...],
    raw: Mapping[str, str],
    indexes: Mapping[str, Index],
    ctx: FindingCollector,
) -> dict[str, str]:
    out: dict[str, str] = {}
    for pkg, index in raw.items():
        if problem := grammar.package_name_problem(pkg):
            ctx.env_finding(name, (*path, pkg), problem)
            continue
        if index not in indexes:
            known = ", ".join(indexes) or "(none defined)"
            ctx.env_finding(
                name,
                (*path, pkg),
                f"pins {pkg} to unknown index {index!r}"
                f"{did_you_mean(index, indexes)}; define [indexes.{index}] with a url "
                f"or use one of: {known}",
            )
            continue
        out[str(canonicalize_name(pkg))] = index
    return out


def _target_overrides(
    name: str,
    m: dict[str, Any],
    indexes: Mapping[str, Index],
    ctx: FindingCollector,
) -> tuple[dict[str, tuple[str, ...]], dict[str, dict[str, str]]]:
    packages: dict[str, tuple[str, ...]] = {}
    pins: dict[str, dict[str, str]] = {}
    for target in registry.names():
        table = m.get(target, {})
        if "packages" in table:
            packages[target] = _requirements(name, (target, "packages"), table["packages"], ctx)
        if "index_pins" in table:
            pins[target] = _pins(name, (target, "index_pins"), table["index_pins"], indexes, ctx)
    return packages, pins


# --- reporting grammar problems and loader helpers -------------------------------------------


def report(
    sink: FindingSink,
    env: str,
    path: Sequence[str],
    problem: str | None,
    severity: Severity = "error",
) -> None:
    """A finding on env key `path` when `problem` (a `grammar.*_problem` answer) is not None."""
    if problem is not None:
        sink.env_finding(env, path, problem, severity)


def report_image(sink: FindingSink, env: str, path: Sequence[str], image: str) -> None:
    """An error for a string that is no image reference, a warning for one without a tag."""
    report(sink, env, path, grammar.image_problem(image))
    report(sink, env, path, grammar.image_untagged(image), "warning")


def _requirements(
    env: str, path: Sequence[str], packages: Sequence[str], ctx: FindingSink
) -> tuple[str, ...]:
    """The good PEP 508 requirements of `packages`; a finding for each refused one."""
    good, problems = grammar.requirements(packages)
    for problem in problems:
        ctx.env_finding(env, path, problem)
    return good


def _variables(
    env: str, path: Sequence[str], values: Mapping[str, str], ctx: FindingSink
) -> dict[str, str]:
    """The good (name, value) pairs of an env table; a finding on each refused name."""
    good: dict[str, str] = {}
    for name, value in values.items():
        if problem := grammar.env_var_problem(name, value):
            ctx.env_finding(env, (*path, name), problem)
        else:
            good[name] = value
    return good


def resolve_gfx(env: str, gpu: str, ctx: FindingSink) -> str | None:
    """The gfx target of `gpu` (a marketing name or a gfx id); a finding when unknown."""
    compat = load_compat()
    found = compat.gpu(gpu)
    if found is not None:
        return found.gfx
    if re.fullmatch(r"gfx[0-9a-f]{3,4}", gpu):
        ctx.env_finding(
            env,
            ("gpu",),
            f"{gpu} is not in envbuilder's GPU table; the GPU checks are skipped for it",
            "warning",
        )
        return gpu
    names = compat.gpu_names()
    close = difflib.get_close_matches(gpu, names, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    ctx.env_finding(
        env,
        ("gpu",),
        f"unknown GPU {gpu!r}{hint}; write a marketing name such as "
        '"RX 7900 XTX" or a gfx target such as "gfx1100"',
    )
    return None

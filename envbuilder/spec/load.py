"""environments.toml -> typed, merged, checked `Spec` (the TOML loader; the types it makes
live in `envbuilder.core.model`).

The file is read with tomlkit (later commands that edit it keep its comments and order).
`[defaults]` is merged into each `[env.NAME]` (tables merge key by key, an env's value wins).

CONTRACT (other modules code against these names; keep them stable):

    load_spec(path) -> Spec          raises SpecError (all error findings in its message) when
                                     the spec has errors; warnings are kept on `Spec.findings`
    check_spec(path) -> SpecCheck  never raises for a user's mistake; `.spec` is None on errors

Its parts: the findings of one file (`spec.findings.FindingCollector`, a `model.FindingSink`), the
keys a table may have and the check of a table against them (`spec.schema`), the checks of an
env's values (`spec.envvalues`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import tomlkit
import tomlkit.exceptions

from envbuilder.core import grammar
from envbuilder.core.errors import SpecError
from envbuilder.core.fsutil import read_input_bytes
from envbuilder.core.grammar import CUDA_RE, PYTHON_RE, ROCM_RE
from envbuilder.core.model import (
    Accelerator,
    EnvSpec,
    Finding,
    Index,
    Spec,
    TargetTable,
    did_you_mean,
)
from envbuilder.core.project import pylock_name
from envbuilder.spec import rules
from envbuilder.spec.envvalues import (
    CUDA_KEY,
    ROCM_KEY,
    check_accelerator,
    check_pins,
    check_python,
    check_requirements,
    check_sdk_version,
    check_targets,
    check_variables,
    env_err_fn,
    report,
    resolve_gfx,
    target_overrides,
)
from envbuilder.spec.findings import FindingCollector
from envbuilder.spec.schema import (
    ACCELERATORS,
    INDEX_KEYS,
    TOP_KEYS,
    clean_table,
    env_keys,
    type_name,
)
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
    defaults = clean_table(
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
            "env", f"must be a table of environments, not {type_name(envs_raw)}; write [env.NAME]"
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
        clean = clean_table(raw, schema, ("env", name), ctx, ctx.bad.setdefault(name, set()))
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
            f"must be a table of indexes, not {type_name(raw)}; write "
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
        table = clean_table(table, INDEX_KEYS, ("indexes", name), ctx, set())
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
    targets = check_targets(name, m, ctx)
    packages = check_requirements(name, ("packages",), m.get("packages", []), ctx)
    pins = check_pins(name, ("index_pins",), m.get("index_pins", {}), indexes, ctx)
    env_vars = check_variables(name, ("env",), m.get("env", {}), ctx)
    rccl = check_variables(name, ("rccl",), m.get("rccl", {}), ctx)
    apt = _apt(name, m, ctx)
    gpu, gfx, gfx_targets = _gpus(name, m, ctx)
    description = m.get("description", "")
    report(ctx, name, ("description",), grammar.text_problem(description))
    tp, tpins = target_overrides(name, m, indexes, ctx)
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
    e = env_err_fn(ctx, name)
    accelerator, python = m.get("accelerator"), m.get("python")
    rocm, cuda = m.get("rocm"), m.get("cuda")
    check_accelerator(e, accelerator)
    check_python(e, python)
    check_sdk_version(e, ROCM_KEY, rocm, accelerator)
    check_sdk_version(e, CUDA_KEY, cuda, accelerator)
    return (
        cast(Accelerator, accelerator) if accelerator in ACCELERATORS else None,
        python if python is not None and PYTHON_RE.fullmatch(python) else None,
        rocm if rocm is not None and ROCM_RE.fullmatch(rocm) else None,
        cuda if cuda is not None and CUDA_RE.fullmatch(cuda) else None,
    )

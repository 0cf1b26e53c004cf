"""The typed spec: what `envbuilder.spec.load` makes of environments.toml, and every later stage
reads. Plain frozen values; nothing here reads a file, parses TOML or knows which targets exist.

    Finding(severity, file, key, message)   str(f) == "FILE: KEY: SEVERITY: MESSAGE", one line
    FindingSink                              where checks report findings (a small protocol)
    Index(name, url, mirror)                 a named package index
    TargetTable                              base of each target's [env.NAME.<target>] table
    EnvSpec                                  one environment, [defaults] merged, every value checked
    Spec                                     the checked spec: envs in file order, indexes, warnings
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from envbuilder.core.compat import RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import UsageError
from envbuilder.core.fsutil import sha256_bytes

if TYPE_CHECKING:
    import tomlkit

Accelerator = Literal["rocm", "cuda", "cpu"]
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem in the spec: where (file, dotted key), what is wrong and what would be right."""

    severity: Severity
    file: str
    key: str  # dotted path, e.g. "env.rocm64.gpu" or "defaults.python"
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.severity}: {self.message}"


class FindingSink(Protocol):
    """Where the checks report what they find (the spec loader's `FindingCollector`)."""

    def error(self, key: str, message: str) -> None:
        """An error on a file-level dotted key ("indexes.x.url", "env.NAME")."""
        ...

    def env_finding(
        self, env: str, path: Sequence[str], message: str, severity: Severity = "error"
    ) -> None:
        """A finding on key `path` of env `env` (relative to [env.NAME])."""
        ...


@dataclass(frozen=True)
class Index:
    """A named package index. `url` is canonical (what locks record); `mirror` is where to
    resolve and fetch from instead (a folder or URL), accepted only by hash."""

    name: str
    url: str
    mirror: str | None = None


@dataclass(frozen=True)
class TargetTable:
    """Base of the typed `[env.NAME.<target>]` tables. Each target's descriptor
    (`envbuilder.targets`) names its subclass and fills it, defaults included, at load time."""

    def venv_python(self, env_python: str) -> str:
        """The Python (major.minor) this target's venv runs: the env's, unless the table sets
        its own (the windows and native tables do)."""
        return env_python


_T = TypeVar("_T", bound=TargetTable)


@dataclass(frozen=True)
class EnvSpec:
    """One environment after `[defaults]` were merged in and every value was checked."""

    name: str
    description: str
    accelerator: Accelerator
    python: str  # "3.12" (major.minor)
    packages: tuple[str, ...]  # PEP 508 requirement strings, as written
    index_pins: Mapping[str, str]  # canonical package name -> index name; others: default index
    targets: tuple[str, ...]  # target names, each registered (envbuilder.targets.registry)
    rocm: str | None = None  # "6.4.1"; None unless accelerator == "rocm"
    cuda: str | None = None  # e.g. "12.8"; None unless accelerator == "cuda"
    gpu: str | None = None  # as written (marketing name or gfx target)
    gfx: str | None = None  # resolved gfx target of the (first) GPU, e.g. "gfx1100"
    #: every GPU's gfx target, in spec order, no repeats (`gpu` may name several GPUs)
    gfx_targets: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment variables
    rccl: Mapping[str, str] = field(default_factory=dict)  # NCCL_*/RCCL_* settings
    apt: tuple[str, ...] = ()  # extra apt packages (docker, wsl2)
    #: target name -> its table, for each of `targets` whose table could be made
    tables: Mapping[str, TargetTable] = field(default_factory=dict)
    # Per-target overrides: target -> packages / index pins replacing the env-wide ones
    # (e.g. the windows target takes torch from AMD's Windows wheels).
    target_packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    target_index_pins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The named indexes the env pins any package to (any target), by name: where the wheel
    # cache looks for mirrors, so building never reads the spec file again.
    indexes: Mapping[str, Index] = field(default_factory=dict)
    #: the env's hash in the spec it was loaded from (Spec.env_hash): what a current lock
    #: records, so the stages after `check` compare against it and never read the spec again
    spec_hash: str = ""

    @property
    def release(self) -> RocmRelease | None:
        """The ROCm release `rocm` resolves to in the compatibility data (None for cpu/cuda envs
        and for a release the data does not know, which `check` reports). Every stage asks the
        env, so the release is resolved in one place and travels with the env to the report."""
        if self.accelerator != "rocm" or not self.rocm:
            return None
        return load_compat().rocm(self.rocm)

    def table(self, kind: type[_T]) -> _T | None:
        """The env's table of type `kind` (e.g. `env.table(DockerTable)`); None when the env does
        not have that target (or its table had errors)."""
        for table in self.tables.values():
            if type(table) is kind:
                return table
        return None

    def packages_for(self, target: str) -> tuple[str, ...]:
        """The packages for `target`: its own `packages` when the target table sets them."""
        return self.target_packages.get(target, self.packages)

    def index_pins_for(self, target: str) -> Mapping[str, str]:
        """The index pins for `target`: its own `index_pins` REPLACE the env-wide ones when the
        target table sets them (so `index_pins = {}` in [env.X.windows] drops the torch pin)."""
        if target in self.target_index_pins:
            return dict(self.target_index_pins[target])
        return dict(self.index_pins)

    def python_for(self, target: str) -> str:
        """The Python (major.minor) a target's venv uses (its table may set its own)."""
        table = self.tables.get(target)
        return table.venv_python(self.python) if table is not None else self.python


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for the closest of `choices`, or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True, eq=False)
class Spec:
    """A checked spec: its environments in file order, the named indexes, and its warnings.

    `document` is the tomlkit document (comments and order kept) for commands that edit the file;
    `merged` holds each env's plain, merged content (what `env_hash` hashes)."""

    path: Path
    envs: Mapping[str, EnvSpec]
    indexes: Mapping[str, Index]
    findings: tuple[Finding, ...] = ()
    merged: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    document: tomlkit.TOMLDocument | None = field(default=None, repr=False)

    def env(self, name: str) -> EnvSpec:
        """The env called `name`; UsageError naming the known envs when there is none."""
        if name not in self.envs:
            hint = did_you_mean(name, self.envs)
            raise UsageError(
                f"{self.path}: no environment {name!r}{hint}; "
                f"known: {', '.join(self.envs) or '(none)'}"
            )
        return self.envs[name]

    def select(self, names: Sequence[str] | None) -> list[EnvSpec]:
        """The envs called `names` (in the given order); all envs in file order for [] or None."""
        if not names:
            return list(self.envs.values())
        return [self.env(n) for n in dict.fromkeys(names)]

    def indexes_for(self, name: str) -> dict[str, Index]:
        """The named indexes env `name` pins any package to (any target), sorted by name."""
        env = self.env(name)
        used = set(env.index_pins.values())
        for pins in env.target_index_pins.values():
            used.update(pins.values())
        return {n: self.indexes[n] for n in sorted(used) if n in self.indexes}

    def env_hash(self, name: str) -> str:
        """sha256 (hex) of the env's merged content plus the canonical URLs of the indexes it
        uses, as canonical JSON (sorted keys). Mirrors are left out: they change where wheels
        come from, never which (artifacts are accepted by hash only)."""
        self.env(name)
        payload = {
            "env": name,
            "spec": self.merged.get(name, {}),
            "indexes": {n: ix.url for n, ix in self.indexes_for(name).items()},
        }
        text = json.dumps(
            payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
        )
        return sha256_bytes(text.encode("utf-8"))

"""Deployment targets, one module each, behind one small interface and a plain registry.

CONTRACT:
    get_target(name) -> Target     name in envbuilder.model.TARGETS; raises UsageError otherwise
    register(target_cls)           decorator used by each target module

A Target builds an artifact from the locked, rendered definition and validates it by running the
probe inside it. Targets never print: they report progress through the `progress` callback and
return values. The CLI (envbuilder/commands/build.py, validate.py, push.py, pull.py) dispatches
here.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from envbuilder.errors import UsageError
from envbuilder.model import EnvSpec
from envbuilder.progress import ProgressFn
from envbuilder.project import Project


@dataclass(frozen=True)
class Artifact:
    """What a build produced: an image id, a .wsl path, a venv path; with its digest/sha256."""

    target: str
    env: str
    reference: str  # image tag, file path or venv path
    digest: str | None = None  # image id / sha256 of the file / None for a venv
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidateOptions:
    """What `envbuilder validate` passes to the probe."""

    level: str = "quick"
    expect: str | None = None  # defaults to the env's accelerator
    repeat: int = 1
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    timeout_s: float | None = None


def probe_options(env: EnvSpec, options: ValidateOptions, labels: Mapping[str, str]) -> list[str]:
    """The probe's command-line options for `options` and `labels` (in their order), shared by
    every target: --expect defaults to the env's accelerator; --repeat is left out when 1 (the
    probe's default). Where the probe runs, its --lock/--json/--timeout are the target's."""
    args = ["--level", options.level, "--expect", options.expect or env.accelerator]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    if options.repeat != 1:
        args += ["--repeat", str(options.repeat)]
    for check in options.only:
        args += ["--only", check]
    for check in options.skip:
        args += ["--skip", check]
    return args


def probe_zipapp_bytes() -> bytes:
    """The probe zipapp (envbuilder.probe.build_zipapp) as bytes, to copy into an artifact."""
    from envbuilder.probe import build_zipapp

    with tempfile.TemporaryDirectory(prefix="envbuilder-probe-") as tmp:
        return build_zipapp(Path(tmp) / "probe.pyz").read_bytes()


class Target(Protocol):
    name: str

    def build(self, project: Project, env: EnvSpec, progress: ProgressFn) -> Artifact: ...

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        """Run the probe inside the built artifact; return the path of the JSON report written
        to project.report(env.name, self.name). Raises ValidationError if it cannot run."""
        ...


_MODULES = {
    "docker": "envbuilder.targets.docker",
    "wsl2": "envbuilder.targets.wsl2",
    "windows": "envbuilder.targets.venv",
    "native": "envbuilder.targets.venv",
}
# Values are classes whose instances satisfy `Target` structurally; the protocol is checked
# where they are used (get_target's annotation), not at registration.
_REGISTRY: dict[str, Callable[[], Any]] = {}

_C = TypeVar("_C", bound=type)


def register(cls: _C) -> _C:
    """Class decorator: make `cls` the implementation of target `cls.name`."""
    _REGISTRY[str(getattr(cls, "name"))] = cls  # noqa: B009
    return cls


def get_target(name: str) -> Target:
    """The target implementation for `name` (imported on first use)."""
    if name not in _MODULES:
        raise UsageError(f"unknown target {name!r}; choose one of: {', '.join(_MODULES)}")
    if name not in _REGISTRY:
        importlib.import_module(_MODULES[name])
    target: Target = _REGISTRY[name]()
    return target

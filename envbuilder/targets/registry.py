"""The one list of deployment targets.

    register(descriptor)        add a target (each target module registers itself at import)
    get(name) -> descriptor     UsageError naming the known targets for an unknown name
    names() / all()             every registered target, in registration order
    with_capability(cap)        the names of the targets that have a capability

The built-in targets (docker, wsl2, windows, native, in that order) and the targets of installed
plugins (entry point group "envbuilder.targets": a module that registers a descriptor when
imported, or a `TargetDescriptor` object) are loaded on first use. The order is the order of
`--target` choices, of messages that list targets, and of the targets in a lock file.
"""

from __future__ import annotations

import importlib
import importlib.metadata

from envbuilder.core import grammar
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.core.model import did_you_mean
from envbuilder.targets.base import Capability, TargetDescriptor

ENTRY_POINT_GROUP = "envbuilder.targets"
#: The built-in targets, in their order, and the module of each. A literal: tests/test_layers.py
#: reads these names as the registry's imports (by name, in `_load`) for the layer rule.
BUILTINS = (
    ("docker", "envbuilder.targets.docker"),
    ("wsl2", "envbuilder.targets.wsl2"),
    ("windows", "envbuilder.targets.windows"),
    ("native", "envbuilder.targets.native"),
)

_DESCRIPTORS: dict[str, TargetDescriptor] = {}
_loaded: list[bool] = []  # [True] once the built-ins and plugins were loaded


def _load() -> None:
    """Import the built-in target modules, then the plugins' (once per process)."""
    if _loaded:
        return
    _loaded.append(True)  # first: the modules call register(), which calls _load()
    for _name, module in BUILTINS:
        importlib.import_module(module)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken plugin is named, never a traceback
            raise EnvbuilderError(
                f"the target plugin {entry.name!r} ({entry.value}) cannot be "
                f"loaded: {exc}; fix or uninstall it"
            ) from None
        if isinstance(loaded, TargetDescriptor):
            register(loaded)


def register(descriptor: TargetDescriptor) -> TargetDescriptor:
    """Add `descriptor` (after the built-ins); registering the same object again does nothing.
    A second, different target of the same name is refused."""
    _load()
    if not grammar.TARGET_NAME_RE.fullmatch(descriptor.name):
        raise EnvbuilderError(
            f"target name {descriptor.name!r} is not lower-case letters and "
            "digits starting with a letter (it becomes part of file names)"
        )
    known = _DESCRIPTORS.get(descriptor.name)
    if known is not None and known is not descriptor:
        raise EnvbuilderError(
            f"two targets are called {descriptor.name!r} ({known.builder} and "
            f"{descriptor.builder}); uninstall one of them"
        )
    _DESCRIPTORS[descriptor.name] = descriptor
    # the built-ins first, in their order, whichever module was imported first; then the others
    # in the order they were registered
    builtin = [n for n, _ in BUILTINS]
    order = sorted(_DESCRIPTORS, key=lambda n: builtin.index(n) if n in builtin else len(builtin))
    for name in order:
        _DESCRIPTORS[name] = _DESCRIPTORS.pop(name)
    return descriptor


def unregister(name: str) -> None:
    """Remove a target (for tests that register a throw-away one)."""
    _DESCRIPTORS.pop(name, None)


def get(name: str) -> TargetDescriptor:
    """The descriptor of target `name`."""
    _load()
    if name not in _DESCRIPTORS:
        raise UsageError(
            f"unknown target {name!r}{did_you_mean(name, _DESCRIPTORS)}; choose one "
            f"of: {', '.join(_DESCRIPTORS)}"
        )
    return _DESCRIPTORS[name]


def names() -> tuple[str, ...]:
    _load()
    return tuple(_DESCRIPTORS)


def all() -> tuple[TargetDescriptor, ...]:
    _load()
    return tuple(_DESCRIPTORS.values())


def with_capability(capability: Capability) -> tuple[str, ...]:
    """The names of the targets that have `capability`, in registry order."""
    return tuple(d.name for d in all() if d.has(capability))


def rendered() -> tuple[str, ...]:
    """The names of the targets `envbuilder render` writes files for."""
    return tuple(d.name for d in all() if d.rendered)

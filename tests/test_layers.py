"""The layer rule of docs/architecture.md, asserted from the modules' own imports (issue 14):
an envbuilder module imports only from its own layer or a lower one, and the import graph has no
circle. Every import counts: at the top, inside a function (lazy), or under TYPE_CHECKING. An
import may break the rule only with a `# layer-exception: <reason>` comment on its line; there is
none today (EXCEPTIONS below must list each with its reason, and docs/architecture.md says why).

Dynamic imports by name (importlib.import_module) are how the registry loads the built-in target
modules and a descriptor names its builder ("envbuilder.builders.docker:DockerBuilder"); the
last test checks that every builder named so is in the builders layer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder.builders.lookup import builder_for
from envbuilder.targets import registry

PACKAGE = Path(__file__).resolve().parents[1] / "envbuilder"

#: Bottom to top, one stage package each (docs/architecture.md draws the same tree). A module is
#: in the layer of its longest listed prefix (a package covers its modules); the two modules of
#: the root package, ROOT_MODULES, match only exactly, so a module that no package covers has no
#: layer and fails. envbuilder.probe is apart: it imports nothing of envbuilder outside itself,
#: and any layer may import it (it is shipped into artifacts as a zipapp).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaf",
        (
            "envbuilder",
            "envbuilder.core",
            "envbuilder.core.errors",
            "envbuilder.core.progress",
            "envbuilder.core.fsutil",
            "envbuilder.core.journal",
            "envbuilder.core.journalfile",
            "envbuilder.core.receipts",
            "envbuilder.core.nofollow",
            "envbuilder.core.stale",
            "envbuilder.core.quoting",
            "envbuilder.core.imagedefs",
            "envbuilder.core.project",
            "envbuilder.core.ui",
            "envbuilder.core.interrupts",
            "envbuilder.core.foreground",
        ),
    ),
    (
        "data",
        (
            "envbuilder.core.compat",
            "envbuilder.core.compatload",
            "envbuilder.core.grammar",
            "envbuilder.core.activate",
        ),
    ),
    ("model", ("envbuilder.core.model", "envbuilder.core.plan", "envbuilder.core.pipsdk")),
    ("image", ("envbuilder.image",)),
    ("descriptors", ("envbuilder.targets",)),
    ("host", ("envbuilder.host",)),
    ("spec", ("envbuilder.spec",)),
    ("lock", ("envbuilder.lock",)),
    ("report", ("envbuilder.report",)),
    ("builders", ("envbuilder.builders",)),
    ("slurm", ("envbuilder.slurm",)),
    ("edge", ("envbuilder.commands", "envbuilder.__main__")),
)
#: The root package's own modules: matched exactly, never as a prefix.
ROOT_MODULES = ("envbuilder", "envbuilder.__main__")
PROBE = "envbuilder.probe"
#: (importing module, imported module) -> why the rule does not hold there.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("envbuilder.report.comparison", "envbuilder.report.guide"): (
        "comparison's markdown and JSON writers add the guide's table (issue 32), and the guide "
        "reads comparison's rows; imported inside those two functions. To undo: let the compare "
        "command add the guide's section itself"
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """The index of `module`'s layer (None for the probe)."""
    if module == PROBE or module.startswith(PROBE + "."):
        return None
    best: tuple[int, int] | None = None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            covers = module == prefix or (
                prefix not in ROOT_MODULES and module.startswith(prefix + ".")
            )
            if covers and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(
            f"{module} has no layer: add it to LAYERS in tests/test_layers.py "
            "and to the layers in docs/architecture.md"
        )
    return best[0]


def imports(module: str) -> Iterator[tuple[str, int, str]]:
    """(imported envbuilder module, line, source line) for every import in `module`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> Iterator[tuple[str, int, str]]:
    """The envbuilder imports of `source`, a module of `package` (relative imports resolved)."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from envbuilder import grammar` imports the module envbuilder.core.grammar
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for name in names:
            if name == "envbuilder" or name.startswith("envbuilder."):
                while name not in MODULES:  # `import envbuilder.x.y` where y is a name
                    name = name.rpartition(".")[0]
                yield name, node.lineno, lines[node.lineno - 1]


def edges() -> Iterator[tuple[str, str, int, str]]:
    for module in MODULES:
        for imported, line, text in imports(module):
            if imported != module:
                yield module, imported, line, text


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_a_module_outside_the_stage_packages_has_no_layer() -> None:
    """The root package covers only its own two modules: a new top-level module must be placed."""
    with pytest.raises(AssertionError, match="has no layer"):
        layer_of("envbuilder.unplaced")


def test_no_import_goes_up_a_layer() -> None:
    wrong = []
    for module, imported, line, text in edges():
        if (module, imported) in EXCEPTIONS:
            assert "# layer-exception:" in text, f"{module}:{line} needs its reason comment"
            continue
        mine, theirs = layer_of(module), layer_of(imported)
        if mine is None:  # the probe: nothing of envbuilder outside itself
            if theirs is not None:
                wrong.append(f"{module}:{line} (probe) imports {imported}")
            continue
        if theirs is not None and theirs > mine:
            wrong.append(
                f"{module}:{line} ({LAYERS[mine][0]}) imports {imported} "
                f"({LAYERS[theirs][0]}): {text.strip()}"
            )
    assert not wrong, "imports up a layer:\n" + "\n".join(wrong)


def test_the_import_graph_has_no_circle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, imported, _line, _text in edges():
        if (module, imported) not in EXCEPTIONS:
            graph[module].add(imported)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = [*path[path.index(nxt) :], nxt]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_exceptions_are_few_and_said() -> None:
    for (module, imported), reason in EXCEPTIONS.items():
        assert reason.strip(), (module, imported)
        assert any(
            i == imported and "# layer-exception:" in text for i, _line, text in imports(module)
        ), (module, imported)


@pytest.mark.parametrize("descriptor", registry.all(), ids=lambda d: d.name)
def test_descriptors_name_builders_in_the_builders_layer(descriptor: object) -> None:
    from envbuilder.targets.base import TargetDescriptor

    assert isinstance(descriptor, TargetDescriptor)
    module = descriptor.builder.partition(":")[0]
    assert layer_of(module) == [n for n, _ in LAYERS].index("builders")
    builder_for(descriptor)


#: The only modules that import envbuilder modules by name (importlib), and what they import:
#: the registry its target modules, the builder lookup a descriptor's builder (the test above
#: asserts that layer), the command line its commands, the probe's child its checks.
IMPORTS_BY_NAME = {
    "envbuilder.targets.registry": "envbuilder.targets",
    "envbuilder.builders.lookup": "envbuilder.builders",
    "envbuilder.commands._cli": "envbuilder.commands",
    "envbuilder.probe.child": "envbuilder.probe",
}


def imports_by_name(source: str) -> bool:
    """Whether `source` calls import_module with a name that is not a constant naming another
    package (matplotlib, msvcrt, torch's modules are not envbuilder's)."""
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "import_module":
            continue
        arg = node.args[0]
        if isinstance(arg, ast.JoinedStr) and arg.values:
            arg = arg.values[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return True  # a name computed at run time: it may be anything
        if arg.value.startswith("envbuilder"):
            return True
    return False


def test_imports_by_name_happen_only_where_the_layer_rule_accounts_for_them() -> None:
    """An importlib import is invisible to the import graph, so envbuilder modules may be
    imported by name only in the modules above, each loading modules of its own layer: a
    descriptor's builder string is imported by builders.lookup, never by targets/ (so targets/
    and builders/ have no circle)."""
    found = {m for m, path in MODULES.items() if imports_by_name(path.read_text(encoding="utf-8"))}
    assert found == set(IMPORTS_BY_NAME)
    for module, package in IMPORTS_BY_NAME.items():
        assert layer_of(module) == layer_of(package), (module, package)


def test_the_rule_sees_lazy_and_type_checking_imports() -> None:
    """The checker itself: imports inside a function and under TYPE_CHECKING are found, relative
    ones resolved (so the rule test can fail)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from envbuilder.builders.render import environment\n"
        "def f():\n    from envbuilder.commands._cli import main\n    from . import gzipwriter\n"
        "    return main\n"
    )
    found = sorted(name for name, _line, _text in imports_in(source, "envbuilder.image.wsl"))
    assert found == [
        "envbuilder.builders.render",
        "envbuilder.commands._cli",
        "envbuilder.image.wsl.gzipwriter",
    ]
    grammar, cli = layer_of("envbuilder.core.grammar"), layer_of("envbuilder.commands._cli")
    assert grammar is not None and cli is not None and cli > grammar

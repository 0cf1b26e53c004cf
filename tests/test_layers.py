"""The layer rule of docs/architecture.md, asserted from the modules' own imports (issue 14):
an envbuilder module imports only from its own layer or a lower one, and the import graph has no
circle. Every import statement counts: at the top, inside a function (lazy), or under
TYPE_CHECKING. The rule has no exception.

Imports by name count too (issue 33): `importlib.import_module(...)` and `__import__(...)`, also
called through an alias (`from importlib import import_module as load`, `import importlib as
il`, `load = importlib.import_module`). The checker reads the name from the source: a string
constant (a relative one resolved), an f-string's constant prefix ("envbuilder.commands." may
load any module of that package), or a loop variable over a module-level constant list of names
(the registry's BUILTINS). A name it cannot read (a value known only at run time) fails the rule
unless its line says which package it loads, `# import-by-name: envbuilder.builders`; the
modules of that package are then checked like any other import.

The circle test counts import statements only. Loading by name is how a module reaches modules
that import it back (the registry loads the target modules, which register themselves with it),
so those imports are held to the layer rule but not counted as circles.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuilder.builders.lookup import builder_for
from envbuilder.targets import registry

PACKAGE = Path(__file__).resolve().parents[1] / "envbuilder"

#: Bottom to top, one stage package each (docs/architecture.md draws the same tree). A module is
#: in the layer of its longest listed prefix (a package covers its modules); the two modules of
#: the root package, ROOT_MODULES, match only exactly, so a module that no package covers has no
#: layer and fails. envbuilder.probe is apart: it imports nothing of envbuilder outside itself but
#: PROBE_IMPORTS (shipped in its zipapp), and any layer may import it (it is shipped into
#: artifacts as a zipapp).
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
#: What the probe may import outside itself: standard-library modules its zipapp ships
#: (envbuilder.probe.SHIPPED; test_probe_unit holds them to the standard library).
PROBE_IMPORTS = ("envbuilder.core.records",)
#: The comment that says which package an import by name loads where the name is a value known
#: only at run time (builders.lookup: a descriptor's builder string).
MARKER = "# import-by-name:"
#: (module, function): the functions that import a module given its name.
IMPORT_FUNCTIONS = {
    ("importlib", "import_module"),
    ("importlib", "__import__"),
    ("builtins", "__import__"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
SOURCES = {m: p.read_text(encoding="utf-8") for m, p in MODULES.items()}


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


def package_of(module: str) -> str:
    """The package `module`'s relative imports start from (its own, for a package)."""
    path = MODULES.get(module)
    return module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    """An envbuilder module that a source imports, on which line, and whether by name
    (importlib, __import__) rather than by an import statement. `module` is None where the
    source imports by a name the checker cannot read."""

    module: str | None
    line: int
    text: str
    by_name: bool = False


def imports_in(source: str, package: str, known: Collection[str] = MODULES) -> Iterator[Import]:
    """The envbuilder imports of `source`, a module of `package`: its import statements
    (relative ones resolved), then its imports by name. `known`: the module names."""
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for name in _statement_names(node, package, known):
            if (module := known_module(name, known)) is not None:
                yield Import(module, node.lineno, lines[node.lineno - 1])
    yield from _imports_by_name(tree, lines, package, known)


def imports(module: str) -> Iterator[Import]:
    """The envbuilder imports of the package's `module`."""
    return imports_in(SOURCES[module], package_of(module))


def known_module(name: str, known: Collection[str]) -> str | None:
    """The envbuilder module that importing `name` loads (`envbuilder.x.y` where y is a name in
    x: envbuilder.x; a descriptor's `module:Class`: the module); None for another package's."""
    name = name.partition(":")[0]
    if name != "envbuilder" and not name.startswith("envbuilder."):
        return None
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _statement_names(
    node: ast.Import | ast.ImportFrom, package: str, known: Collection[str]
) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, *([base] if base else [])])
    # `from envbuilder.core import grammar` imports the module envbuilder.core.grammar
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def _imports_by_name(
    tree: ast.Module, lines: list[str], package: str, known: Collection[str]
) -> Iterator[Import]:
    functions, modules = _import_aliases(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_import_function(node.func, functions, modules)):
            continue
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        loaded = _loaded(node, tree, package, known)
        if loaded is None:
            loaded = _marked(text, known)
        if loaded is None:
            yield Import(None, node.lineno, text, by_name=True)
        for module in loaded or ():
            yield Import(module, node.lineno, text, by_name=True)


def _import_aliases(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """The names `tree` binds to an import function, and to the importlib and builtins modules
    (name -> which), in any scope: an alias counts wherever it is called."""
    functions = {"__import__"}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.partition(".")[0]  # `import importlib.util` binds importlib
                if a.asname is None and top in ("importlib", "builtins"):
                    modules[top] = top
                elif a.asname is not None and a.name in ("importlib", "builtins"):
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
            functions.update(
                a.asname or a.name for a in node.names if (node.module, a.name) in IMPORT_FUNCTIONS
            )
    _follow_assignments(tree, functions, modules)
    return functions, modules


def _follow_assignments(tree: ast.Module, functions: set[str], modules: dict[str, str]) -> None:
    """Add the names assigned an import function or module (`load = importlib.import_module`,
    `il = importlib`, and chains of them)."""
    assignments = [(t, v) for node in ast.walk(tree) for t, v in _assignment(node)]
    changed = True
    while changed:
        changed = False
        for target, value in assignments:
            if target not in functions and _is_import_function(value, functions, modules):
                functions.add(target)
                changed = True
            elif isinstance(value, ast.Name) and value.id in modules and target not in modules:
                modules[target] = modules[value.id]
                changed = True


def _assignment(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """(name, value) where `node` binds one plain name to a value."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return [(target.id, node.value)] if isinstance(target, ast.Name) else []
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target.id, node.value)] if isinstance(node.target, ast.Name) else []
    return []


def _is_import_function(expr: ast.expr, functions: set[str], modules: dict[str, str]) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in functions
    if not isinstance(expr, ast.Attribute):
        return False
    base = expr.value.id if isinstance(expr.value, ast.Name) else ""
    return expr.attr == "import_module" or (modules.get(base), expr.attr) in IMPORT_FUNCTIONS


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _loaded(
    call: ast.Call, tree: ast.Module, package: str, known: Collection[str]
) -> list[str] | None:
    """The envbuilder modules an import call may load, read from its name argument: a string,
    an f-string's constant prefix, or a loop over a module-level constant list. None when the
    source does not say."""
    arg = _argument(call, 0, "name")
    if isinstance(arg, ast.JoinedStr):
        return _prefixed(arg, known)
    names: list[str | None]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        names = [_absolute(arg.value, call, package)]
    elif isinstance(arg, ast.Name) and (values := _loop_values(tree, call, arg.id)) is not None:
        names = [_absolute(value, call, package) for value in values]
    else:
        return None
    if None in names:
        return None
    return [m for n in names if n is not None and (m := known_module(n, known)) is not None]


def _absolute(name: str, call: ast.Call, package: str) -> str | None:
    """`name` made absolute: import_module's relative name against its `package` argument,
    __import__'s name of `level` > 0 against this module's package. None when unknown."""
    level = _argument(call, 4, "level")
    if isinstance(level, ast.Constant) and isinstance(level.value, int) and level.value > 0:
        name, anchor = "." * level.value + name, package
    elif name.startswith("."):
        given = _argument(call, 1, "package")
        if isinstance(given, ast.Constant) and isinstance(given.value, str):
            anchor = given.value
        elif isinstance(given, ast.Name) and given.id == "__package__":
            anchor = package
        else:
            return None
    else:
        return name
    try:
        return importlib.util.resolve_name(name, anchor)
    except ImportError:
        return None


def _prefixed(arg: ast.JoinedStr, known: Collection[str]) -> list[str] | None:
    """The modules an f-string name may be: those that start with its constant prefix."""
    first = arg.values[0] if arg.values else None
    prefix = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
    if prefix.startswith("envbuilder."):
        return sorted(m for m in known if m.startswith(prefix))
    if "envbuilder.".startswith(prefix):  # f"{name}" or f"env{...}": it may be anything
        return None
    return []  # another package's module (f"torch.{name}")


def _loop_values(tree: ast.Module, call: ast.Call, name: str) -> list[str] | None:
    """The strings of the module-level constant list that `name` loops over around `call`
    (`for _name, module in BUILTINS: import_module(module)`); None when it is no such loop."""
    constants = _constant_lists(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            loops = [(node.target, node.iter)]
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            loops = [(g.target, g.iter) for g in node.generators]
        else:
            continue
        for target, over in loops:
            binds = any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))
            if (
                binds
                and isinstance(over, ast.Name)
                and over.id in constants
                and any(n is call for n in ast.walk(node))
            ):
                return constants[over.id]
    return None


def _constant_lists(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a tuple or list of constants (nested ones too), and the
    strings in it."""
    found = {}
    for node in tree.body:
        for target, value in _assignment(node):
            inner = list(ast.walk(value))
            literal = (ast.Constant, ast.Tuple, ast.List, ast.expr_context)
            if isinstance(value, ast.Tuple | ast.List) and all(
                isinstance(n, literal) for n in inner
            ):
                found[target] = [
                    n.value
                    for n in inner
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
    return found


def _marked(text: str, known: Collection[str]) -> list[str] | None:
    """The modules of the package that a `# import-by-name: <package>` comment names."""
    _before, found, rest = text.partition(MARKER)
    package = rest.split()[0] if found and rest.split() else ""
    loaded = [m for m in known if m == package or m.startswith(package + ".")] if package else []
    return loaded or None


def _layer_name(index: int | None) -> str:
    return "probe" if index is None else LAYERS[index][0]


def _goes_up(mine: int | None, theirs: int | None, imported: str) -> bool:
    if mine is None:  # the probe: nothing of envbuilder outside itself but what it ships
        return theirs is not None and imported not in PROBE_IMPORTS
    return theirs is not None and theirs > mine


def rule_violations(module: str, source: str, known: Collection[str] = MODULES) -> list[str]:
    """What in `source`, the text of `module`, breaks the layer rule: an import (statement or
    by name) up a layer or, from the probe, out of it; an import by a name the source does not
    say. The rule test runs it on every module; the tests below on made-up sources."""
    mine = layer_of(module)
    wrong = []
    for imp in imports_in(source, package_of(module), known):
        where, text = f"{module}:{imp.line}", imp.text.strip()
        if imp.module is None:
            wrong.append(
                f"{where} imports by a name the checker cannot read; say which package it "
                f"loads with `{MARKER} <package>` on its line: {text}"
            )
        elif imp.module != module and _goes_up(mine, theirs := layer_of(imp.module), imp.module):
            how = " by name" if imp.by_name else ""
            wrong.append(
                f"{where} ({_layer_name(mine)}) imports{how} {imp.module} "
                f"({_layer_name(theirs)}): {text}"
            )
    return wrong


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """module -> the modules its import statements import (imports by name left out: see the
    module's docstring)."""
    known = {*MODULES, *sources}
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        graph[module] = set()
        for imp in imports_in(source, package_of(module), known):
            if not imp.by_name and imp.module is not None and imp.module != module:
                graph[module].add(imp.module)
    return graph


def find_circle(graph: Mapping[str, Collection[str]]) -> list[str] | None:
    """A circle of `graph` as the modules along it (the first again at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (circle := visit(nxt)) is not None:
                return circle
        path.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (circle := visit(module)) is not None:
            return circle
    return None


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_a_module_outside_the_stage_packages_has_no_layer() -> None:
    """The root package covers only its own two modules: a new top-level module must be placed."""
    with pytest.raises(AssertionError, match="has no layer"):
        layer_of("envbuilder.unplaced")


def test_no_import_goes_up_a_layer() -> None:
    wrong = [v for module, source in SOURCES.items() for v in rule_violations(module, source)]
    assert not wrong, "imports up a layer:\n" + "\n".join(wrong)


def test_the_import_graph_has_no_circle() -> None:
    circle = find_circle(import_graph(SOURCES))
    assert circle is None, "import circle: " + " -> ".join(circle or ())


def test_a_circle_fails_the_circle_test() -> None:
    """The circle issue 32 made and issue 33 undid: comparison's markdown writer importing the
    guide (inside a function) while the guide imports comparison."""
    comparison, guide = "envbuilder.report.comparison", "envbuilder.report.guide"
    sources = {
        **SOURCES,
        comparison: SOURCES[comparison]
        + "\n\ndef _guide():\n    from envbuilder.report.guide import guide_markdown\n\n"
        "    return guide_markdown\n",
        guide: SOURCES[guide] + "\nfrom envbuilder.report.comparison import compare_reports\n",
    }
    circle = find_circle(import_graph(sources))
    assert circle is not None and {comparison, guide} <= set(circle), circle


#: One module of the descriptors layer importing the docker builder (a layer up), once for each
#: way of importing by name that the checker reads.
UPWARD_BY_NAME = {
    "__import__": '__import__("envbuilder.builders.docker")\n',
    "builtins.__import__": 'import builtins\nbuiltins.__import__("envbuilder.builders.docker")\n',
    "import_module as load": (
        "from importlib import import_module as load\n\n\ndef f():\n"
        '    return load("envbuilder.builders.docker")\n'
    ),
    "importlib as il": 'import importlib as il\n\nil.import_module("envbuilder.builders.docker")\n',
    "assigned alias": (
        "import importlib\n\nload = importlib.import_module\nfetch = load\n"
        'fetch("envbuilder.builders.docker")\n'
    ),
    "relative name": (
        'import importlib\n\nimportlib.import_module("..builders.docker", __package__)\n'
    ),
    "__import__ level": '__import__("builders.docker", globals(), None, [], 2)\n',
    "f-string prefix": (
        "import importlib\n\n\ndef f(name):\n"
        '    return importlib.import_module(f"envbuilder.builders.{name}")\n'
    ),
    "a list of names, as the registry's": (
        'import importlib\n\nMODULES = (("docker", "envbuilder.builders.docker"),)\n\n\n'
        "def load():\n    for _name, module in MODULES:\n        importlib.import_module(module)\n"
    ),
    "a list of names, in a comprehension": (
        'from importlib import import_module\n\nNAMES = ["envbuilder.builders.docker"]\n'
        "LOADED = [import_module(n) for n in NAMES]\n"
    ),
    "a name marked as a package's": (
        "import importlib\n\n\ndef f(name):\n"
        "    return importlib.import_module(name)  # import-by-name: envbuilder.builders\n"
    ),
}


@pytest.mark.parametrize("source", UPWARD_BY_NAME.values(), ids=UPWARD_BY_NAME.keys())
def test_an_import_by_name_up_a_layer_fails_the_rule(source: str) -> None:
    wrong = rule_violations("envbuilder.targets.fake", source)
    assert wrong and all("imports by name envbuilder.builders" in w for w in wrong), wrong
    assert any("envbuilder.builders.docker " in w for w in wrong), wrong


@pytest.mark.parametrize(
    "call",
    [
        "importlib.import_module(name)",
        "importlib.import_module(name)  # import-by-name: torch",
        'importlib.import_module(f"{name}.x")',
        'importlib.import_module("." + name, __package__)',
    ],
)
def test_an_import_by_a_name_the_checker_cannot_read_fails_the_rule(call: str) -> None:
    source = f"import importlib\n\n\ndef f(name):\n    return {call}\n"
    wrong = rule_violations("envbuilder.targets.fake", source)
    assert len(wrong) == 1 and "imports by a name the checker cannot read" in wrong[0], wrong


def test_clean_sources_pass_the_rule() -> None:
    """The same ways of importing, each loading a module of the same or a lower layer, or
    another package's module: nothing to report."""
    down = [
        s.replace("builders.docker", "core.grammar").replace("builders", "core")
        for s in UPWARD_BY_NAME.values()
    ]
    same = [s.replace("builders", "targets") for s in UPWARD_BY_NAME.values()]
    others = (
        "import importlib\n\n\ndef f(name):\n"
        '    importlib.import_module("matplotlib")\n'
        '    return importlib.import_module(f"torch.{name}")\n'
    )
    for source in [*down, *same, others]:
        assert rule_violations("envbuilder.targets.fake", source) == [], source


def test_the_registry_imports_its_built_in_targets_by_name() -> None:
    """The module names listed as strings in targets/registry.py are imports of the registry."""
    by_name = {i.module for i in imports("envbuilder.targets.registry") if i.by_name}
    assert {module for _name, module in registry.BUILTINS} <= by_name


@pytest.mark.parametrize("descriptor", registry.all(), ids=lambda d: d.name)
def test_descriptors_name_builders_in_the_builders_layer(descriptor: object) -> None:
    """builders.lookup imports a descriptor's builder string, marked as a module of
    envbuilder.builders: the mark holds for every registered descriptor."""
    from envbuilder.targets.base import TargetDescriptor

    assert isinstance(descriptor, TargetDescriptor)
    module = descriptor.builder.partition(":")[0]
    assert layer_of(module) == [n for n, _ in LAYERS].index("builders")
    builder_for(descriptor)


def test_the_rule_sees_lazy_and_type_checking_imports() -> None:
    """The checker itself: imports inside a function and under TYPE_CHECKING are found, relative
    ones resolved (so the rule test can fail)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from envbuilder.builders.render import environment\n"
        "def f():\n    from envbuilder.commands._cli import main\n    from . import gzipwriter\n"
        "    return main\n"
    )
    found = sorted(str(i.module) for i in imports_in(source, "envbuilder.image.wsl"))
    assert found == [
        "envbuilder.builders.render",
        "envbuilder.commands._cli",
        "envbuilder.image.wsl.gzipwriter",
    ]
    assert len(rule_violations("envbuilder.image.wsl.fake", source)) == 2

"""No function of the package grows past the sizes issue 24 set (an ast count, so it cannot drift
from what a reader sees): none over 60 lines, at most 10 over 40. Decorators are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "envbuilder"
HARD_LIMIT = 60
SOFT_LIMIT = 40
AT_MOST_OVER_SOFT = 10


def function_lengths(package: Path) -> list[tuple[int, str]]:
    """(length in lines, "path:line name") of every function and method under `package`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{path.relative_to(package.parent)}:{node.lineno} {node.name}"
                found.append((length, where))
    return sorted(found, reverse=True)


def test_the_count_sees_the_package() -> None:
    lengths = function_lengths(PACKAGE)
    assert len(lengths) > 500, "the count found too few functions: wrong folder?"


def test_no_function_is_over_the_hard_limit() -> None:
    over = [
        f"{length} {where}" for length, where in function_lengths(PACKAGE) if length > HARD_LIMIT
    ]
    assert not over, f"functions over {HARD_LIMIT} lines (split them):\n" + "\n".join(over)


def test_few_functions_are_over_the_soft_limit() -> None:
    over = [
        f"{length} {where}" for length, where in function_lengths(PACKAGE) if length > SOFT_LIMIT
    ]
    assert len(over) <= AT_MOST_OVER_SOFT, (
        f"{len(over)} functions over {SOFT_LIMIT} lines, at most {AT_MOST_OVER_SOFT}:\n"
        + "\n".join(over)
    )

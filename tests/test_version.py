"""One version source and one distribution name (issue 34).

envbuilder/__init__.py holds `__version__` and `DISTRIBUTION`; pyproject.toml reads the version
from there (setuptools' `attr`), and every doc line that installs a pinned envbuilder names both.
`nox -s package` (run by .ci/run) builds the wheel and runs `--version` from a clean venv.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuilder import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

#: A pinned install of envbuilder in a doc: `dl-envbuilder==X`, or a tag `@vX` of a git URL
#: (`dl-envbuilder @ git+https://...@vX`).
PINNED = re.compile(r"dl-envbuilder(?:\[[a-z,]+\])?(?:==|\s*@\s*git\+\S+?@v)([0-9][0-9a-z.+-]*)")


def test_the_version_is_read_from_the_package() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "envbuilder.__version__"
    }


def test_the_distribution_name_is_the_packages() -> None:
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    # The test extra pulls in the html extra by the project's own name.
    own = [
        Requirement(r)
        for r in PYPROJECT["project"]["optional-dependencies"]["test"]
        if canonicalize_name(Requirement(r).name) == canonicalize_name(DISTRIBUTION)
    ]
    assert [r.extras for r in own] == [{"html"}]


def test_pinned_installs_in_the_docs_name_this_version() -> None:
    pins = {
        (doc.relative_to(ROOT).as_posix(), m.group(1))
        for doc in DOCS
        for m in PINNED.finditer(doc.read_text("utf-8"))
    }
    assert pins, "docs/ci.md pins an install of this version"
    assert {v for _, v in pins} == {__version__}, sorted(pins)


def test_no_doc_installs_the_unrelated_envbuilder() -> None:
    """`envbuilder` on the default index is an unrelated 2010 project."""
    install = re.compile(r"(?:pip|pipx|uv tool) install ([^\n`#;]*)")
    unrelated = re.compile(r"envbuilder(?:$|[=<>!~\[ @])")
    found = [
        (doc.name, m.group(0))
        for doc in DOCS
        for m in install.finditer(doc.read_text("utf-8"))
        if any(unrelated.match(word.strip("'\"")) for word in m.group(1).split())
    ]
    assert found == []
    assert unrelated.match('"envbuilder==0.1.0"'.strip('"'))  # the line docs/ci.md once had


def test_ci_runs_the_package_session() -> None:
    run = (ROOT / ".ci" / "run").read_text("utf-8")
    assert re.search(r"^\"\$NOX_VENV/bin/nox\" -s package$", run, re.MULTILINE)

"""envbuilder.probe: the pieces that need no check process (pylock, markers, report, zipapp)."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

import envbuilder.probe
from envbuilder.probe import SHIPPED, build_zipapp
from envbuilder.probe.check_collectives import bus_factor
from envbuilder.probe.common import metric
from envbuilder.probe.pylock import (
    LockReadError,
    MarkerError,
    canonical_name,
    evaluate_marker,
    marker_environment,
    normalize_version,
    read_pylock,
)
from envbuilder.probe.report import render_table

PROBE_DIR = Path(envbuilder.probe.__file__).parent
SCHEMA = json.loads(
    (PROBE_DIR.parent / "data" / "schemas" / "probe-report.schema.json").read_text()
)
DATA = Path(__file__).parents[1] / "data" / "probe"


def validate(report: dict[str, object]) -> None:
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(
        report
    )


def _imported(path: Path) -> list[str]:
    """The modules `path` imports (`from a import b` as a.b where a.b is a module of envbuilder)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [
                f"{node.module}.{a.name}"
                if node.module == "envbuilder.core" and a.name == "records"
                else node.module
                for a in node.names
            ]
    return names


def test_probe_imports_only_stdlib_torch_itself_and_what_its_zipapp_ships() -> None:
    shipped = {"envbuilder." + name.removesuffix(".py").replace("/", ".") for name in SHIPPED}
    allowed = set(sys.stdlib_module_names) | {"torch", "envbuilder", "__future__"}
    for path in PROBE_DIR.glob("*.py"):
        for name in _imported(path):
            assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
            if name.startswith("envbuilder"):
                assert (
                    name == "envbuilder" or name.startswith("envbuilder.probe") or (name in shipped)
                ), f"{path.name} imports {name}: the zipapp carries no other module"


def test_what_the_probes_zipapp_ships_imports_only_the_standard_library() -> None:
    """envbuilder.core.records runs in the probe's zipapp, where nothing else is installed."""
    assert SHIPPED == ("core/records.py",)
    for name in SHIPPED:
        imported = _imported(PROBE_DIR.parent / name)
        assert imported, name
        wrong = [m for m in imported if m.split(".")[0] not in sys.stdlib_module_names]
        assert not wrong, f"{name} imports {wrong}"


def test_torch_is_not_imported_at_module_level() -> None:
    """The parent process must never load torch (a broken torch must not break the run)."""
    for path in PROBE_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert not (mod or "").startswith("torch"), f"{path.name} imports torch at top"


@pytest.mark.parametrize(
    ("raw", "canon"),
    [
        ("Typing_Extensions", "typing-extensions"),
        ("zope.interface", "zope-interface"),
        ("A__b-.C", "a-b-c"),
    ],
)
def test_canonical_name(raw: str, canon: str) -> None:
    assert canonical_name(raw) == canon


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("1.0", "1.0.0", True),
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.13.0+cpu", "2.13.0", False),
        ("V1.2", "1.2", True),
        ("1.2", "1.20", False),
        ("1.0rc1", "1.0", False),
    ],
)
def test_normalize_version(a: str, b: str, equal: bool) -> None:
    assert (normalize_version(a) == normalize_version(b)) is equal


def test_markers() -> None:
    env = {
        **marker_environment({}),
        "sys_platform": "linux",
        "python_version": "3.11",
        "platform_machine": "x86_64",
        "python_full_version": "3.11.7",
    }
    assert evaluate_marker("sys_platform == 'linux'", env)
    assert not evaluate_marker('sys_platform == "win32"', env)
    assert evaluate_marker("python_version >= '3.9' and python_version < '3.12'", env)
    assert not evaluate_marker("python_version < '3.10'", env)
    assert evaluate_marker("python_version > '3.9'", env)  # versions, not strings
    assert evaluate_marker(
        "(sys_platform == 'win32' or platform_machine == 'x86_64') "
        "and python_full_version ~= '3.11.0'",
        env,
    )
    assert evaluate_marker("'linux' in sys_platform and 'x' not in extras", env)
    with pytest.raises(MarkerError):
        evaluate_marker("python_version >= ", env)
    with pytest.raises(MarkerError):
        evaluate_marker("no_such_var == '1'", env)


def test_read_pylock_rejects_non_locks(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text('name = "x"\n')
    with pytest.raises(LockReadError, match="lock-version"):
        read_pylock(bad)
    bad.write_text("lock-version = \n")
    with pytest.raises(LockReadError, match="cannot read"):
        read_pylock(bad)


def test_metric_value_is_median() -> None:
    m = metric("tflops", [3.0, 1.0, 2.0], "TFLOP/s", dtype="bf16", size="8192")
    assert m["value"] == 2.0 and m["samples"] == [3.0, 1.0, 2.0]
    with pytest.raises(ValueError):
        metric("x", [], "s")


def test_bus_factor_is_rccl_tests_formula() -> None:
    assert bus_factor(2) == 1.0
    assert bus_factor(8) == pytest.approx(1.75)
    assert bus_factor(1) == 0.0


def test_zipapp_is_deterministic_and_complete(tmp_path: Path) -> None:
    a = build_zipapp(tmp_path / "a" / "probe.pyz")
    b = build_zipapp(tmp_path / "b.pyz")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(a) as zf:
        names = zf.namelist()
        assert names == sorted(names)
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    expected = {f"envbuilder/probe/{p.name}" for p in PROBE_DIR.glob("*.py")}
    assert expected <= set(names)
    assert {"__main__.py", "envbuilder/__init__.py"} <= set(names)
    assert not list(tmp_path.glob("**/*.tmp"))
    assert len(hashlib.sha256(a.read_bytes()).hexdigest()) == 64


def test_schema_accepts_recorded_gpu_report() -> None:
    """A real report from the lent H200 (standard level) validates and renders."""
    report = json.loads((DATA / "h200-standard.json").read_text())
    validate(report)
    table = render_table(report)
    assert "NVIDIA H200" in table and "result: PASS" in table


def test_schema_rejects_broken_reports() -> None:
    report = json.loads((DATA / "h200-standard.json").read_text())
    broken = json.loads(json.dumps(report))
    broken["checks"][0]["status"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    broken = json.loads(json.dumps(report))
    broken["checks"][1]["metrics"][0]["samples"] = []
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    broken = json.loads(json.dumps(report))
    broken["checks"][0].update(status="fail", reason=None)
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_pylock_subset_parser_matches_tomllib() -> None:
    """The Python 3.10 fallback reads a real uv-written pylock like tomllib does."""
    import tomllib

    from envbuilder.probe.pylock import parse_pylock_subset

    for path in (DATA / "uv-pylock.toml", DATA / "marker-pylock.toml"):
        text = path.read_text()
        full, subset = tomllib.loads(text), parse_pylock_subset(text)
        assert [(p["name"], p.get("version"), p.get("marker")) for p in full["packages"]] == [
            (p["name"], p.get("version"), p.get("marker")) for p in subset["packages"]
        ]
        assert full["lock-version"] == subset["lock-version"]
        assert full.get("default-groups") == subset.get("default-groups")


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )


def test_installed_packages_digest_ignores_bootstrap_and_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sites with the same pins but other pip/setuptools and other name spellings hash the
    same; a changed version does not."""
    from envbuilder.probe.check_conformance import installed_packages_digest

    def digest(site: Path, pins: dict[str, str]) -> tuple[str, int]:
        for name, version in pins.items():
            _dist(site, name, version)
        monkeypatch.setattr(sys, "path", [str(site)])
        return installed_packages_digest()

    a = digest(tmp_path / "a", {"Foo_Bar": "1.0", "torch": "2.13.0+cpu", "pip": "23.0.1"})
    b = digest(
        tmp_path / "b",
        {"foo.bar": "1.0", "torch": "2.13.0+cpu", "pip": "26.0", "setuptools": "80.0"},
    )
    c = digest(tmp_path / "c", {"foo-bar": "1.1", "torch": "2.13.0+cpu"})
    text = "foo-bar==1.0\ntorch==2.13.0+cpu\n"
    assert a == b == (hashlib.sha256(text.encode()).hexdigest(), 2)
    assert c[0] != a[0] and c[1] == 2

"""The compare HTML page renders in headless Chromium (Debian's `chromium`) with its charts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuilder.report import comparison, html, reading

DATA = Path(__file__).parents[1] / "data" / "compare"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _need_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed (CI installs it: apt-get install -y chromium)")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def render_dom(page: Path, profile: Path) -> str:
    """The page's DOM after load, as headless Chromium sees it (no network, throw-away profile)."""
    cmd = [
        _need_chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def images_loaded(dom: str) -> tuple[int, int]:
    m = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert m, "the page's load script did not run"
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reports = [reading.load_report(DATA / n) for n in ("cpu.docker.json", "cpu.native.json")]
    comp = comparison.compare_reports(reports)
    return html.write_html(comp, tmp_path_factory.mktemp("html"))


def test_page_renders_with_all_charts_loaded(page: Path, tmp_path: Path) -> None:
    dom = render_dom(page, tmp_path / "profile")
    assert images_loaded(dom) == (3, 3)
    assert "cpu/native" in dom and "within noise" in dom


def test_page_moved_elsewhere_still_loads_its_charts(page: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(page.parent, moved)
    assert images_loaded(render_dom(moved / "index.html", tmp_path / "profile")) == (3, 3)


def test_a_missing_chart_is_detected(page: Path, tmp_path: Path) -> None:
    # Proves the check above can fail: one PNG removed -> 2 of 3 decoded.
    broken = tmp_path / "broken"
    shutil.copytree(page.parent, broken)
    (broken / "chart-membw.png").unlink()
    assert images_loaded(render_dom(broken / "index.html", tmp_path / "profile")) == (2, 3)


def test_page_with_tex_and_markup_labels_renders(tmp_path: Path) -> None:
    """Labels with TeX ("$\\frac{$", which mathtext cannot parse) and rich markup ("[/]") under
    --html: the charts are drawn (mathtext off) and the page loads them all."""
    import json

    reports = []
    for name, env in (("a.json", "$\\frac{$"), ("b.json", "[/]$x^$")):
        data = json.loads((DATA / "cpu.docker.json").read_text())
        data["labels"] = {"env": env, "target": "t"}
        (tmp_path / name).write_text(json.dumps(data))
        reports.append(reading.load_report(tmp_path / name))
    page = html.write_html(comparison.compare_reports(reports), tmp_path / "html")
    dom = render_dom(page, tmp_path / "profile")
    assert images_loaded(dom) == (3, 3)
    assert "$\\frac{$/t" in dom and "[/]$x^$/t" in dom

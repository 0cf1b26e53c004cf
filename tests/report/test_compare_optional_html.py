"""matplotlib is the optional extra `dl-envbuilder[html]`: `compare --html` without it fails clearly
with nothing written, and `compare` without --html never imports it.

Real processes: a Python whose `import matplotlib` fails (a folder first on PYTHONPATH holding a
`matplotlib` package that raises ModuleNotFoundError, as an absent one does) runs the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parents[1] / "data" / "compare"
REPORTS = (str(DATA / "cpu.docker.json"), str(DATA / "cpu.native.json"))
INSTALL_HINT = "pip install 'dl-envbuilder[html]'"

# Runs the real CLI, then writes which matplotlib modules the process imported to argv[1].
CLI_THEN_LIST_MATPLOTLIB = """\
import json, sys
from pathlib import Path
from envbuilder.commands._cli import main
rc = main(sys.argv[2:])
loaded = sorted(m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib."))
Path(sys.argv[1]).write_text(json.dumps(loaded))
sys.exit(rc)
"""

# write_html called as a library in a process without matplotlib; prints the error's message.
WRITE_HTML_WITHOUT_MATPLOTLIB = """\
import sys
from pathlib import Path
from envbuilder.report import comparison, reading, html as compare_html
from envbuilder.core.errors import CompareError
reports = [reading.load_report(Path(p)) for p in sys.argv[2:4]]
try:
    compare_html.write_html(comparison.compare_reports(reports), Path(sys.argv[1]))
except CompareError as exc:
    print(exc)
    sys.exit(1)
"""


def _python(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def no_matplotlib(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import matplotlib (checked, so the tests below
    cannot pass because the shadow package was not found)."""
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )
    path = [str(shadow), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    probe = _python(["-c", "import matplotlib"], tmp_path, env)
    assert probe.returncode == 1 and "No module named 'matplotlib'" in probe.stderr, probe
    return env


def test_html_without_matplotlib_fails_clearly_before_writing(
    tmp_path: Path, no_matplotlib: dict[str, str]
) -> None:
    md, js, html = tmp_path / "c.md", tmp_path / "c.json", tmp_path / "html"
    proc = _python(
        [
            "-m",
            "envbuilder",
            "compare",
            *REPORTS,
            "--markdown",
            str(md),
            "--json",
            str(js),
            "--html",
            str(html),
        ],
        tmp_path,
        no_matplotlib,
    )
    assert proc.returncode == 1, proc.stderr
    assert INSTALL_HINT in proc.stderr and "matplotlib" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # Refused before the reports were compared: no table, and none of the three outputs.
    assert "baseline:" not in proc.stdout
    assert not md.exists() and not js.exists() and not html.exists()


def test_compare_without_html_works_without_matplotlib(
    tmp_path: Path, no_matplotlib: dict[str, str]
) -> None:
    js = tmp_path / "c.json"
    proc = _python(
        ["-m", "envbuilder", "compare", *REPORTS, "--json", str(js)], tmp_path, no_matplotlib
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(js.read_text())["tool"] == "envbuilder-compare"


def test_write_html_without_matplotlib_raises_before_creating_the_folder(
    tmp_path: Path, no_matplotlib: dict[str, str]
) -> None:
    html = tmp_path / "html"
    proc = _python(
        ["-c", WRITE_HTML_WITHOUT_MATPLOTLIB, str(html), *REPORTS], tmp_path, no_matplotlib
    )
    assert proc.returncode == 1, proc.stderr
    assert INSTALL_HINT in proc.stdout, proc.stdout
    assert not html.exists()


@pytest.mark.parametrize("with_html", [False, True])
def test_matplotlib_is_imported_only_for_html(tmp_path: Path, with_html: bool) -> None:
    """Without --html, `envbuilder compare` never imports matplotlib; with it, it does (the
    positive control: proves the check sees an import)."""
    loaded = tmp_path / "loaded.json"
    args = ["compare", *REPORTS, "--json", str(tmp_path / "c.json")]
    if with_html:
        args += ["--html", str(tmp_path / "html")]
    proc = _python(["-c", CLI_THEN_LIST_MATPLOTLIB, str(loaded), *args], tmp_path)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(loaded.read_text())
    assert ("matplotlib" in modules) is with_html, modules

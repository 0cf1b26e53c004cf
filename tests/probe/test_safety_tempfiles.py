"""Temp files are created exclusively, under names no one can predict (issue 30, item 1).

Before: `init` wrote the spec to `.<spec>.init-<pid>` beside it with a plain open() (follows
links, truncates), so a link planted under that name made `init` overwrite the file it points
to, and a regular file of that name was overwritten and deleted; the probe's report, its
zipapp and its per-check results used `<name>.tmp` or `.<name>.<pid>.tmp` the same way. Here a
symbolic link (and a regular file) is planted at every name the old code could pick, and each
write path is run for real: the file the link points to and the planted file are untouched.
A scan of the package keeps predictable temp names from coming back.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from clirun import captured

from envbuilder.probe import build_zipapp
from envbuilder.probe.child import write_result
from envbuilder.probe.cli import write_json

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks: POSIX")

PACKAGE = Path(__file__).resolve().parents[2] / "envbuilder"
VICTIM = b"the user's private file\n"
PLANTED = b"a file someone put there\n"


def plant(folder: Path, names: list[str], tmp_path: Path) -> dict[Path, bytes]:
    """A link to a victim file at the first name, a regular file at the others; returns what
    must stay as it is (the victim's bytes, the planted files' bytes)."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    (folder / names[0]).symlink_to(victim)
    kept = {victim: VICTIM}
    for name in names[1:]:
        (folder / name).write_bytes(PLANTED)
        kept[folder / name] = PLANTED
    return kept


def untouched(kept: dict[Path, bytes]) -> None:
    for path, data in kept.items():
        assert path.read_bytes() == data, path


def test_init_writes_through_no_planted_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    pid = os.getpid()  # init runs in this process: the name the old code picked
    names = [f".environments.toml.init-{pid}", f".environments.toml.init-{pid}.tmp"]
    kept = plant(folder, names, tmp_path)
    spec = folder / "environments.toml"
    code, out = captured(capsys, "init", "--gpu", "cpu", "--os", "linux", "--spec", str(spec))
    assert code == 0, out
    untouched(kept)
    assert spec.is_file() and not spec.is_symlink() and b"[env." in spec.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == sorted([spec.name, *names])


def test_probe_report_zipapp_and_results_write_through_no_planted_link(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    pid = os.getpid()
    kept = plant(folder, ["report.json.tmp"], tmp_path)
    write_json(folder / "report.json", {"status": "pass"})
    assert b'"pass"' in (folder / "report.json").read_bytes()
    untouched(kept)
    kept = plant(folder, [f".probe.pyz.{pid}.tmp"], tmp_path)
    build_zipapp(folder / "probe.pyz")
    assert (folder / "probe.pyz").read_bytes().startswith(b"#!")
    untouched(kept)
    kept = plant(folder, ["result.json.tmp"], tmp_path)
    write_result(folder / "result.json", {"ok": True})
    assert (folder / "result.json").read_bytes() == b'{"ok": true}'
    untouched(kept)
    left = [p.name for p in folder.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
    assert left == []  # no temp file of its own left behind


#: A temp name built from the pid or by appending ".tmp" to the target's name: predictable.
PREDICTABLE = re.compile(r"""getpid\(\)\}[^"\n]*\.tmp|\+ ?["']\.tmp["']|init-\{os\.getpid""")


def test_no_write_path_builds_a_predictable_temp_name() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PREDICTABLE.search(line)
    ]
    assert found == [], "use tempfile.mkstemp beside the target:\n" + "\n".join(found)

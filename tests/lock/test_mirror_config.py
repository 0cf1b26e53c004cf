"""Mirrors are a machine's setting (envbuilder.lock.indexes): ENVBUILDER_MIRROR_<NAME>, then the
user's mirrors file (keyed by the index's canonical URL or its name), then the spec's `mirror`.
The shipped spec names no folder of any machine."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from envbuilder.core.errors import SpecError
from envbuilder.core.model import Index
from envbuilder.lock.indexes import index_source, machine_mirrors, mirrors_file

REPO = Path(__file__).resolve().parents[2]
CANONICAL = "https://download.pytorch.org/whl/cpu"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_shipped_spec_names_no_mirror() -> None:
    doc = tomllib.loads((REPO / "environments.toml").read_text(encoding="utf-8"))
    assert {name: table.get("mirror") for name, table in doc["indexes"].items()} == {
        name: None for name in doc["indexes"]
    }


def test_the_mirrors_file_is_found_where_pip_and_uv_keep_theirs(tmp_path: Path) -> None:
    assert mirrors_file({"XDG_CONFIG_HOME": str(tmp_path)}) == (
        tmp_path / "envbuilder" / "mirrors.toml"
    )
    assert mirrors_file({"ENVBUILDER_MIRRORS_FILE": str(tmp_path / "m.toml")}) == (
        tmp_path / "m.toml"
    )
    assert machine_mirrors({"XDG_CONFIG_HOME": str(tmp_path)}) == {}  # no file: no mirrors


def test_precedence_variable_then_file_then_spec(tmp_path: Path) -> None:
    spec_folder, file_folder, var_folder = (tmp_path / n for n in ("spec", "file", "var"))
    for folder in (spec_folder, file_folder, var_folder):
        folder.mkdir()
    index = Index("pytorch-cpu", CANONICAL, str(spec_folder))
    conf = _write(tmp_path / "m.toml", f'[mirrors]\n"{CANONICAL}" = "{file_folder}"\n')
    env = {"ENVBUILDER_MIRRORS_FILE": str(conf)}

    assert index_source(Index("pytorch-cpu", CANONICAL), tmp_path, {})[0].mirrored is False
    assert index_source(index, tmp_path, {})[0].location == str(spec_folder)
    assert index_source(index, tmp_path, env)[0].location == str(file_folder)
    with_var = {**env, "ENVBUILDER_MIRROR_PYTORCH_CPU": str(var_folder)}
    assert index_source(index, tmp_path, with_var)[0].location == str(var_folder)
    off = {**env, "ENVBUILDER_MIRROR_PYTORCH_CPU": ""}
    assert index_source(index, tmp_path, off)[0].mirrored is False

    # Keyed by the spec's name for the index, and a URL mirror.
    _write(conf, '[mirrors]\npytorch-cpu = "http://127.0.0.1:9/simple"\n')
    source, warning = index_source(Index("pytorch-cpu", CANONICAL), tmp_path, env)
    assert source.mirror_url() == "http://127.0.0.1:9/simple" and warning is None

    # A folder that is not there: the canonical URL, and a warning naming the file's key.
    _write(conf, f'[mirrors]\n"{CANONICAL}" = "{tmp_path / "gone"}"\n')
    source, warning = index_source(Index("pytorch-cpu", CANONICAL), tmp_path, env)
    assert not source.mirrored and warning is not None
    assert str(conf) in warning and "does not exist" in warning


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[mirrors\n", "cannot read the mirrors file"),
        ('mirror = "/srv"\n', "holds one table, [mirrors]"),
        ("[mirrors]\npytorch-cpu = 3\n", "mirrors.'pytorch-cpu' = 3 is not a string"),
        ('[mirrors]\npytorch-cpu = "srv/wheels"\n', "neither an absolute folder nor"),
        ('[mirrors]\npytorch-cpu = "/srv/$(id)"\n', "contains"),
    ],
)
def test_a_bad_mirrors_file_is_an_error_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    conf = _write(tmp_path / "m.toml", text)
    with pytest.raises(SpecError) as err:
        machine_mirrors({"ENVBUILDER_MIRRORS_FILE": str(conf)})
    assert str(conf) in str(err.value) and expected in str(err.value)


def test_a_bad_mirrors_file_stops_lock_with_one_message(tmp_path: Path) -> None:
    """Through the real CLI: a message naming the file, no traceback, nothing written."""
    project = tmp_path / "proj"
    project.mkdir()
    spec = (REPO / "environments.toml").read_text(encoding="utf-8")
    (project / "environments.toml").write_text(spec, encoding="utf-8")
    conf = _write(tmp_path / "m.toml", "[mirrors]\npytorch-cpu = 3\n")
    done = subprocess.run(
        [sys.executable, "-m", "envbuilder", "lock", "--env", "cpu", "--spec", "environments.toml"],
        cwd=project,
        env={"ENVBUILDER_MIRRORS_FILE": str(conf), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert str(conf) in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in project.iterdir()) == ["environments.toml"]

"""Issue 30, item 7: the project's data folders (reports/, .envbuilder/, build/, dist/) are written
only when they are real folders (or envbuilder makes them); a link there is refused with a
message before anything is written, as a job folder's links are (envbuilder.core.datafolders).

The command-line tests build and validate the one-wheel project of test_safety_venv (offline,
about a second) through the real command line, with a link planted where a data folder is; the
folder the link points at must stay empty.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_safety_venv import Tiny, envbuilder, tiny  # noqa: F401 (tiny: the fixture)

from envbuilder.core.datafolders import (
    DATA_FOLDERS,
    DataFolderError,
    check_data_folders,
    real_folders_to,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the native target is Linux-only")


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", DATA_FOLDERS)
def test_a_data_folder_that_is_a_link_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "project"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check_data_folders(root)  # absent: fine (envbuilder makes it)
    (root / name).symlink_to(elsewhere)
    with pytest.raises(DataFolderError) as caught:
        check_data_folders(root)
    message = str(caught.value)
    assert f"cannot write {root / name}: it is a symbolic link (to {elsewhere})" in message
    assert "Nothing was written" in message and "real folder" in message


def test_a_file_or_a_dangling_link_where_a_data_folder_is_is_refused(tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("not a folder\n")
    with pytest.raises(DataFolderError, match=r"reports: it is not a folder"):
        check_data_folders(tmp_path)
    (tmp_path / "reports").unlink()
    (tmp_path / "dist").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DataFolderError, match=r"dist: it is a symbolic link \(to "):
        check_data_folders(tmp_path)


def test_real_folders_pass_and_a_link_deeper_down_is_refused(tmp_path: Path) -> None:
    (tmp_path / "reports" / "slurm").mkdir(parents=True)
    for name in DATA_FOLDERS[1:]:
        (tmp_path / name).mkdir()
    check_data_folders(tmp_path)
    real_folders_to(tmp_path, tmp_path / "reports" / "slurm" / "cpu.native" / "-")
    (tmp_path / "reports" / "slurm" / "cpu.native").symlink_to(tmp_path)
    with pytest.raises(DataFolderError, match=r"cpu.native: it is a symbolic link"):
        real_folders_to(tmp_path, tmp_path / "reports" / "slurm" / "cpu.native" / "-")


def test_paths_outside_the_data_folders_are_the_users_choice(tmp_path: Path) -> None:
    (tmp_path / "mine").symlink_to(tmp_path)
    (tmp_path / "reports").symlink_to(tmp_path)
    real_folders_to(tmp_path, tmp_path / "mine" / "venv" / "x")  # not a data folder
    real_folders_to(tmp_path / "other", tmp_path / "reports" / "x")  # not below that root


def _assert_refused(proc: subprocess.CompletedProcess[str], link: Path, elsewhere: Path) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    message = " ".join(proc.stderr.split())
    assert f"cannot write {link}: it is a symbolic link (to {elsewhere})" in message
    assert _listing(elsewhere) == []


@pytest.mark.parametrize("name", [".envbuilder", "reports"])
def test_build_refuses_a_linked_data_folder_and_writes_nothing_through_it(
    tiny: Tiny,  # noqa: F811
    tmp_path: Path,
    name: str,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tiny.root / name).symlink_to(elsewhere)
    proc = envbuilder("build", "--target", "native", "--env", "tiny", cwd=tiny.root)
    _assert_refused(proc, tiny.root / name, elsewhere)


def test_a_link_below_a_real_data_folder_is_refused_where_it_is_written(
    tiny: Tiny,  # noqa: F811
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tiny.root / ".envbuilder").mkdir()
    (tiny.root / ".envbuilder" / "venvs").symlink_to(elsewhere)
    proc = envbuilder("build", "--target", "native", "--env", "tiny", cwd=tiny.root)
    _assert_refused(proc, tiny.root / ".envbuilder" / "venvs", elsewhere)


def test_validate_refuses_a_linked_reports_folder_and_real_folders_work(
    tiny: Tiny,  # noqa: F811
    tmp_path: Path,
) -> None:
    built = envbuilder("build", "--target", "native", "--env", "tiny", cwd=tiny.root)
    assert built.returncode == 0, built.stderr  # real (new) folders: written
    assert (tiny.root / ".envbuilder" / "venvs" / "tiny-native" / "bin" / "python").exists()
    assert any((tiny.root / "reports").glob("tiny.native.cdx.json"))
    (tiny.root / "reports").rename(tmp_path / "elsewhere")
    for old in (tmp_path / "elsewhere").iterdir():
        old.unlink()
    (tiny.root / "reports").symlink_to(tmp_path / "elsewhere")
    proc = envbuilder(
        "validate", "--target", "native", "--env", "tiny", "--only", "conformance", cwd=tiny.root
    )
    _assert_refused(proc, tiny.root / "reports", tmp_path / "elsewhere")

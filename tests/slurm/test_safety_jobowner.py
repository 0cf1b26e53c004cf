"""Issue 30, item 10: a Slurm job folder is used only when this user made it. A job folder (or its
nodes/, collectives/) that belongs to another user, or that others can write into (group or
other write without the sticky bit), is refused by `fleet` and `validate --slurm` before
anything is read or written; so is a run folder like that before anything is submitted. The
batch script makes the job folder new, 0755, whatever the umask.

Real folders, chmod, and chown to another uid (the tests run as root; skipped otherwise).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from shipped import project_parts
from test_fleet import four_ranks, job_folder, report
from test_safety_jobdir import fleet_cli, written

from envbuilder.commands._cli import main
from envbuilder.core.errors import UsageError
from envbuilder.slurm.run import check_run_dir_owner

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="owners and modes: POSIX")
as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root"
)
OTHER_UID = 4242


def two_nodes(tmp_path: Path) -> Path:
    job = job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, four_ranks())
    for folder in (job, job / "nodes", job / "collectives"):
        folder.chmod(0o755)
    return job


def test_a_job_folder_of_ones_own_is_read(tmp_path: Path) -> None:
    job = two_nodes(tmp_path)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert written(job) != ""


@as_root
@pytest.mark.parametrize("name", ["", "nodes", "collectives"])
def test_a_job_folder_of_another_user_is_refused(tmp_path: Path, name: str) -> None:
    job = two_nodes(tmp_path)
    os.chown(job / name, OTHER_UID, -1)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"{job / name if name else job} belongs to uid {OTHER_UID}, not to you" in said
    assert "Nothing was read" in said
    assert written(job) == ""


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
@pytest.mark.parametrize("name", ["", "nodes"])
def test_a_job_folder_others_can_write_is_refused(tmp_path: Path, name: str, mode: int) -> None:
    job = two_nodes(tmp_path)
    (job / name).chmod(mode)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"can be written by other users (mode {stat.filemode(stat.S_IFDIR | mode)}" in said
    assert written(job) == ""


def test_a_sticky_folder_of_ones_own_is_read(tmp_path: Path) -> None:
    job = two_nodes(tmp_path)
    (job / "nodes").chmod(0o1777)  # others may add, not replace or remove what is there
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@as_root
def test_a_sticky_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    job = two_nodes(tmp_path)
    job.chmod(0o1777)
    os.chown(job, OTHER_UID, -1)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 1 and f"belongs to uid {OTHER_UID}" in proc.stderr


def test_a_run_folder_of_ones_own_or_a_new_one_passes(tmp_path: Path) -> None:
    check_run_dir_owner(tmp_path / "new")
    (tmp_path / "mine").mkdir(mode=0o755)
    check_run_dir_owner(tmp_path / "mine")


@as_root
@pytest.mark.parametrize("how", ["other-user", "group-writable", "world-writable"])
def test_validate_slurm_refuses_a_shared_run_folder_before_anything(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Path(__file__).resolve().parents[2]
    project = tmp_path / "project"
    project.mkdir()
    for name in project_parts():
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, project / name)
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    run_dir.chmod({"other-user": 0o755, "group-writable": 0o775, "world-writable": 0o777}[how])
    if how == "other-user":
        os.chown(run_dir, OTHER_UID, -1)
    with pytest.raises(UsageError):
        check_run_dir_owner(run_dir)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = ["validate", "--slurm", "--target", "native", "--env", "cpu", "--run-dir"]
    code = main([*argv, str(run_dir), "--spec", str(project / "environments.toml")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert f"the run folder {run_dir} " in err and "choose a folder of your own" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_the_batch_script_makes_the_job_folder_new_and_0755() -> None:
    repo = Path(__file__).resolve().parents[2]
    script = (repo / "slurm" / "cpu" / "validate.sbatch").read_text()
    assert 'mkdir -m 0755 -- "$JOB_DIR" || die' in script
    assert 'mkdir -p "$JOB_DIR' not in script

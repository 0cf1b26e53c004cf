"""`envbuilder fleet` on damaged or hostile job folders: FIFOs where small files should be (a
hang), a log of a gigabyte (minutes of CPU and gigabytes of memory), a rank report whose
world_size is not a rank count (a traceback, or a hang for 10**9), node names that are paths,
a node named twice, a bad --noise-floor (a traceback on --json), --out over an input report
(data loss) or with one output blocked (a half-written set).

Each: one message naming the file and key (or the option), exit 1, no traceback, nothing written.
The job folders are laid out as validate.sbatch writes them (tests/report/test_fleet.py's helpers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fleet import four_ranks, job_folder, report

from envbuilder.commands._cli import main
from envbuilder.core.errors import CompareError
from envbuilder.report import fleet, jobfolder


def three_nodes(tmp_path: Path) -> Path:
    nodes = {n: report(n) for n in ("n1", "n2", "n3")}
    return job_folder(tmp_path, nodes, four_ranks())


def fleet_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real process with a timeout: a hang is a failed test, not a stuck suite."""
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "fleet", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("name", ["hosts", "phase", "nodes/n1.exit", "nodes/n1.log"])
def test_fifo_in_the_job_folder_does_not_hang(tmp_path: Path, name: str) -> None:
    """A FIFO with no writer: reading it waited forever (the bug: `fleet` hung). An unreadable
    hosts file is as a missing one (the nodes are those with a report)."""
    job = three_nodes(tmp_path)
    (job / "nodes" / "n1.json").unlink()  # so n1's .exit and .log are read
    (job / name).unlink(missing_ok=True)
    os.mkfifo(job / name)
    proc = fleet_process(str(job), "--format", "json", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    failed = json.loads(proc.stdout)["failed_nodes"]
    assert (proc.returncode, failed) == ((0, []) if name == "hosts" else (1, ["n1"]))


def test_a_huge_log_is_read_from_its_end(tmp_path: Path) -> None:
    """A node log of 1 GiB (sparse: no disk used): only its end is read, lines are cut short."""
    job = three_nodes(tmp_path)
    (job / "nodes" / "n1.json").unlink()
    log = job / "nodes" / "n1.log"
    with log.open("wb") as fh:
        fh.truncate(1 << 30)
        fh.seek(1 << 30)
        fh.write(b"x" * 10_000 + b"\nvalidate.sbatch: cannot pull the image\n")
    result = fleet.read_job_dir(job)
    (problem,) = result.nodes[0].problems
    assert problem.endswith("validate.sbatch: cannot pull the image")
    assert len(problem) < 2 * jobfolder.TAIL_LINE_CHARS + 200
    assert "\x00" not in problem


@pytest.mark.parametrize("size", ["four", [4], 10**9, 0, -3, True, 2.5])
def test_world_size_that_is_not_a_rank_count(tmp_path: Path, size: object) -> None:
    ranks = four_ranks()
    ranks[0]["checks"][0]["details"]["world_size"] = size
    job = job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, ranks)
    result = fleet.read_job_dir(job)
    assert result.cross.failed
    expected = f"{job / 'collectives' / 'all.json'}: details.world_size of the collectives check"
    assert any(p.startswith(expected) for p in result.cross.problems), result.cross.problems
    assert len(result.cross.ranks) == 4  # the reports that are there, no row per phantom rank


def test_node_names_that_are_paths_are_not_read(tmp_path: Path) -> None:
    job = three_nodes(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.json").write_text(json.dumps(report("x")))
    (job / "hosts").write_text(f"n1 a\n../../outside/x b\n{outside / 'x'} c\n..\n")
    result = fleet.read_job_dir(job)
    rows = {r.node: r for r in result.nodes}
    assert rows["n1"].status == "pass"
    for bad in ("../../outside/x", str(outside / "x"), ".."):
        assert rows[bad].status == "no report" and rows[bad].report is None
        assert "is not a node name" in rows[bad].problems[0]
    assert all(outside not in p.parents for p in result.inputs)


def test_a_node_named_twice_is_one_row(tmp_path: Path) -> None:
    job = three_nodes(tmp_path)
    (job / "hosts").write_text("n1 a\nn2 b\nn1 a\nn3 c\n")
    assert [r.node for r in fleet.read_job_dir(job).nodes] == ["n1", "n2", "n3"]


@pytest.mark.parametrize("floor", ["nan", "inf", "-5", "100"])
def test_bad_noise_floor_is_one_message(
    tmp_path: Path, floor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = three_nodes(tmp_path)
    assert main(["fleet", str(job), f"--noise-floor={floor}", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["message"].startswith(f"--noise-floor {float(floor):g}: the noise floor must be")


def test_a_file_or_an_empty_folder_is_not_a_job_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["fleet", str(tmp_path / "file")]) == 1
    assert f"{tmp_path / 'file'}: is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["fleet", str(tmp_path / "empty")]) == 1
    assert f"{tmp_path / 'empty'}: not a job folder" in capsys.readouterr().err


def test_out_over_an_input_report_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out JOB/nodes with a node named "fleet": fleet.json was that node's report (the bug:
    it was replaced by the fleet report)."""
    job = job_folder(tmp_path, {"fleet": report("fleet"), "n2": report("n2")})
    before = (job / "nodes" / "fleet.json").read_bytes()
    assert main(["fleet", str(job), "--out", str(job / "nodes")]) == 1
    err = capsys.readouterr().err
    assert "would overwrite that report" in err and "Traceback" not in err
    assert (job / "nodes" / "fleet.json").read_bytes() == before
    assert sorted(p.name for p in (job / "nodes").iterdir()) == [
        "fleet.exit",
        "fleet.json",
        "n2.exit",
        "n2.json",
    ]


def test_out_with_one_file_blocked_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fleet.html a folder: fleet.json and fleet.md were written before the error (a half set)."""
    job = three_nodes(tmp_path)
    out = tmp_path / "out"
    (out / "fleet.html").mkdir(parents=True)
    assert main(["fleet", str(job), "--out", str(out)]) == 1
    assert f"cannot write {out / 'fleet.html'}: it is a folder" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["fleet.html"]


def test_the_library_error_is_compare_error(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="not a job folder"):
        fleet.read_job_dir(tmp_path)

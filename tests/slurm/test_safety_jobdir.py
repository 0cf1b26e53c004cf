"""A shared job folder cannot leak another user's files (issue 21, faults 3, 5 and 8).

A run folder on a cluster's shared file system can be written by others. Before the fix,
`fleet` and `validate --slurm` followed symlinks there: a `nodes/n1.log` or a `hosts` that is a
link to a private file put that file's content into fleet.md/json/html, written
world-readable; a node name over 255 bytes was an OSError traceback; Slurm's own output
reached the terminal with its escape codes; a `--run-dir` with `%`, `:` or `,` broke sbatch's
--output or the bind mounts, and a missing `hosts` blamed it for a name that came from Slurm.

Here, with real files, links, FIFOs, the console script and the real Slurm cluster:
  * links as hosts, nodes/, collectives/ are refused; links as node files are not read;
  * reports are no more readable than the job folder;
  * a 300-byte node name is a row saying so;
  * a property test: random job folders with links, FIFOs and long names: `fleet` never reads
    a file outside the folder and never shows a traceback;
  * sbatch's refusal is shown with its escape codes replaced; a bad --run-dir is refused
    before anything is written.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SlurmCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shipped import project_parts
from test_fleet import four_ranks, job_folder, report

from envbuilder.commands._cli import main

SECRET = "shadow-like-secret-line"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks, FIFOs: POSIX")


def secret_file(tmp_path: Path) -> Path:
    """A private file of the user who runs `fleet`, outside the job folder."""
    path = tmp_path / "private" / "shadow"
    path.parent.mkdir()
    path.write_text(f"{SECRET}:x:1:\nroot:{SECRET}:0:\n")
    path.chmod(0o600)
    return path


def two_nodes(tmp_path: Path) -> Path:
    return job_folder(tmp_path, {"n1": report("n1"), "n2": report("n2")}, four_ranks())


def fleet_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", "fleet", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def written(job: Path) -> str:
    return "".join(
        (job / name).read_text(errors="replace")
        for name in ("fleet.json", "fleet.md", "fleet.html")
        if (job / name).is_file()
    )


# --- fault 3: links in the job folder -----------------------------------------------------------


@pytest.mark.parametrize("name", ["hosts", "nodes", "collectives"])
def test_a_linked_hosts_nodes_or_collectives_is_refused(tmp_path: Path, name: str) -> None:
    """Before: a `hosts` linked to a shadow-like file made its lines node names in fleet.md;
    a linked nodes/ or collectives/ read someone else's folder. Now: one message, exit 1,
    nothing written, the secret nowhere."""
    job = two_nodes(tmp_path)
    secret = secret_file(tmp_path)
    target = job / name
    if target.is_dir():
        elsewhere = tmp_path / f"elsewhere-{name}"
        target.rename(elsewhere)
        (elsewhere / "n1.log").symlink_to(secret)
        target.symlink_to(elsewhere)
    else:
        target.unlink()
        target.symlink_to(secret)
    proc = fleet_cli(str(job), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "is a symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert written(job) == ""


@pytest.mark.parametrize("name", ["n1.log", "n1.exit", "n1.json"])
def test_a_linked_node_file_is_not_read(tmp_path: Path, name: str) -> None:
    """Before: nodes/n1.log linked to a private file put its lines into the row's problems,
    and the reports were written for everyone to read. Now the link is as a missing file."""
    job = job_folder(tmp_path, {"n1": None, "n2": report("n2")}, four_ranks())
    secret = secret_file(tmp_path)
    (job / "nodes" / name).symlink_to(secret)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1  # n1 has no report
    assert SECRET not in proc.stdout + proc.stderr + written(job)
    assert "n1" in written(job)


@pytest.mark.parametrize("name", ["n1.log", "n1.exit", "n1.json"])
def test_a_hard_linked_node_file_is_not_read(tmp_path: Path, name: str) -> None:
    """Issue 30, item 8: where the system lets another user hard-link a private file into a
    job folder, fleet copied its text into the reports. A file with other names is now as a
    missing one."""
    job = job_folder(tmp_path, {"n1": None, "n2": report("n2")}, four_ranks())
    secret = secret_file(tmp_path)
    os.link(secret, job / "nodes" / name)
    assert (job / "nodes" / name).stat().st_nlink == 2
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1  # n1 has no report
    assert SECRET not in proc.stdout + proc.stderr + written(job)


def test_a_linked_rank_report_is_not_read(tmp_path: Path) -> None:
    job = two_nodes(tmp_path)
    secret = secret_file(tmp_path)
    (job / "collectives" / "all.rank3.json").unlink()
    (job / "collectives" / "all.rank3.json").symlink_to(secret)
    proc = fleet_cli(str(job), "--format", "json", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    ranks = json.loads(proc.stdout)["collectives_across_nodes"]["ranks"]
    assert any(r["rank"] == 3 and r["status"] == "no report" for r in ranks), ranks


@pytest.mark.parametrize(("folder_mode", "report_mode"), [(0o700, 0o600), (0o750, 0o640)])
def test_reports_are_no_more_readable_than_the_job_folder(
    tmp_path: Path, folder_mode: int, report_mode: int
) -> None:
    """Before: fleet.md/json/html were 0644 in a job folder of 0700 or 0750."""
    job = two_nodes(tmp_path)
    job.chmod(folder_mode)
    proc = fleet_cli(str(job), "--out", str(job), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("fleet.json", "fleet.md", "fleet.html"):
        mode = stat.S_IMODE((job / name).stat().st_mode)
        assert mode & ~report_mode == 0, (name, oct(mode))


# --- fault 5: a node name over 255 bytes ---------------------------------------------------------


def test_a_node_name_over_255_bytes_is_a_row_not_a_traceback(tmp_path: Path) -> None:
    """Before: `OSError: File name too long` from fleet. Now the name is a failed row saying
    what is wrong with it, and nothing is read for it."""
    job = two_nodes(tmp_path)
    long_name = "n" * 300
    with (job / "hosts").open("a") as fh:
        fh.write(f"{long_name} 127.0.0.1\n")
    proc = fleet_cli(str(job), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = json.loads(proc.stdout)["nodes"]
    bad = [r for r in rows if r["node"].startswith("nnnn")]
    assert len(bad) == 1 and "over 250 bytes" in " ".join(bad[0]["problems"]), bad


def test_a_bad_name_from_slurm_blames_slurm_not_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fault 8: with no hosts file the names come from Slurm's node list; a bad one must not
    be blamed on a hosts file that does not exist."""
    from envbuilder.report import fleet

    job = two_nodes(tmp_path)
    (job / "hosts").unlink()
    result = fleet.read_job_dir(job, fleet.JobInfo("7", "COMPLETED", nodes=("n1", "../n2")))
    bad = next(r for r in result.nodes if r.node == "../n2")
    assert "Slurm's node list" in bad.problems[0] and "hosts" not in bad.problems[0]


# --- the property: random job folders ------------------------------------------------------------

ENTRY_NAMES = st.sampled_from(
    [
        "hosts",
        "phase",
        "nodes",
        "collectives",
        "nodes/n1.json",
        "nodes/n1.exit",
        "nodes/n1.log",
        "nodes/n2.json",
        "nodes/n2.log",
        "collectives/all.json",
        "collectives/all.rank1.json",
        "collectives/n1.exit",
        "collectives/n1.log",
        "nodes/" + "x" * 251 + ".log",
    ]
)
KINDS = st.sampled_from(["link-secret", "link-dir", "link-dangling", "fifo", "remove", "garbage"])


@st.composite
def hostile_changes(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[str]]:
    changes = draw(st.lists(st.tuples(ENTRY_NAMES, KINDS), min_size=1, max_size=6))
    extra_hosts = draw(
        st.lists(
            st.one_of(
                st.just("x" * 300),
                st.just("../../private/shadow"),
                st.just("/etc/passwd"),
                st.just("n\x1b[31m1"),
                st.text(alphabet="ab./\\\x00\x1b-", min_size=1, max_size=20),
            ),
            max_size=3,
        )
    )
    return changes, extra_hosts


def apply(job: Path, secret: Path, name: str, kind: str) -> None:
    path = job / name
    if not _remove(path, kind):
        return
    if not path.parent.is_dir() or path.parent.is_symlink():
        return
    _plant(path, job, secret, kind)


def _remove(path: Path, kind: str) -> bool:
    """Remove what is at `path` for a change of `kind`; False where the change is a no-op (a
    folder stays a folder when garbage would be written into it)."""
    if path.is_dir() and not path.is_symlink():
        if kind == "garbage":
            return False
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    return True


def _plant(path: Path, job: Path, secret: Path, kind: str) -> None:
    if kind == "link-secret":
        path.symlink_to(secret)
    elif kind == "link-dir":
        path.symlink_to(secret.parent)
    elif kind == "link-dangling":
        path.symlink_to(job / "no-such-file")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "garbage":
        path.write_bytes(b"\x1b]0;title\x07\xff{not json" * 10)


EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@given(hostile=hostile_changes())
@EXAMPLES
def test_fleet_never_reads_outside_the_job_folder(
    hostile: tuple[list[tuple[str, str]], list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whatever links, FIFOs and names a job folder holds, `fleet` (in-process; a FIFO it
    opened for reading would hang it: the test would time out) never shows the content of a
    file outside the folder, never shows a traceback, and exits 0, 1 or 2."""
    import tempfile

    base = Path(tempfile.mkdtemp(dir=tmp_path))
    job = two_nodes(base)
    secret = secret_file(base)
    changes, extra_hosts = hostile
    for name, kind in changes:
        apply(job, secret, name, kind)
    hosts = job / "hosts"
    if hosts.is_file() and not hosts.is_symlink():
        with hosts.open("a", encoding="utf-8", errors="surrogateescape") as fh:
            fh.writelines(f"{name} 127.0.0.1\n" for name in extra_hosts)
    try:
        code = main(["fleet", str(job), "--format", "json", "--out", str(base / "out")])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (0, 1), err
    assert SECRET not in out + err + written(base / "out")
    assert "\x1b" not in out + err


# --- fault 8: Slurm's output and the run folder -------------------------------------------------


def test_sbatch_refusal_shows_no_escape_codes(
    tmp_path: Path, slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition name holding an escape sequence: sbatch refuses it and says its name; the
    message reaches the user with the escape codes replaced (before: as they were)."""
    from envbuilder.slurm import job as slurm_job

    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\ntrue\n")
    with pytest.raises(slurm_job.SlurmError) as exc:
        slurm_job.submit(script, ["--partition=\x1b]0;pwned\x07evil"], dict(os.environ), tmp_path)
    message = str(exc.value)
    assert "sbatch failed" in message and "evil" in message, message
    assert "\x1b" not in message and "\x07" not in message


@pytest.mark.parametrize("char", ["%", ":", ","])
def test_a_run_dir_sbatch_would_misread_is_refused_up_front(
    tmp_path: Path, char: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--run-dir` with '%', ':' or ',' is a usage error before anything is written or
    submitted (no Slurm needed: the refusal comes first)."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    for name in project_parts():
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    run_dir = tmp_path / f"run{char}dir"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(
        [
            "validate",
            "--slurm",
            "--target",
            "native",
            "--env",
            "cpu",
            "--run-dir",
            str(run_dir),
            "--spec",
            str(tmp_path / "environments.toml"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"holds {char!r}" in err and "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before

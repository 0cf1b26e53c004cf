"""Corrupt state files end in a message, never a traceback or a hang (issue 30, item 5).

Before: an owner file (`.envbuilder-owner.json`) whose pid was too large for the OS, a string,
a float or a bool made every writing command end in a traceback (OverflowError in os.kill); a
receipt, owner file or journal of deeply nested JSON in RecursionError; a FIFO where a receipt
is expected made `check` and `lock --check` hang; a relative XDG_STATE_HOME put the receipts
into the project, and one too long for the OS ended in a traceback. Here with real files,
FIFOs, links and processes (each run that could hang is a child process with a timeout):
every such file is "not a file envbuilder wrote", named, with what to do.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from clirun import as_process, captured
from shipped import copy_shipped

from envbuilder.core import journalfile, receipts, stale
from envbuilder.core.statefile import (
    MAX_DEPTH,
    StateFileError,
    UserFile,
    parse_json,
    parse_toml,
    pid_field,
    read_state,
)
from envbuilder.lock.indexes import machine_mirrors

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, /proc, /sys")

TOKEN = "a1b2c3d4e5f6"
DEEP_JSON = "[" * 200_000 + "]" * 200_000
#: A run that would hang on a FIFO is ended after this; a run takes a few seconds.
HANG_S = 120


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def child_env(state: Path, tmp: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return env


# --- owner files of work folders ----------------------------------------------------------------

BAD_OWNERS = [
    pytest.param(json.dumps({"pid": 2**70, "start": "1"}), id="pid-too-large"),
    pytest.param(json.dumps({"pid": -5, "start": "1"}), id="pid-negative"),
    pytest.param(json.dumps({"pid": 0, "start": "1"}), id="pid-zero"),
    pytest.param(json.dumps({"pid": "123", "start": "1"}), id="pid-string"),
    pytest.param(json.dumps({"pid": 1.5, "start": "1"}), id="pid-float"),
    pytest.param(json.dumps({"pid": True, "start": "1"}), id="pid-bool"),
    pytest.param(json.dumps([1, 2]), id="not-an-object"),
    pytest.param(DEEP_JSON[:4000], id="deep-json"),  # the owner file is read up to 4 KiB
]


@pytest.mark.parametrize("content", BAD_OWNERS)
def test_an_owner_file_envbuilder_never_writes_is_named_and_kept(
    content: str,
    tmp_path: Path,
    project: Path,
    state: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A writing command (render) goes on, says which owner file is not envbuilder's and what to
    do, and keeps the folder; before, OverflowError or RecursionError ended every writer."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    folder = temp / "envbuilder-lock-leftover"
    folder.mkdir()
    (folder / stale.OWNER).write_text(content)
    code, out = captured(
        capsys, "render", "--env", "cpu", "--spec", str(project / "environments.toml")
    )
    assert code == 0, out
    assert "Traceback" not in out
    assert f"{folder / stale.OWNER}: not a file envbuilder wrote" in out, out
    assert f"remove {folder} yourself" in out, out
    assert folder.is_dir()


def test_a_fifo_as_owner_file_does_not_hang_a_writer(
    tmp_path: Path, project: Path, state: Path
) -> None:
    temp = tmp_path / "tmp"
    folder = temp / "envbuilder-lock-fifo"
    folder.mkdir(parents=True)
    os.mkfifo(folder / stale.OWNER)
    done = as_process(
        "render", "--env", "cpu", "--spec", str(project / "environments.toml"),
        cwd=project, env=child_env(state, temp), timeout=HANG_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert folder.is_dir()  # not provably envbuilder's: kept


# --- receipts and journals ----------------------------------------------------------------------


def plant_journal(project: Path) -> None:
    doc = {"version": 2, "state": "prepared", "token": TOKEN, "files": [], "folders": []}
    (project / journalfile.JOURNAL).write_text(json.dumps(doc))


def receipt_path(state: Path) -> Path:
    folder = state / "envbuilder" / "commits"
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    state.chmod(0o700)
    (state / "envbuilder").chmod(0o700)
    return folder / f"{TOKEN}.json"


def _receipt_fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def _receipt_deep(path: Path) -> None:
    path.write_text(DEEP_JSON[:60000])


def _receipt_types(path: Path) -> None:
    path.write_text(
        json.dumps({"version": 1, "root": 1, "device": "x", "inode": 2.5, "journals": 3})
    )


def _receipt_link(path: Path) -> None:
    real = path.with_name("real.txt")
    real.write_text("{}")
    path.symlink_to(real)


def _receipt_huge(path: Path) -> None:
    path.write_bytes(b" " * 70000 + b"{}")


RECEIPTS = [
    pytest.param(_receipt_fifo, "named pipe", id="fifo"),
    pytest.param(_receipt_deep, "nests deeper", id="deep"),
    pytest.param(_receipt_types, "not a receipt's", id="types"),
    pytest.param(_receipt_link, "symbolic link", id="link"),
    pytest.param(_receipt_huge, "over 65536", id="huge"),
]


@pytest.mark.parametrize(("make", "why"), RECEIPTS)
def test_a_receipt_envbuilder_never_writes_is_refused_by_readers_and_writers(
    make: object, why: str, project: Path, state: Path
) -> None:
    """`check` and `lock --check` (read-only) report the journal and what is wrong with its
    receipt, at once (a FIFO used to hang them); `render` refuses it with exit 1."""
    plant_journal(project)
    receipt = receipt_path(state)
    assert callable(make)
    make(receipt)
    spec = str(project / "environments.toml")
    env = child_env(state)
    for argv in (("check",), ("lock", "--check")):
        looked = as_process(*argv, "--spec", spec, cwd=project, env=env, timeout=HANG_S)
        assert "Traceback" not in looked.stderr, looked.stderr
        assert f"{receipt}: not a file envbuilder wrote" in looked.stderr, looked.stderr
        assert why in looked.stderr
    wrote = as_process("render", "--spec", spec, cwd=project, env=env, timeout=HANG_S)
    assert wrote.returncode == 1, wrote.stderr
    assert "Traceback" not in wrote.stderr and "not finished or undone" in wrote.stderr
    assert (project / journalfile.JOURNAL).is_file()  # left alone


def test_a_deeply_nested_journal_is_refused_without_a_traceback(
    project: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / journalfile.JOURNAL).write_text(DEEP_JSON)
    spec = str(project / "environments.toml")
    code, out = captured(capsys, "check", "--spec", spec)
    assert code == 0 and "Traceback" not in out, out
    assert "not a journal envbuilder writes" in out
    code, out = captured(capsys, "render", "--spec", spec)
    assert code == 1 and "not a journal envbuilder writes" in out, out


# --- the mirrors file ---------------------------------------------------------------------------


def test_a_mirrors_file_that_is_a_fifo_deep_or_huge_is_a_message(tmp_path: Path) -> None:
    """A FIFO is refused at once (run in a child: the old reader waited for a writer)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    code = (
        "import sys\nfrom envbuilder.lock.indexes import machine_mirrors\n"
        "from envbuilder.core.errors import SpecError\n"
        f"try:\n    machine_mirrors({{'ENVBUILDER_MIRRORS_FILE': {str(fifo)!r}}})\n"
        "except SpecError as exc:\n    print(exc)\n"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S, check=False
    )
    assert f"{fifo}: it is a named pipe (FIFO), not a regular file" in done.stdout, done
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (2 << 20))
    for path, why in ((deep, "nests deeper than"), (huge, "bytes, over")):
        with pytest.raises(Exception, match="mirrors file") as info:
            machine_mirrors({"ENVBUILDER_MIRRORS_FILE": str(path)})
        assert f"{path}: it" in str(info.value) and why in str(info.value)
        assert "not a file envbuilder wrote" not in str(info.value)  # the user writes it


def test_a_linked_mirrors_file_is_read(tmp_path: Path) -> None:
    """A config file may be a link (stow, home-manager): the mirrors file is read through one."""
    real = tmp_path / "real.toml"
    real.write_text('[mirrors]\n"https://example.org/simple" = "/srv/wheels"\n')
    link = tmp_path / "mirrors.toml"
    link.symlink_to(real)
    assert machine_mirrors({"ENVBUILDER_MIRRORS_FILE": str(link)}) == {
        "https://example.org/simple": "/srv/wheels"
    }


# --- the state folder ---------------------------------------------------------------------------


def test_a_relative_state_home_is_ignored(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The XDG spec: a relative XDG_STATE_HOME is invalid and ignored. Before, the receipts
    folder was made inside the folder the command ran in (here, the project)."""
    monkeypatch.setenv("XDG_STATE_HOME", "state")
    monkeypatch.chdir(project)
    assert receipts.state_dir() == Path.home() / ".local" / "state" / "envbuilder"
    code, out = captured(capsys, "render", "--env", "cpu", "--spec", "environments.toml")
    assert code == 0, out
    assert not (project / "state").exists()


UNUSABLE = [
    pytest.param("TMP/" + "x" * 300, "over the limit of 255", id="name-too-long"),
    pytest.param("TMP" + "/x" * 2100, "over the system's limit", id="path-too-long"),
    pytest.param("/sys/envbuilder-test-state", "not permitted", id="unwritable"),
    pytest.param("TMP/file/below", "is a file, not a folder", id="file-in-the-way"),
]


@pytest.mark.parametrize(("value", "why"), UNUSABLE)
def test_an_unusable_state_folder_stops_a_writer_before_any_work(
    value: str, why: str, tmp_path: Path, project: Path
) -> None:
    """`render` ends with exit 1 and one message naming the folder, before it writes anything
    (a removed rendered file stays removed); read-only commands do not need the folder."""
    (tmp_path / "file").write_text("x")
    value = value.replace("TMP", str(tmp_path))
    gone = project / "dockerfiles" / "cpu" / "Dockerfile"
    gone.unlink()
    env = {**os.environ, "XDG_STATE_HOME": value}
    spec = str(project / "environments.toml")
    wrote = as_process("render", "--env", "cpu", "--spec", spec, cwd=project, env=env)
    assert wrote.returncode == 1, wrote.stderr
    assert "Traceback" not in wrote.stderr
    assert "XDG_STATE_HOME" in wrote.stderr and why in wrote.stderr, wrote.stderr
    assert not gone.exists()
    assert not (tmp_path / "x").exists()  # no folder made part-way
    looked = as_process("check", "--spec", spec, cwd=project, env=env)
    assert looked.returncode == 0, looked.stderr


# --- the reader itself --------------------------------------------------------------------------


def test_depth_is_counted_outside_strings_and_comments(tmp_path: Path) -> None:
    where = tmp_path / "f"
    brackets = "[" * (MAX_DEPTH * 3)
    assert parse_json(json.dumps({"a": brackets}).encode(), where, "") == {"a": brackets}
    toml = f'a = \'{brackets}\'\nb = """{brackets}\\"""" # {brackets}\n'
    assert parse_toml(toml.encode(), where, "")["a"] == brackets
    nested = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(StateFileError, match="nests deeper"):
        parse_json(nested.encode(), where, "")
    with pytest.raises(StateFileError, match="nests deeper"):
        parse_toml(f"x = {nested}".encode(), where, UserFile("fix it"))
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_json(ok.encode(), where, "") is not None


@pytest.mark.parametrize("value", [2**70, 2**31, -1, 0, "7", 7.0, True, False, None, [7], {"p": 7}])
def test_pid_field_takes_only_process_ids(value: object, tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="is not a process id"):
        pid_field({"pid": value}, "pid", tmp_path / "owner", "remove it")
    assert pid_field({"pid": 4242}, "pid", tmp_path / "owner", "remove it") == 4242


def test_read_state_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    assert read_state(tmp_path / "missing", 10, "json", "") is None
    (tmp_path / "dir").mkdir()
    with pytest.raises(StateFileError, match="a folder"):
        read_state(tmp_path / "dir", 10, "json", "")
    with pytest.raises(StateFileError, match="a device"):
        read_state(Path("/dev/zero"), 10, "json", "", follow=True)
    with pytest.raises(StateFileError, match="not UTF-8"):
        parse_json(b"\xff", tmp_path / "f", "")

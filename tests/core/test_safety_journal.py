"""A commit journal cannot be turned against the user (issue 21, faults 1 and 2).

A journal (`.envbuilder-commit.json`) that arrives with a checkout, a pull request or a copy is
never carried out: recovery needs a receipt in the user's own state folder, keeps to the
writing command's output folders and walks paths without following a link. Here, with real
files, symlinks and killed processes:

  * fault 1: planted journals (the old format and the new one) naming `src/main.py`,
    `.git/HEAD` and `environments.toml`, with planted temp files: `check` and every other
    command leave them byte-identical (read-only commands report the journal and name the
    command that finishes it; writing ones refuse it);
  * fault 2: the same through a committed symlink to a folder outside the project;
  * a journal envbuilder really wrote (a commit killed with SIGKILL, or stopped at its commit
    point) is finished or undone, but not when an output folder was swapped for a symlink
    since, a temp file was changed, or the journal was copied into another checkout;
  * a property test: random journals (paths inside and outside, through symlinks, into
    `.git`, absolute, `..`, huge, with and without a receipt) given to every command leave
    every file outside the command's own output set byte-identical.

The tests only use envbuilder through its command line (envbuilder.commands._cli.main, in-process,
or the console script), so that the same file runs against an older envbuilder to see the faults.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import captured
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shipped import rendered_folders

from envbuilder.commands._cli import main

REPO = Path(__file__).resolve().parents[2]
JOURNAL = ".envbuilder-commit.json"
RENDERED = rendered_folders()
TOKEN = "a1b2c3d4e5f6"
VICTIMS = {
    "src/main.py": b"print('the user\\'s code')\n",
    ".git/HEAD": b"ref: refs/heads/main\n",
    "notes.txt": b"the user's notes\n",
}

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and SIGKILL: POSIX")


# --- a project with things worth protecting -----------------------------------------------------


def make_project(base: Path) -> tuple[Path, Path]:
    """(project, outside): a copy of the shipped project with user files, a fake .git, and a
    committed symlink `docs-assets` to a folder outside it holding a private file."""
    project = base / "project"
    project.mkdir(parents=True)
    shutil.copy(REPO / "environments.toml", project)
    for name in ("lockfiles", *RENDERED):
        shutil.copytree(REPO / name, project / name)
    for rel, data in VICTIMS.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_bytes(data)
    outside = base / "home"
    outside.mkdir()
    (outside / "private.txt").write_bytes(b"outside the project\n")
    (outside / ".private.txt.a1b2c3d4e5f6.tmp").write_bytes(b"planted replacement\n")
    (project / "docs-assets").symlink_to(outside)
    return project, outside


def snapshot(*roots: Path) -> dict[str, bytes | str | None]:
    """Every file (bytes), link (its target) and folder (None) below `roots`."""
    found: dict[str, bytes | str | None] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            key = str(path)
            if path.is_symlink():
                found[key] = str(path.readlink())
            elif path.is_dir():
                found[key] = None
            else:
                found[key] = path.read_bytes()
    return found


def outside_output_set(project: Path, snap: dict[str, bytes | str | None]) -> dict[str, object]:
    """`snap` without the files the writing commands may change: the rendered output folders,
    lock file names in lockfiles/, and a journal in one of those two roots."""
    kept: dict[str, object] = {}
    for key, value in snap.items():
        path = Path(key)
        try:
            rel = path.relative_to(project)
        except ValueError:
            kept[key] = value
            continue
        parts = rel.parts
        if parts[0] in RENDERED or (parts[0] == "lockfiles" and len(parts) <= 2):
            continue
        if rel.as_posix() == JOURNAL:
            continue
        kept[key] = value
    return kept


def plant(root: Path, journal: object, temps: dict[str, bytes] | None = None) -> None:
    """A journal (and temp files beside its targets) as a checkout could carry them."""
    text = journal if isinstance(journal, str) else json.dumps(journal)
    (root / JOURNAL).write_text(text, encoding="utf-8")
    for rel, data in (temps or {}).items():
        target = root / rel
        try:  # where the name can be a file beside an existing folder (not one too long)
            if target.parent.is_dir() and not target.parent.is_symlink():
                (target.parent / f".{target.name}.{TOKEN}.tmp").write_bytes(data)
        except OSError:
            continue


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty per-user state folder: no receipt of any commit."""
    folder = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


# --- fault 1: a planted journal deletes project files ------------------------------------------


def _old_format(files: list[dict[str, object]]) -> dict[str, object]:
    return {"version": 1, "state": "committed", "token": TOKEN, "files": files, "folders": []}


def _new_format(files: list[dict[str, object]]) -> dict[str, object]:
    return {"version": 2, "state": "committed", "token": TOKEN, "files": files, "folders": []}


PLANTED = [
    pytest.param(
        _old_format(
            [
                {"path": "src/main.py", "new": False},
                {"path": ".git/HEAD", "new": False},
                {"path": "environments.toml", "new": True},
            ]
        ),
        id="old-format",
    ),
    pytest.param(
        _new_format(
            [
                {"path": "src/main.py", "sha256": None},
                {"path": ".git/HEAD", "sha256": None},
                {"path": "notes.txt", "sha256": "0" * 64},
            ]
        ),
        id="new-format",
    ),
]


@pytest.mark.parametrize("journal", PLANTED)
def test_a_planted_journal_changes_nothing(
    journal: dict[str, object], tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fault 1: before the fix `envbuilder check` deleted src/main.py and .git/HEAD and renamed
    the planted temp over environments.toml. Now read-only commands report the journal and
    change nothing; a writing command refuses it (exit 1) and changes nothing either."""
    project, outside = make_project(tmp_path)
    temps = {"environments.toml": b"[env.evil]\n", "notes.txt": b"replaced\n"}
    plant(project, journal, temps)
    before = snapshot(project, outside)
    spec = str(project / "environments.toml")
    readers: list[tuple[str, ...]] = [("check",), ("lock", "--check"), ("render", "--check")]
    for argv in readers:
        code, err = captured(capsys, *argv, "--spec", spec)
        assert code == 0, err
        assert "not finished or undone" in err and "no receipt" in err, err
        assert snapshot(project, outside) == before, argv
    writers: list[tuple[str, ...]] = [("render",), ("lock", "--env", "cpu")]
    for argv in writers:
        code, err = captured(capsys, *argv, "--spec", spec)
        assert code == 1, err
        assert "Traceback" not in err and "not finished or undone" in err, err
        assert snapshot(project, outside) == before, argv


# --- fault 2: through a committed symlink, outside the project ---------------------------------


def test_a_planted_journal_through_a_symlink_touches_nothing_outside(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fault 2: a journal naming docs-assets/private.txt (docs-assets -> a folder outside) made
    `lock --check` delete that file and exit 0. Now nothing outside is touched, and the journal
    is reported."""
    project, outside = make_project(tmp_path)
    for root in (project, project / "lockfiles"):
        plant(
            root,
            _old_format(
                [
                    {"path": "docs-assets/private.txt", "new": False},
                    {"path": "docs-assets/.private.txt", "new": True},
                ]
            ),
        )
    before = snapshot(project, outside)
    code, err = captured(capsys, "lock", "--check", "--spec", str(project / "environments.toml"))
    assert code == 0, err
    assert err.count("not finished or undone") == 2, err
    assert snapshot(project, outside) == before


# --- journals envbuilder really wrote ----------------------------------------------------------

CRASHER = """
import os, signal, sys
from pathlib import Path
from envbuilder.core.journal import commit_files
from envbuilder.core.project import Project
from envbuilder.builders.render import commit_scope
from envbuilder.slurm.script import SCRIPTS

project = Project.from_spec(sys.argv[1])
how = sys.argv[2]
files = {project.root / rel: data.encode() for rel, data in (
    ("dockerfiles/zz/Dockerfile", "FROM scratch\\n"),
    ("dockerfiles/zz/extra.txt", "new extra\\n"),
    ("wsl/zz/wsl.conf", "[boot]\\n"),
)}
last = max(files)

def mode(path):
    if path == last and how == "kill":  # the last temp file is not written yet: prepared
        os.kill(os.getpid(), signal.SIGKILL)
    if path == last and how == "stall":  # a non-empty folder where the file goes: the
        (path / "blocker").mkdir(parents=True)  # renames after the commit point fail
    return 0o644

commit_files(project.root, files, commit_scope(project, (SCRIPTS,)), mode)
"""


def crash(project: Path, how: str) -> None:
    """A real commit of three rendered files in a child process, stopped `how`: "kill"
    (SIGKILL before the commit point: the journal says prepared) or "stall" (a folder in the
    way of the last rename, so the commit stops after its commit point: committed)."""
    proc = subprocess.run(
        [sys.executable, "-c", CRASHER, str(project / "environments.toml"), how],
        capture_output=True,
        text=True,
        check=False,
    )
    if how == "kill":
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    else:
        assert proc.returncode == 1 and "cannot write" in proc.stderr, proc.stderr
        shutil.rmtree(project / "wsl" / "zz" / "wsl.conf")
    assert '"state": "' in (project / JOURNAL).read_text()


@pytest.mark.parametrize("how", ["kill", "stall"])
def test_a_journal_envbuilder_wrote_is_finished_or_undone(
    how: str, tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real thing still works: a commit killed before its commit point is undone (no temp
    file, no new folder), one stopped after it is finished (all three files new); read-only
    commands leave it for `render`, which does it; no receipt is left."""
    project, outside = make_project(tmp_path)
    crash(project, how)
    before = snapshot(project, outside)
    spec = str(project / "environments.toml")
    code, err = captured(capsys, "check", "--spec", spec)
    assert code == 0 and "`envbuilder render` finishes or undoes it" in err, err
    assert snapshot(project, outside) == before
    code, err = captured(capsys, "render", "--env", "cpu", "--spec", spec)
    assert code == 0, err
    assert not (project / JOURNAL).exists()
    temps = [p for p in project.rglob("*.tmp")]
    assert temps == []
    if how == "kill":
        assert "undid an interrupted `envbuilder render`" in err
        assert not (project / "dockerfiles" / "zz").exists()
    else:
        assert "finished an interrupted `envbuilder render`" in err
        assert (project / "wsl" / "zz" / "wsl.conf").read_text() == "[boot]\n"
        assert (project / "dockerfiles" / "zz" / "extra.txt").read_text() == "new extra\n"
    assert list(state.rglob("*.json")) == []


def test_a_folder_swapped_for_a_symlink_is_not_followed(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A journal envbuilder wrote (committed, with a receipt), then `dockerfiles/zz` replaced by
    a symlink to a folder outside that holds files of the same names: recovery refuses it and
    touches nothing there."""
    project, outside = make_project(tmp_path)
    crash(project, "stall")
    token = json.loads((project / JOURNAL).read_text())["token"]
    zz = project / "dockerfiles" / "zz"
    lure = tmp_path / "lure"
    lure.mkdir()
    for path in zz.iterdir():
        (lure / path.name).write_bytes(b"outside, same name\n")
    (lure / "Dockerfile").write_bytes(b"outside Dockerfile\n")
    (lure / f".extra.txt.{token}.tmp").write_bytes(b"new extra\n")
    shutil.rmtree(zz)
    zz.symlink_to(lure)
    before = snapshot(project, outside, lure)
    code, err = captured(
        capsys, "render", "--env", "cpu", "--spec", str(project / "environments.toml")
    )
    assert code == 1 and "is a symbolic link" in err, err
    assert snapshot(project, outside, lure) == before


def test_a_changed_temp_file_or_a_copied_journal_is_refused(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A temp file whose bytes are not the ones the journal records is not renamed into place;
    the same journal and temp files copied into another checkout are not carried out there."""
    project, outside = make_project(tmp_path)
    crash(project, "stall")
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    temp = next((project / "wsl" / "zz").glob(".wsl.conf.*.tmp"))  # the rename left to do
    temp.write_bytes(b"[evil]\n")
    for root in (project, copy):
        before = snapshot(root, outside)
        code, err = captured(
            capsys, "render", "--env", "cpu", "--spec", str(root / "environments.toml")
        )
        assert code == 1 and "not finished or undone" in err, err
        assert snapshot(root, outside) == before
    assert (
        "does not hold the bytes it records"
        in captured(capsys, "render", "--spec", str(project / "environments.toml"))[1]
    )
    assert (
        "for another folder"
        in captured(capsys, "render", "--spec", str(copy / "environments.toml"))[1]
    )


def test_render_writes_through_no_symlinked_output_folder(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A committed `dockerfiles -> ~`-style link: `render` stops naming the link, and nothing
    outside the project is written (before: the Dockerfiles went into the link's target)."""
    project, outside = make_project(tmp_path)
    target = tmp_path / "linked"
    shutil.move(str(project / "dockerfiles"), target)
    (project / "dockerfiles").symlink_to(target)
    for path in target.rglob("Dockerfile"):
        path.write_text("stale\n")
    before = snapshot(project, outside, target)
    code, err = captured(capsys, "render", "--spec", str(project / "environments.toml"))
    assert code == 1, err
    assert "dockerfiles is a symbolic link" in err and "Traceback" not in err, err
    assert snapshot(project, outside, target) == before


# --- the property: random journals, every command ----------------------------------------------

COMMANDS: list[tuple[str, ...]] = [
    ("check",),
    ("lock", "--check"),
    ("lock", "--env", "cpu"),
    ("render", "--check"),
    ("render",),
    ("build", "--target", "native", "--env", "nosuch"),
    ("push", "--env", "nosuch", "--registry", "127.0.0.1:9/x"),
    ("pull", "--env", "nosuch"),
    ("validate", "--target", "native", "--env", "nosuch"),
    ("doctor", "--env", "cpu"),
    ("compare", str(REPO / "tests/data/compare/cpu.docker.json"), "missing.json"),
    ("fleet", "no-such-job-folder"),
    ("explain", "No HIP GPUs are available"),
    ("probe", "--json", ""),
]
TAKES_SPEC = {"check", "lock", "render", "build", "push", "pull", "validate", "doctor"}

#: Paths a hostile journal may name (relative to the root it is planted in).
PATHS = st.one_of(
    st.sampled_from(
        [
            "src/main.py",
            ".git/HEAD",
            "environments.toml",
            "notes.txt",
            "lockfiles/cpu.lock.toml",
            "cpu.lock.toml",
            "pylock.cpu-docker.toml",
            "dockerfiles/cpu/Dockerfile",
            "dockerfiles/zz/new.txt",
            "docs-assets/private.txt",
            "dockerfiles/../src/main.py",
            "../home/private.txt",
            "../project/src/main.py",
            "./notes.txt",
            "src//main.py",
            "src\\main.py",
            "C:/x",
            "",
        ]
    ),
    st.just("x/" * 3000 + "y"),
    st.just("a" * 300),
    st.text(alphabet="ab./\\:~-", min_size=1, max_size=12),
)


@st.composite
def journals(draw: st.DrawFn, outside: str) -> tuple[object, dict[str, bytes], bool]:
    """(journal document or text, temp files to plant beside its targets, whether to forge a
    receipt for it: as if the user's own envbuilder had written this very journal)."""
    absolute = st.sampled_from([f"{outside}/private.txt", "/etc/hostname", "/"])
    entry = st.fixed_dictionaries(
        {
            "path": st.one_of(PATHS, PATHS, absolute),
            "new": st.booleans(),
            "sha256": st.one_of(st.none(), st.just("0" * 64), st.text(max_size=5)),
        }
    )
    # One plain path to a file worth keeping (what an older envbuilder carried out), then noise
    # that is often nothing (one bad path made an older envbuilder refuse the whole journal).
    victim = st.fixed_dictionaries(
        {
            "path": st.sampled_from([*VICTIMS, "environments.toml", "docs-assets/private.txt"]),
            "new": st.booleans(),
            "sha256": st.one_of(st.none(), st.just("0" * 64)),
        }
    )
    files = [draw(victim), *draw(st.lists(entry, max_size=3))]
    draw(st.randoms()).shuffle(files)
    # Mostly well-formed journals of this envbuilder's format and the one before (the dangerous
    # ones), sometimes broken ones.
    doc: object = {
        "version": draw(st.sampled_from([1, 2, 1, 2, 3, "2"])),
        "state": draw(st.sampled_from(["committed", "prepared", "committed", "done"])),
        "token": draw(st.sampled_from([TOKEN, TOKEN, TOKEN, "../../x", "", "A" * 12])),
        "files": files,
        "folders": draw(st.lists(st.one_of(PATHS, absolute), max_size=2)),
    }
    if draw(st.integers(0, 5)) == 0:
        doc = draw(st.sampled_from(["", "{", "[]", "null", "x" * 2_000_000, json.dumps(doc)[:40]]))
    temps = {str(f["path"]): b"planted\n" for f in files if isinstance(f["path"], str)}
    return doc, temps, draw(st.booleans())


def forge_receipt(root: Path, journal_bytes: bytes) -> None:
    """A receipt for `journal_bytes` in `root`, as envbuilder would write one (what an attacker
    cannot do; here it shows that the output set holds even then)."""
    import hashlib

    folder = Path(os.environ["XDG_STATE_HOME"]) / "envbuilder" / "commits"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = root.stat()
    receipt = {
        "version": 1,
        "root": str(root),
        "device": info.st_dev,
        "inode": info.st_ino,
        "journals": [hashlib.sha256(journal_bytes).hexdigest()],
    }
    (folder / f"{TOKEN}.json").write_text(json.dumps(receipt))


EXAMPLES = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("journal-template")
    make_project(base)
    yield base


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
@given(data=st.data())
@EXAMPLES
def test_random_journals_change_nothing_outside_the_output_set(
    argv: tuple[str, ...],
    data: st.DataObject,
    template: Path,
    tmp_path: Path,
    state: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whatever journal lies in the project or in lockfiles/ (and whether or not a receipt
    matches it), a command leaves every file outside its output set byte-identical, and never
    shows a traceback."""
    base = Path(tempfile.mkdtemp(dir=tmp_path)) / "ex"
    shutil.copytree(template, base, symlinks=True)
    project, outside = base / "project", base / "home"
    shutil.rmtree(state, ignore_errors=True)
    for root in (project, project / "lockfiles"):
        doc, temps, receipt = data.draw(journals(str(outside)))
        plant(root, doc, temps)
        if receipt:
            forge_receipt(root, (root / JOURNAL).read_bytes())
    before = outside_output_set(project, snapshot(project, outside))
    spec = ("--spec", str(project / "environments.toml")) if argv[0] in TAKES_SPEC else ()
    try:
        code = main([*argv, *spec])
    except SystemExit as exc:  # argparse's usage error (exit 2)
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 1, 2), err
    assert outside_output_set(project, snapshot(project, outside)) == before

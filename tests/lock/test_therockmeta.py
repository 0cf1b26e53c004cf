"""The record of TheRock's metadata (tests/data/replica/therock-metadata.toml), which
tests/lock/test_replica_amdcode.py diffs the replica against, is what TheRock's own packaging code
makes: the code, vendored at each release's commit (tests/data/therock/<release>/), is run on
the replica's target lists by tests/therockmeta.py, and must still be TheRock's files."""

from __future__ import annotations

import hashlib
import re
import tomllib

import pytest
from therockmeta import RECORD, RELEASES, STORED_SUFFIX, VENDORED, generate, recorded

#: Folders of tests/data/therock/ that hold TheRock's tools, not a release's packaging code.
TOOLS = ("deps", "promote")
#: A row of a SOURCE.md table: TheRock path, stored as, sha256, git blob.
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| `([0-9a-f]{64})` \| `([0-9a-f]{12})` \|$")


def source_rows(release: str) -> dict[str, tuple[str, str]]:
    """stored file -> (TheRock path, sha256), from the release folder's SOURCE.md."""
    text = (VENDORED / release / "SOURCE.md").read_text()
    rows = [m.groups() for m in map(ROW.match, text.splitlines()) if m]
    return {stored: (path, sha) for path, stored, sha, _blob in rows}


def vendored_commit(release: str) -> str:
    """The commit the release folder's SOURCE.md names."""
    found = re.search(
        r"\*\*Commit\*\*: `([0-9a-f]{40})`", (VENDORED / release / "SOURCE.md").read_text()
    )
    assert found is not None, f"{release}'s SOURCE.md names no commit"
    return found.group(1)


def stored_files(release: str) -> set[str]:
    folder = VENDORED / release
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return files - {"SOURCE.md"}


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_therocks_code_makes_the_recorded_metadata(release: str) -> None:
    made = generate(release)
    record = recorded(release)
    assert sorted(made) == sorted(record)  # the same files: the sdist, core, libraries, devices
    for filename, metadata in made.items():
        assert metadata == record[filename], filename


@pytest.mark.parametrize("release", RELEASES)
def test_the_vendored_files_are_therocks_unmodified(release: str) -> None:
    rows = source_rows(release)
    assert set(rows) == stored_files(release), "SOURCE.md lists every vendored file, no other"
    assert "LICENSE" in rows
    for stored, (path, sha256) in rows.items():
        assert stored in (path, path + STORED_SUFFIX), stored
        data = (VENDORED / release / stored).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha256, f"{stored} is not TheRock's {path}"


@pytest.mark.parametrize("folder", ["promote"])
def test_the_vendored_tools_are_therocks_unmodified(folder: str) -> None:
    """promote/ (TheRock's promote_packages.py and change_wheel_version.py with their licences),
    stored like the release folders: under their TheRock paths, `.txt` added to code."""
    test_the_vendored_files_are_therocks_unmodified(folder)


def test_every_recorded_release_is_vendored() -> None:
    with RECORD.open("rb") as f:
        record = tomllib.load(f)
    # deps/ and promote/: TheRock's dependency mirroring and release promotion (issue 35)
    releases = {p.name for p in VENDORED.iterdir() if p.is_dir()} - set(TOOLS)
    assert set(record) == set(RELEASES) == releases


def test_the_record_names_the_vendored_commits() -> None:
    """The record's header cites the commits whose code the generator runs."""
    header = RECORD.read_text()
    for release in RELEASES:
        assert re.search(
            rf"^#   {re.escape(release)} .*commit {vendored_commit(release)}", header, re.M
        )


def test_no_vendored_file_is_python_source_to_the_linters() -> None:
    """ruff and mypy check every .py under tests/: TheRock's code is stored under other names."""
    assert not [p for p in VENDORED.rglob("*") if p.suffix in (".py", ".pyi")]

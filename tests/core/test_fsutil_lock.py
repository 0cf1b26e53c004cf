"""fsutil.lock_file and fsutil.exclusive: the one file lock of envbuilder (stale's owner files and
venv locks, the journal's and the lock files' folders), on POSIX for real and on Windows through
a stand-in msvcrt (the Windows branch is imported and run here, on Linux)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder.core import fsutil

posix_only = pytest.mark.skipif(os.name == "nt", reason="flock")


@pytest.fixture
def two_fds(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Two open file descriptions of one file (flock treats them as two holders)."""
    path = tmp_path / "held.lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    second = os.open(path, os.O_RDWR)
    try:
        yield first, second
    finally:
        for fd in (first, second):
            with contextlib.suppress(OSError):  # a test closed it already
                os.close(fd)


@posix_only
def test_a_held_lock_refuses_a_second_holder_until_closed(two_fds: tuple[int, int]) -> None:
    first, second = two_fds
    assert fsutil.lock_file(first, blocking=True)
    assert not fsutil.lock_file(second, blocking=False)
    os.close(first)
    assert fsutil.lock_file(second, blocking=False)


@posix_only
def test_exclusive_holds_the_folder_while_the_block_runs(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with fsutil.exclusive(tmp_path):
            assert not fsutil.lock_file(fd, blocking=False)
        assert fsutil.lock_file(fd, blocking=False)
    finally:
        os.close(fd)


class FakeMsvcrt(types.ModuleType):
    """msvcrt.locking as Windows answers it: busy `busy_for` times (EACCES), then locked. It
    records the mode and the file position of each call."""

    LK_LOCK = 1
    LK_NBLCK = 2

    def __init__(self, busy_for: int = 0, fail: int | None = None) -> None:
        super().__init__("msvcrt")
        self.busy_for = busy_for
        self.fail = fail
        self.calls: list[tuple[int, int, int]] = []  # mode, position, nbytes

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        self.calls.append((mode, os.lseek(fd, 0, os.SEEK_CUR), nbytes))
        if self.fail is not None:
            raise OSError(self.fail, os.strerror(self.fail))
        if self.busy_for > 0:
            self.busy_for -= 1
            raise OSError(errno.EACCES, "Permission denied")


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """fsutil as on Windows: its msvcrt branch, its temp folder under tmp_path."""
    monkeypatch.setattr(fsutil, "_ON_WINDOWS", True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    yield


def _use(monkeypatch: pytest.MonkeyPatch, fake: FakeMsvcrt) -> FakeMsvcrt:
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    return fake


@pytest.mark.usefixtures("windows")
def test_windows_locks_one_byte_past_the_data_and_keeps_the_position(
    monkeypatch: pytest.MonkeyPatch, two_fds: tuple[int, int]
) -> None:
    fake = _use(monkeypatch, FakeMsvcrt())
    fd = two_fds[0]
    os.write(fd, b"owner data")
    assert fsutil.lock_file(fd, blocking=False)
    assert fake.calls == [(FakeMsvcrt.LK_NBLCK, fsutil._WINDOWS_LOCK_OFFSET, 1)]
    assert os.lseek(fd, 0, os.SEEK_CUR) == len(b"owner data")


@pytest.mark.usefixtures("windows")
def test_windows_busy_without_blocking_is_false(
    monkeypatch: pytest.MonkeyPatch, two_fds: tuple[int, int]
) -> None:
    fake = _use(monkeypatch, FakeMsvcrt(busy_for=1))
    assert not fsutil.lock_file(two_fds[0], blocking=False)
    assert len(fake.calls) == 1


@pytest.mark.usefixtures("windows")
def test_windows_blocking_tries_again_until_it_holds(
    monkeypatch: pytest.MonkeyPatch, two_fds: tuple[int, int]
) -> None:
    fake = _use(monkeypatch, FakeMsvcrt(busy_for=2))
    assert fsutil.lock_file(two_fds[0], blocking=True)
    assert [mode for mode, _, _ in fake.calls] == [FakeMsvcrt.LK_LOCK] * 3


@pytest.mark.usefixtures("windows")
def test_windows_other_errors_are_raised(
    monkeypatch: pytest.MonkeyPatch, two_fds: tuple[int, int]
) -> None:
    _use(monkeypatch, FakeMsvcrt(fail=errno.EBADF))
    with pytest.raises(OSError, match=os.strerror(errno.EBADF)):
        fsutil.lock_file(two_fds[0], blocking=True)
    assert os.lseek(two_fds[0], 0, os.SEEK_CUR) == 0


@pytest.mark.usefixtures("windows")
def test_windows_exclusive_locks_a_temp_file_standing_for_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = _use(monkeypatch, FakeMsvcrt())
    folder = tmp_path / "project"
    folder.mkdir()
    with fsutil.exclusive(folder):  # a try that does not block: a wait is said and bounded
        assert fake.calls == [(FakeMsvcrt.LK_NBLCK, fsutil._WINDOWS_LOCK_OFFSET, 1)]
    assert list(folder.iterdir()) == []  # no file in the user's folder
    (lock,) = (tmp_path / "temp" / "envbuilder-locks").iterdir()
    assert lock == fsutil._folder_lock_path(folder)
    assert fsutil._folder_lock_path(folder / ".") == lock  # one folder, one lock file

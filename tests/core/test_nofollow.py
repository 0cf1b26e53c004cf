"""envbuilder.core.nofollow's Tree, both ways it works: dir_fd handles (POSIX) and, where dir_fd
does not exist (Windows), lstat checks of each step; here both run on real files and links."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from envbuilder.core import nofollow
from envbuilder.core.nofollow import LinkInTheWay, Tree, plain_relative

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges there")


@pytest.fixture(params=[True, False], ids=["dir_fd", "lstat"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Which code path Tree takes (the lstat one is what Windows runs)."""
    monkeypatch.setattr(nofollow, "_DIRFD", bool(request.param))
    return bool(request.param)


def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "real" / "deep").mkdir(parents=True)
    (root / "real" / "deep" / "f.txt").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("outside")
    (root / "link").symlink_to(outside)
    (root / "real" / "file-link").symlink_to(outside / "f.txt")
    return root, outside


def test_reads_and_writes_below_real_folders(tmp_path: Path, mode: bool) -> None:
    root, _ = layout(tmp_path)
    with Tree(root) as tree:
        assert tree.read(PurePosixPath("real/deep/f.txt"), 100) == b"inside"
        assert tree.read(PurePosixPath("real/deep/missing"), 100) is None
        tree.write_new(PurePosixPath("real/deep/.new.tmp"), b"new", 0o640)
        tree.rename(PurePosixPath("real/deep/.new.tmp"), PurePosixPath("real/deep/g.txt"))
        tree.unlink(PurePosixPath("real/deep/f.txt"))
        tree.mkdir(PurePosixPath("real/made"))
        tree.rmdir_if_empty(PurePosixPath("real/made"))
        assert tree.names(("real", "deep")) == ["g.txt"]
    assert (root / "real" / "deep" / "g.txt").read_bytes() == b"new"
    assert oct((root / "real" / "deep" / "g.txt").stat().st_mode & 0o777) == oct(0o640)
    assert not (root / "real" / "made").exists()


def test_a_link_on_the_way_is_refused_never_followed(tmp_path: Path, mode: bool) -> None:
    root, outside = layout(tmp_path)
    with Tree(root) as tree:
        ops: list[Callable[[], object]] = [
            lambda: tree.read(PurePosixPath("link/f.txt"), 100),
            lambda: tree.unlink(PurePosixPath("link/f.txt")),
            lambda: tree.write_new(PurePosixPath("link/new"), b"x", 0o600),
            lambda: tree.read(PurePosixPath("real/file-link"), 100),
        ]
        for op in ops:
            with pytest.raises(LinkInTheWay):
                op()
        # unlinking a link removes the link, never its target
        tree.unlink(PurePosixPath("real/file-link"))
    assert (outside / "f.txt").read_text() == "outside"
    assert [p.name for p in outside.iterdir()] == ["f.txt"]
    with pytest.raises(LinkInTheWay):
        Tree(root / "link")
    Tree(root / "link", follow_root=True).__exit__()  # the root itself, when asked


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a/b.txt", True),
        ("../x", False),
        ("/etc/passwd", False),
        ("a//b", False),
        ("./a", False),
        ("a\\b", False),
        ("C:x", False),
        ("a\0b", False),
        ("n" * 256, False),
        ("/".join(["d"] * 17), False),
        ("", False),
    ],
)
def test_plain_relative(text: str, ok: bool) -> None:
    assert (plain_relative(text) is not None) is ok

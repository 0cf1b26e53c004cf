"""The project's data folders (reports/, .envbuilder/, build/, dist/): written only when they are
real folders, or are made by envbuilder.

    DATA_FOLDERS                        their names, relative to the project's root
    check_data_folders(root)            each one absent or a real folder, else DataFolderError
    real_folders_to(root, path)         every folder from `root` down to `path`'s folder that
                                        exists is a real one (no link), else DataFolderError

They are git-ignored, so a checkout, a pull request or an archive can bring a link there
unnoticed: `reports -> ~/.ssh` would make `build` write its SBOM through it. The check reuses
the job folder's (envbuilder.report.jobfolder.JobFolder): each folder is opened from its parent's
handle without following a link (envbuilder.core.nofollow.Tree), so a link is refused, never
followed, before anything is written.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from envbuilder.core.fsutil import WriteError
from envbuilder.core.nofollow import LinkInTheWay, Tree

#: Folders envbuilder writes into below the project's root (all git-ignored).
DATA_FOLDERS = ("reports", ".envbuilder", "build", "dist")


class DataFolderError(WriteError):
    """A data folder (or one below it) is a link or not a folder; nothing was written."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(
            path,
            f"it {what}: envbuilder writes its own files (reports, venvs, "
            "SBOMs, .wsl files) only into real folders of the project, never through a link "
            "(one could lead them anywhere). Nothing was written: replace it with a real folder "
            "(or remove it, and envbuilder makes one)",
        )


def _link_target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return f" (to {path.readlink()})"
    return ""


def _refusal(exc: LinkInTheWay) -> DataFolderError:
    what = exc.what + (_link_target(exc.path) if "link" in exc.what else "")
    return DataFolderError(exc.path, what)


def check_data_folders(root: Path) -> None:
    """Each of DATA_FOLDERS below `root` is absent or a real folder (DataFolderError)."""
    for name in DATA_FOLDERS:
        real_folders_to(root, root / name / "-")


def real_folders_to(root: Path, path: Path) -> None:
    """When `path` is below one of `root`'s data folders: every folder from `root` down to
    `path`'s own folder that exists is a real folder, opened without following a link;
    DataFolderError for the first that is not. Other paths (a --path outside the project, a
    --run-dir) are the user's choice and not checked."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))  # noqa: PTH100
    except ValueError:
        return
    if not rel.parts or rel.parts[0] not in DATA_FOLDERS:
        return
    try:
        with Tree(root, follow_root=True) as tree:
            for depth in range(1, len(rel.parts)):
                tree.folder(rel.parts[:depth])
    except LinkInTheWay as exc:
        raise _refusal(exc) from None
    except FileNotFoundError:
        return  # made below what exists, by the writer (no link on the way to it)
    except OSError:
        return  # unreadable or too long: the writer's own error says so

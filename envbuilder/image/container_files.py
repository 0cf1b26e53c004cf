"""The tar of files that envbuilder.image.engine copies into a container (the probe, its
arguments): pure."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Mapping
from pathlib import PurePosixPath


def owner_of(user: str | None) -> tuple[int, int]:
    """uid/gid for the files we copy in, when `user` is numeric ("1000" or "1000:1000")."""
    if user and re.fullmatch(r"\d+(:\d+)?", user):
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid)
    return 0, 0


def files_tar(files: Mapping[str, bytes], owner: tuple[int, int] = (0, 0)) -> bytes:
    """A tar of `files` (absolute container path -> content) and their parent folders.

    Folders we create belong to `owner`, so a non-root probe can write its report beside them.
    """
    buf = io.BytesIO()
    dirs: set[PurePosixPath] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(files):
            pure = PurePosixPath(path)
            if not pure.is_absolute():
                raise ValueError(f"container path must be absolute: {path}")
            for parent in reversed(pure.parents[:-1]):
                if parent not in dirs and str(parent).startswith("/tmp/"):
                    dirs.add(parent)
                    tar.addfile(_tarinfo(parent, owner, tarfile.DIRTYPE, 0o755))
            info = _tarinfo(pure, owner, tarfile.REGTYPE, 0o644)
            info.size = len(files[path])
            tar.addfile(info, io.BytesIO(files[path]))
    return buf.getvalue()


def _tarinfo(
    path: PurePosixPath, owner: tuple[int, int], kind: bytes, mode: int
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(path).lstrip("/"))
    info.type = kind
    info.mode = mode
    info.uid, info.gid = owner
    return info

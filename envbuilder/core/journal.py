"""Several files below one folder as one step, and a recovery that proves its own writes.

    commit_files(root, changes, scope, mode)   replace (bytes) or delete (None) files below
                                               `root` as one step: all old or all new
    recover(root, scope) -> str | None         finish or undo a commit that a crash or SIGKILL
                                               left half-done, when this user's envbuilder
                                               provably wrote it; what it did, for the user
    pending(root, scope) -> str | None         what a journal left in `root` is and which
                                               command finishes it (read-only commands)
    Scope                                      the files a commit into a root may touch

The journal file itself (its name JOURNAL, its format, `left_over(root)`, JournalError) is
envbuilder.core.journalfile; the receipts that prove it (`state_dir()`, where they are kept)
are envbuilder.core.receipts.

How a commit runs: each new file goes to a temp file beside its target; a journal in `root`
records the commit ("prepared"), then, once every temp file is written, "committed" (the commit
point); the temp files are renamed over their targets, deletions done, the journal removed. A
crash before the commit point is undone by the next command, one after it finished.

Why a journal is trusted (issue 21). The journal must sit in the project, beside the files,
where the next command looks; but a file in the project proves nothing: it can arrive with a
checkout or a pull request, and a planted `{"path": "src/main.py", "new": false}` would make the
next command delete that file. So before it writes a journal, envbuilder writes a *receipt* into
the user's own state folder, `$XDG_STATE_HOME/envbuilder/commits/<token>.json` (default
`~/.local/state/envbuilder`, 0700, owned by the user): the sha256 of both states of the journal
it is about to write and the root folder's device and inode. A journal is honoured only when
  * a receipt exists for its token, and the journal's bytes hash to a digest the receipt lists
    (a checkout cannot carry the receipt, another user cannot write it; it holds no secret: it
    binds exactly what may be done, and where, to what this user's envbuilder wrote);
  * the root is the receipt's root (a journal copied to another checkout is not honoured);
  * every path it names is a plain relative path inside the `Scope` of the command that writes
    that root (render: the rendered output folders; lock: lock file names in lockfiles/), never
    `.git`, the spec or anything else, whatever the receipt says;
  * every folder on the way is opened from its parent with O_NOFOLLOW (dir_fd walks): a
    symlinked folder is refused, never followed; renames and deletions happen through those
    folder handles, so a folder swapped for a link half-way cannot redirect them;
  * a temp file is renamed into place only when its bytes have the sha256 the journal records.
Anything else is a JournalError: nothing is changed, and the message says what to look at.
Read-only commands never recover (envbuilder.commands._cli): they report a journal with `pending`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from envbuilder.core.fsutil import (
    WriteError,
    exclusive,
    file_in_the_way,
    make_parents,
    remove_empty,
    sha256_bytes,
    write_error,
)
from envbuilder.core.fsutil import default_mode as _default_mode
from envbuilder.core.interrupts import deferred
from envbuilder.core.journalfile import (
    HEX64,
    JOURNAL,
    JOURNAL_TEMP,
    JOURNAL_VERSION,
    MAX_FILE_BYTES,
    MAX_JOURNAL_BYTES,
    Entry,
    Journal,
    JournalError,
    journal_temp,
    left_over,
    refused,
    token_of,
)
from envbuilder.core.nofollow import LinkInTheWay, Tree, plain_relative
from envbuilder.core.receipts import Receipt
from envbuilder.core.statefile import parse_json

#: Tests only: SIGKILL this process at the N-th step of a commit (or at the step of that name),
#: so that a test can stop the commit protocol exactly where it wants, not by timing.
KILL_AT_STEP = "ENVBUILDER_TEST_KILL_AT_STEP"
_steps = itertools.count(1)


def _step(name: str) -> None:
    """A point of the commit protocol where a kill leaves a state recovery must handle."""
    want = os.environ.get(KILL_AT_STEP)
    if want and want in (name, str(next(_steps))):
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


@dataclass(frozen=True)
class Scope:
    """The files a commit into one root may touch, fixed by the command that writes the root
    (never read from a journal): files below one of `folders` (names of the root's output
    folders), and files directly in the root whose names match `names`. `finisher` is the
    command that finishes an interrupted commit there, for messages."""

    folders: tuple[str, ...] = ()
    names: re.Pattern[str] | None = None
    finisher: str = "envbuilder"

    def allows_file(self, rel: PurePosixPath) -> bool:
        parts = rel.parts
        if len(parts) == 1:
            return self.names is not None and self.names.fullmatch(parts[0]) is not None
        return any(self._below(parts[:-1], folder) for folder in self.folders)

    def allows_folder(self, rel: PurePosixPath) -> bool:
        return any(self._below(rel.parts, folder) for folder in self.folders)

    @staticmethod
    def _below(parts: tuple[str, ...], folder: str) -> bool:
        """Whether the folder `parts` is `folder` ('a' or 'a/b') or below it."""
        top = tuple(folder.split("/"))
        return parts[: len(top)] == top


# --- the journal --------------------------------------------------------------------------------


def _write_journal(tree: Tree, token: str, data: bytes) -> None:
    temp = journal_temp(token)
    tree.write_new(temp, data, 0o644)
    _step("journal-temp")
    tree.rename(temp, PurePosixPath(JOURNAL))
    tree.sync()
    _step("committed" if b'"committed"' in data else "prepared")


def _parse(data: bytes, where: Path, scope: Scope) -> Journal:
    """A journal's bytes (already proven by a receipt) -> its entries, each in `scope`."""
    doc: Any = parse_json(data, where, "check the files it names, then remove it")
    if (
        not isinstance(doc, dict)
        or doc.get("version") != JOURNAL_VERSION
        or doc.get("state") not in ("prepared", "committed")
        or not isinstance(doc.get("files"), list)
        or not isinstance(doc.get("folders"), list)
    ):
        raise refused(where, "it is not in the format this envbuilder writes")
    entries = []
    for item in doc["files"]:
        rel = plain_relative(item.get("path") if isinstance(item, dict) else None)
        sha = item.get("sha256") if isinstance(item, dict) else None
        if rel is None or not scope.allows_file(rel):
            raise refused(where, f"it names {item!r}, outside what `{scope.finisher}` writes")
        if sha is not None and not (isinstance(sha, str) and HEX64.match(sha)):
            raise refused(where, f"it names {item!r} with a malformed sha256")
        entries.append(Entry(rel, sha))
    folders = []
    for item in doc["folders"]:
        rel = plain_relative(item)
        if rel is None or not scope.allows_folder(rel):
            raise refused(
                where, f"it names folder {item!r}, outside what `{scope.finisher}` writes"
            )
        folders.append(rel)
    return Journal(doc["state"], doc["token"], tuple(entries), tuple(folders))


def _proven(tree: Tree, scope: Scope) -> Journal | None:
    """The journal in `tree`'s root, proven and in scope; None when there is none.
    JournalError when it is not provably envbuilder's."""
    where = tree.root / JOURNAL
    try:
        data = tree.read(PurePosixPath(JOURNAL), MAX_JOURNAL_BYTES)
    except LinkInTheWay as exc:
        raise refused(where, f"it {exc.what}") from None
    if data is None:
        return None
    if len(data) > MAX_JOURNAL_BYTES:
        raise refused(where, f"it is over {MAX_JOURNAL_BYTES} bytes, not a journal")
    token = token_of(data)
    if token is None:
        raise refused(where, "it is not a journal envbuilder writes (no token)")
    why = Receipt(token).refusal(tree.info, data)
    if why is not None:
        raise refused(where, why)
    return _parse(data, where, scope)


# --- commit --------------------------------------------------------------------------------------


def commit_files(
    root: Path,
    changes: Mapping[Path, bytes | None],
    scope: Scope,
    mode: int | Callable[[Path], int] | None = None,
) -> None:
    """Replace (bytes) or delete (None) every file in `changes`, all below `root` and inside
    `scope`, as one step: after an error, an interrupt or a crash at any moment the files are
    either all old or all new. `mode`: an int, a function of the path, or None for 0666 less
    the umask. A journal left by an earlier crash is finished or undone first (JournalError
    when it is not provably envbuilder's). Raises WriteError naming the path and the cause
    (a symlinked folder below `root` included: nothing is written through one). Writers of one
    root take turns (flock)."""
    if not changes:
        return
    rels = {path: _relative_in_scope(root, path, scope) for path in changes}
    try:
        created = make_parents(root / JOURNAL)
    except WriteError as exc:  # name the user's file, not the journal
        first = min(changes)
        raise WriteError(
            first, exc.cause, "write" if changes[first] is not None else "remove"
        ) from None
    try:
        with exclusive(root):
            _recover(root, scope)
            _commit(root, changes, rels, mode)
    except _Gone as gone:  # a folder removed while this commit renamed into it
        with deferred():
            remove_empty(created)
        raise WriteError(gone.path, "it was removed while envbuilder wrote into it") from None
    except BaseException:
        with deferred():
            remove_empty(created)
        raise


def _relative_in_scope(root: Path, path: Path, scope: Scope) -> PurePosixPath:
    try:
        rel = plain_relative(path.relative_to(root).as_posix())
    except ValueError:
        rel = None
    if rel is None or not scope.allows_file(rel):
        raise ValueError(f"{path} is not in the output set below {root}")  # a bug in the caller
    return rel


def _commit(
    root: Path,
    changes: Mapping[Path, bytes | None],
    rels: Mapping[Path, PurePosixPath],
    mode: int | Callable[[Path], int] | None,
) -> None:
    token = secrets.token_hex(6)
    paths = sorted(changes)
    entries = tuple(Entry(rels[p], _digest(changes[p])) for p in paths)
    for path in paths:
        _refuse_obstacles(root, path, changes[path] is not None)
    journal = Journal("prepared", token, entries, tuple(_missing_folders(root, paths, rels)))
    prepared, committed = journal.dump("prepared"), journal.dump("committed")
    with _open_tree(root, paths[0], changes[paths[0]] is not None) as tree:
        receipt = Receipt(token)
        done = False
        try:
            receipt.write(root, tree.info, [prepared, committed])
            _step("receipt")
            _prepare(tree, journal, prepared, changes, paths, mode)
            with deferred():  # from the commit point to the end: held against interrupts
                _write_journal(tree, token, committed)
                done = True
                _roll_forward(tree, journal, verify=False)
            receipt.drop()
        except BaseException:
            with deferred():
                if done:
                    with contextlib.suppress(WriteError, _Gone):  # the journal stays for recover()
                        _roll_forward(tree, journal, verify=False)
                        receipt.drop()
                else:
                    _roll_back(tree, journal)
                    receipt.drop()
            raise


def _digest(data: bytes | None) -> str | None:
    return None if data is None else sha256_bytes(data)


def _prepare(
    tree: Tree,
    journal: Journal,
    prepared: bytes,
    changes: Mapping[Path, bytes | None],
    paths: Sequence[Path],
    mode: int | Callable[[Path], int] | None,
) -> None:
    """Write the prepared journal, make the missing folders and write every temp file."""
    first = paths[0]
    try:
        _write_journal(tree, journal.token, prepared)
    except OSError as exc:  # name the user's file, not the journal
        raise write_error(first, exc, "write" if changes[first] is not None else "remove") from None
    for folder in journal.folders:
        try:
            tree.mkdir(folder)
        except OSError as exc:
            user = next(p for p in paths if tree.root.joinpath(*folder.parts) in p.parents)
            raise write_error(user, exc) from None
        _step("mkdir")
    for path, entry in zip(paths, journal.entries, strict=True):
        data = changes[path]
        if data is None:
            continue
        file_mode = mode(path) if callable(mode) else mode
        try:
            tree.write_new(
                entry.temp(journal.token), data, _default_mode() if file_mode is None else file_mode
            )
        except LinkInTheWay as exc:
            raise WriteError(path, _link_cause(exc)) from None
        except OSError as exc:
            raise write_error(path, exc) from None
        _step("temp")


@contextlib.contextmanager
def _open_tree(root: Path, first: Path, new: bool) -> Iterator[Tree]:
    try:
        tree = Tree(root)
    except LinkInTheWay as exc:
        raise WriteError(first, _link_cause(exc), "write" if new else "remove") from None
    except OSError as exc:
        raise write_error(first, exc, "write" if new else "remove") from None
    with tree:
        yield tree


def _link_cause(exc: LinkInTheWay) -> str:
    return (
        f"{exc.path} {exc.what}; envbuilder writes its outputs only into real folders (it "
        "follows no link below the project): replace the link by a folder"
    )


def _refuse_obstacles(root: Path, path: Path, new: bool) -> None:
    """WriteError for a folder where the file goes, or a link on the way to it (checked before
    anything is written, for a clear message; the dir_fd walk refuses links again)."""
    verb = "write" if new else "remove"
    if path.is_dir() and not path.is_symlink():
        raise WriteError(
            path, "it is a folder, not a file; move it away or choose another path", verb
        )
    for parent in path.parents:
        if parent == root or root not in parent.parents:
            break
        if parent.is_symlink():
            raise WriteError(path, _link_cause(LinkInTheWay(parent, "is a symbolic link")), verb)


def _missing_folders(
    root: Path, paths: Sequence[Path], rels: Mapping[Path, PurePosixPath]
) -> list[PurePosixPath]:
    """Folders (below `root`) the new files need that do not exist yet, outermost first.
    WriteError when a file is in the way of one."""
    missing: list[PurePosixPath] = []
    for path in paths:
        blocker = file_in_the_way(path)
        if blocker is not None:
            raise WriteError(
                path, f"{blocker} is a file, not a folder; move it away or choose another path"
            )
        rel = rels[path]
        for depth in range(1, len(rel.parts)):
            folder = PurePosixPath(*rel.parts[:depth])
            if not root.joinpath(*folder.parts).is_dir() and folder not in missing:
                missing.append(folder)
    return missing


def _roll_forward(tree: Tree, journal: Journal, verify: bool) -> None:
    """Put every temp file in place and do the deletions, then drop the journal. Safe to run
    again after a crash: a temp file already renamed is simply gone. `verify`: first check
    that every temp file left holds the bytes the journal records (recovery)."""
    if verify:
        _verify_temps(tree, journal)
    for entry in journal.entries:
        path = tree.root.joinpath(*entry.rel.parts)
        try:
            if entry.new:
                temp = entry.temp(journal.token)
                if tree.lstat(temp) is not None:
                    tree.rename(temp, entry.rel)
            else:
                tree.unlink(entry.rel)
        except LinkInTheWay as exc:
            raise WriteError(path, _link_cause(exc)) from None
        except FileNotFoundError:  # its folder was removed since (the file itself: skipped)
            raise _Gone(path.parent) from None
        except OSError as exc:
            raise write_error(path, exc, "write" if entry.new else "remove") from None
        _step("rename")
    for parts in {tuple(e.rel.parts[:-1]) for e in journal.entries}:
        with contextlib.suppress(OSError, LinkInTheWay):
            tree.folder(parts)
            tree.sync(parts)
    try:
        tree.unlink(PurePosixPath(JOURNAL))
    except OSError as exc:
        raise write_error(tree.root / JOURNAL, exc, "remove") from None
    _step("journal-removed")


def _verify_temps(tree: Tree, journal: Journal) -> None:
    where = tree.root / JOURNAL
    for entry in journal.entries:
        if not entry.new:
            continue
        try:
            data = tree.read(entry.temp(journal.token), MAX_FILE_BYTES)
        except LinkInTheWay as exc:
            raise refused(where, f"{exc.path} {exc.what}") from None
        except FileNotFoundError:  # the folder of the temp file was removed since
            raise _Gone(tree.root.joinpath(*entry.rel.parts[:-1])) from None
        if data is not None and sha256_bytes(data) != entry.sha256:
            temp = tree.root.joinpath(*entry.temp(journal.token).parts)
            raise refused(where, f"{temp} does not hold the bytes it records (sha256)")


def _roll_back(tree: Tree, journal: Journal) -> None:
    """Remove every temp file, the folders the commit made (when empty) and the journal."""
    for entry in journal.entries:
        if entry.new:
            with contextlib.suppress(OSError, LinkInTheWay):
                tree.unlink(entry.temp(journal.token))
    for folder in reversed(journal.folders):
        with contextlib.suppress(LinkInTheWay):
            tree.rmdir_if_empty(folder)
    with contextlib.suppress(OSError):
        tree.unlink(PurePosixPath(JOURNAL))
    with contextlib.suppress(OSError):
        tree.unlink(journal_temp(journal.token))


# --- recovery -----------------------------------------------------------------------------------


def recover(root: Path, scope: Scope) -> str | None:
    """Finish (journal committed) or undo (journal prepared) a commit into `root` that a crash
    or a kill left half-done, when a receipt proves this user's envbuilder wrote it. Returns
    what it did, for the user, or None when there was nothing to do. Raises WriteError when the
    disk refuses, JournalError when the journal is not provably envbuilder's or names anything
    outside `scope` (it is then left alone, and so are the files it names)."""
    if not left_over(root):
        return None
    with exclusive(root):
        return _recover(root, scope)


def _recover(root: Path, scope: Scope) -> str | None:
    if not left_over(root):
        return None
    try:
        tree = Tree(root)
    except LinkInTheWay as exc:
        raise refused(root / JOURNAL, f"{exc.path} {exc.what}") from None
    with tree:
        _sweep_journal_temps(tree)
        journal = _proven(tree, scope)
        if journal is None:
            return None
        receipt = Receipt(journal.token)
        with deferred():
            try:
                if journal.state == "committed":
                    _roll_forward(tree, journal, verify=True)
                    done = (
                        f"finished an interrupted `{scope.finisher}` ({len(journal.entries)} "
                        f"file(s) in {root}): the new version is now complete"
                    )
                else:
                    _roll_back(tree, journal)
                    done = (
                        f"undid an interrupted `{scope.finisher}` in {root}: removed its temp "
                        "files, the old version stays"
                    )
            except _Gone as gone:
                done = _set_aside(tree, journal, scope, gone.path)
            receipt.drop()
    return done


class _Gone(Exception):
    """A folder or file a proven journal needs was removed since (`rm -rf`, `git clean`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path


def _set_aside(tree: Tree, journal: Journal, scope: Scope, gone: Path) -> str:
    """A proven journal that cannot be finished any more: renamed to a dated name (so that it
    blocks no command, and the user can still read it), nothing else changed; what to check."""
    aside = PurePosixPath(
        f".envbuilder-commit.set-aside-{time.strftime('%Y%m%dT%H%M%S')}-{journal.token}.json"
    )
    try:
        tree.rename(PurePosixPath(JOURNAL), aside)
    except OSError as exc:
        raise write_error(tree.root / JOURNAL, exc, "set aside") from None
    removed = sum(_drop_temp(tree, entry, journal.token) for entry in journal.entries)
    return (
        f"{tree.root / JOURNAL}: an interrupted `{scope.finisher}` could not be finished: "
        f"{gone} was removed since. Its journal was set aside as {tree.root / aside}; "
        f"{removed} temp file(s) it had written (copies of new versions) were removed, the "
        f"{len(journal.entries)} file(s) it names were kept as they are, possibly part old, "
        f"part new: check them or run `{scope.finisher}` to write them anew, then remove the "
        "set-aside journal"
    )


def _drop_temp(tree: Tree, entry: Entry, token: str) -> bool:
    """Remove `entry`'s temp file when it holds the bytes the (proven) journal records."""
    temp = entry.temp(token)
    try:
        data = tree.read(temp, MAX_FILE_BYTES) if entry.new else None
        if data is None or sha256_bytes(data) != entry.sha256:
            return False
        tree.unlink(temp)
    except (OSError, LinkInTheWay):
        return False
    return True


def _sweep_journal_temps(tree: Tree) -> None:
    """Remove the temp files of journals (a kill during a journal's write leaves one) that a
    receipt proves are this user's, for this root; any other is left alone."""
    for name in tree.names():
        match = JOURNAL_TEMP.match(name)
        if match and Receipt(match.group(1)).refusal(tree.info, None) is None:
            with contextlib.suppress(OSError):
                tree.unlink(PurePosixPath(name))
            if tree.lstat(PurePosixPath(JOURNAL)) is None:
                Receipt(match.group(1)).drop()


def pending(root: Path, scope: Scope) -> str | None:
    """For commands that only read: what a journal left in `root` is and the command that
    finishes it, or None when there is none. Changes nothing."""
    if not left_over(root):
        return None
    where = root / JOURNAL
    try:
        with Tree(root) as tree:
            journal = _proven(tree, scope)
    except (JournalError, LinkInTheWay) as exc:
        return str(exc)
    except OSError as exc:
        return f"{where}: cannot be read ({exc.strerror or exc})"
    if journal is None:
        return f"{root}: a temp file of an interrupted write is left; `{scope.finisher}` removes it"
    state = (
        "its new files are not all in place yet"
        if journal.state == "committed"
        else "the old files are complete; its temp files are left"
    )
    return (
        f"{where}: an interrupted `{scope.finisher}` left this journal ({state}); "
        f"`{scope.finisher}` finishes or undoes it (this command changes nothing)"
    )

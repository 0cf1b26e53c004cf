"""The venv targets' builders: `native` (Linux) and `windows` (the "native Windows driver"
option).

Both make a plain venv that holds exactly the env's pylock, installed offline from the host wheel
cache with hash checking (`uv pip sync --require-hashes`), with the env's variables written into
its activate scripts and a marker file (`envbuilder-venv.json`) that records what was built.

Order of a build, so a bad lock never touches a working venv:
  0. the folder must be absent, empty, or a venv envbuilder made (its marker proves it); anything
     else is refused before any other step (`--force` takes over a venv that holds nothing else);
  1. the env lock must be current for the spec and the env's own, the pylock's sha256 must equal
     what it recorded and its content be well-formed (load_verified_lock);
  2. nothing to do when the marker names this lock and the venv holds exactly its packages;
  3. every locked artifact is fetched into the wheel cache and verified by sha256;
  4. the marker is rewritten to say "incomplete" (so an interrupted build is repaired by the next
     one, and `validate` refuses it), and only then the venv is created (or re-created, when its
     Python is wrong) and synced: what the lock dropped is removed, what it added is installed;
  5. the activate scripts and, last, the complete marker are written.
The two targets differ only in their host OS, their folder layout (`bin/python` vs
`Scripts\\python.exe`), and how Python is found (uv vs the `py` launcher).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, ClassVar, Literal

from packaging.utils import canonicalize_name

from envbuilder import __version__
from envbuilder.builders.proberun import (
    OtherLock,
    probe_options,
    refuse_other_lock,
    with_other_lock,
)
from envbuilder.core import activate, interrupts, stale
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import BuildError, UsageError, ValidationError, output_tail
from envbuilder.core.fsutil import atomic_write_bytes, sha256_bytes, temp_dir
from envbuilder.core.model import EnvSpec
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import FindPython, LockPins, Plan, PlanInputs, WriteActivation
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project, pylock_name, venv_folder
from envbuilder.core.quoting import ps_quote, sh_command, sh_word
from envbuilder.core.statefile import StateFileError, read_state
from envbuilder.host import pyfinder
from envbuilder.targets import registry
from envbuilder.targets.base import (
    Artifact,
    BuildOptions,
    RunCommand,
    RunOptions,
    ValidateOptions,
)

MARKER = "envbuilder-venv.json"
MARKER_VERSION = 1
#: A marker is a few hundred bytes.
_MAX_MARKER_BYTES = 1 << 20
#: The marker's `state`: "complete" once a build finished; "incomplete" from the moment a build
#: starts changing the venv (an interrupted build leaves it so). A marker without `state` was
#: written by an envbuilder that wrote only complete markers.
COMPLETE, INCOMPLETE = "complete", "incomplete"

#: What the top folder of a venv holds (made by venv/uv/pip/envbuilder), compared in lower case
#: (Windows: Scripts, Lib, Include). Anything else (src/ of `pip install -e`, .git, a user's
#: file) is someone's data: a venv folder holding it is never emptied.
VENV_ENTRIES = frozenset(
    {
        "bin",
        "scripts",
        "lib",
        "lib64",
        "include",
        "share",
        "etc",
        "man",
        "pyvenv.cfg",
        ".gitignore",
        "cachedir.tag",
        ".lock",
        MARKER,
    }
)

#: Run by the venv's Python: its version and the installed distributions (what sync produced),
#: and its prefixes (a folder whose bin/python is not a venv's must never be synced).
_STATE_SCRIPT = (
    "import json, sys, importlib.metadata as m\n"
    "pk = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n: pk[n] = d.version\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': pk,\n"
    "                  'prefix': sys.prefix, 'base_prefix': sys.base_prefix}))\n"
)


@dataclass(frozen=True)
class VenvLayout:
    """Where things are inside a venv; pure paths, so the Windows layout is testable anywhere."""

    root: PurePath
    windows: bool

    @property
    def scripts(self) -> PurePath:
        return self.root / ("Scripts" if self.windows else "bin")

    @property
    def python(self) -> PurePath:
        return self.scripts / ("python.exe" if self.windows else "python")

    @property
    def marker(self) -> PurePath:
        return self.root / MARKER


FolderKind = Literal["absent", "empty", "ours", "foreign-venv", "other"]


@dataclass(frozen=True)
class VenvFolder:
    """What is at a venv's path before a build, and whether envbuilder may change it.

    kind: "absent" / "empty" (a venv may be made there), "ours" (a valid marker: envbuilder made
    it), "foreign-venv" (a venv without envbuilder's marker: only `--force` takes it over),
    "other" (a file, a link, or a folder that is not a venv: never changed).
    what: a phrase saying what `path` is, for messages ("<path> is <what>").
    strangers: top-level entries a venv does not hold (someone's data), sorted."""

    path: Path
    kind: FolderKind
    what: str
    strangers: tuple[str, ...] = ()


def _is_marker_temp(name: str) -> bool:
    """A temp file of an interrupted marker write (fsutil.atomic_write_bytes names them so)."""
    return name.startswith(f".{MARKER}.") and name.endswith(".tmp")


def _strangers(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        sorted(n for n in names if n.lower() not in VENV_ENTRIES and not _is_marker_temp(n))
    )


def _pyvenv_version(venv: Path) -> str | None:
    """The Python version a pyvenv.cfg names (`version` or `version_info`), if it says."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("version", "version_info"):
            return value.strip()
    return None


def marker_owns(marker: Mapping[str, Any], venv: Path) -> bool:
    """True when `marker` was written for the venv at `venv` (same path, or the same folder by
    another spelling). A marker naming another folder came with a copied or moved venv."""
    recorded = marker.get("venv")
    if not isinstance(recorded, str) or not recorded:
        return False
    if recorded == str(venv):
        return True
    try:
        return Path(recorded).samefile(venv)
    except OSError:
        return False


def _listing(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def inspect_folder(venv: Path) -> VenvFolder:
    """Look at what is at `venv` (reads only; follows no link). OSError when it cannot be read."""
    if venv.is_symlink():
        return VenvFolder(venv, "other", f"a symbolic link (to {venv.readlink()})")
    if not venv.exists():
        return VenvFolder(venv, "absent", "nothing")
    if not venv.is_dir():
        return VenvFolder(venv, "other", "a file, not a folder")
    names = sorted(p.name for p in venv.iterdir())
    if not [n for n in names if not _is_marker_temp(n)]:
        return VenvFolder(venv, "empty", "an empty folder")
    strangers = _strangers(names)
    # a marker that is a link proves nothing about this folder
    marker = None if (venv / MARKER).is_symlink() else read_marker(venv / MARKER)
    if marker is not None and marker_owns(marker, venv):
        return VenvFolder(venv, "ours", "a venv envbuilder made", strangers)
    if not (venv / "pyvenv.cfg").is_file():
        what = f"a folder that is not a venv (no pyvenv.cfg); it holds {_listing(names)}"
        return VenvFolder(venv, "other", what, strangers)
    version = _pyvenv_version(venv)
    what = f"a venv{f' of Python {version}' if version else ''} that envbuilder did not make"
    if marker is not None:
        what += (
            f" (its {MARKER} names another folder, {marker.get('venv')}: it was copied or moved)"
        )
    else:
        what += f" (no {MARKER})"
    if strangers:
        what += f", and it holds files a venv does not: {_listing(strangers)}"
    return VenvFolder(venv, "foreign-venv", what, strangers)


def claim_folder(venv: Path, force: bool) -> VenvFolder:
    """What is at `venv`, when envbuilder may build there; otherwise BuildError saying what is
    there and how to proceed, with nothing changed. `force` takes over a venv envbuilder did not
    make, only when its folder holds a venv and nothing else."""
    try:
        folder = inspect_folder(venv)
    except OSError as exc:  # e.g. a parent folder that cannot be read
        raise BuildError(
            f"cannot look at {venv}: {exc.strerror or exc}; nothing was changed. "
            f"Give another --path"
        ) from None
    if folder.kind in ("absent", "empty", "ours"):
        return folder
    head = (
        f"{venv} is {folder.what}. envbuilder changes only a venv it made itself (its "
        f"{MARKER} proves it), so nothing was changed"
    )
    if folder.kind == "other":
        raise BuildError(
            f"{head}. Give another --path (a new or empty folder); --force does not "
            f"apply: it only takes over a folder that holds a venv and nothing else"
        )
    if folder.strangers:
        raise BuildError(
            f"{head}. Give another --path, or move {_listing(folder.strangers)} out "
            f"and use --force to replace the venv (--force never deletes files that "
            f"are not part of a venv)"
        )
    if not force:
        raise BuildError(
            f"{head}. Use --force to replace that venv with a new one (the packages "
            f"installed in it are removed), or give another --path"
        )
    return folder


def strangers_message(venv: Path, strangers: Sequence[str]) -> str:
    """Why a venv that must be made again (wrong or broken Python) is not: its folder holds
    files a venv does not, which emptying it would delete."""
    return (
        f"the venv at {venv} must be made again (its Python is missing, broken or not the "
        f"one the env needs), but its folder also holds files a venv does not: "
        f"{_listing(strangers)}. Nothing was changed: move them out, or give another --path"
    )


def empty_venv_folder(venv: Path) -> None:
    """Remove everything in the venv folder `venv` but its marker, following no symbolic link out
    of it (a link is removed, never what it points to). Refuses, removing nothing, when the folder
    holds anything a venv does not (someone's data)."""
    try:
        names = sorted(p.name for p in venv.iterdir())
        if strangers := _strangers(names):
            raise BuildError(strangers_message(venv, strangers))
        for name in names:
            if name != MARKER:
                _remove_entry(venv / name)
    except OSError as exc:
        raise BuildError(f"cannot remove the old venv in {venv}: {exc}") from None


def _remove_entry(path: Path) -> None:
    """Remove one entry without following links: shutil.rmtree removes links inside a folder
    and never descends through them (nor through Windows junctions)."""
    is_junction = getattr(os.path, "isjunction", lambda _p: False)(path)
    if path.is_dir() and not path.is_symlink() and not is_junction:
        shutil.rmtree(path)
    elif is_junction:
        path.rmdir()  # removes the junction itself, never its target's content
    else:
        path.unlink()


def venv_lock_path(project: Project, venv: Path) -> Path:
    """The lock a build holds on the venv at `venv` (and hands to the uv it starts), in the
    cache: a file inside the venv would go when the venv is re-created, one beside it would
    be written into the user's folder."""
    key = sha256_bytes(os.path.realpath(venv).encode("utf-8", "surrogateescape"))[:32]
    return project.cache / "locks" / f"venv-{key}.lock"


def busy_message(venv: Path) -> str:
    return (
        f"the venv at {venv} is being changed by another `envbuilder build`, or by the uv "
        "of an earlier build that was killed (uv goes on until it is done); nothing was "
        "changed. Wait until it ends and build again (`fuser` on the lock file in the cache's "
        "locks/ folder names the process)"
    )


def default_venv_path(project: Project, env: str, target: str) -> Path:
    """The venv's folder when `--path` is not given: <project>/.envbuilder/venvs/<env>-<target>
    (gitignored)."""
    return project.root / venv_folder(env, target)


def uv_venv_command(uv: str, python: str, venv: PurePath, prompt: str) -> list[str]:
    """Create a venv (no pip, setuptools or wheel in it: it holds the lock and nothing else).

    `--allow-existing`: the folder already holds envbuilder's "incomplete" marker (written before
    the venv is made, so an interrupted build leaves a folder the next build recognises); uv keeps
    it. Never `--clear`, which removes whatever the folder holds."""
    return [
        uv,
        "venv",
        "--no-project",
        "--allow-existing",
        "--python",
        python,
        "--prompt",
        prompt,
        str(venv),
    ]


def uv_venv_environment() -> dict[str, str]:
    """The environment for `uv venv`: without UV_VENV_CLEAR, which would make uv delete what an
    existing folder holds (envbuilder empties a folder only after checking it is its own)."""
    return {k: v for k, v in os.environ.items() if k != "UV_VENV_CLEAR"}


def uv_sync_command(
    uv: str, venv_python: PurePath, requirements: PurePath, find_links: PurePath | None = None
) -> list[str]:
    """Make the venv hold exactly `requirements` (local files with hashes): offline, no index,
    every artifact's sha256 checked.

    `find_links`: the wheelhouse, so that uv's isolated build of a locked sdist (the pip SDK's
    `rocm`) finds its build backend among the locked wheels (`envbuilder lock` checked it is
    there); with wheels only it changes nothing.

    `--no-cache`: the wheels sit in a fresh wheelhouse folder each build, so uv's cache would
    key every build's torch anew and keep one more unpacked copy (~0.7 GB) each time (seen
    here: 30 copies, 21 GB). envbuilder's own wheel cache already keeps the downloads."""
    links = ["--find-links", str(find_links)] if find_links is not None else []
    return [
        uv,
        "pip",
        "sync",
        "--python",
        str(venv_python),
        "--offline",
        "--no-index",
        *links,
        "--require-hashes",
        "--no-cache",
        str(requirements),
    ]


def probe_command(
    venv_python: PurePath,
    zipapp: PurePath,
    pylock: PurePath,
    report: PurePath,
    env: EnvSpec,
    target: str,
    options: ValidateOptions,
) -> list[str]:
    """The probe's command line, run with the venv's Python (probe contract in the brief)."""
    return [
        str(venv_python),
        str(zipapp),
        *probe_options(env, options, {"env": env.name, "target": target}),
        "--lock",
        str(pylock),
        "--json",
        str(report),
    ]


def marker_bytes(
    venv: Path,
    env: str,
    target: str,
    lock_sha256: str,
    python: str,
    packages: Mapping[str, str],
) -> bytes:
    """The marker of a finished build: sorted JSON, no timestamp (same build, same bytes)."""
    data = {
        "marker_version": MARKER_VERSION,
        "state": COMPLETE,
        "venv": str(venv),
        "env": env,
        "target": target,
        "lock_sha256": lock_sha256,
        "python": python,
        "envbuilder_version": __version__,
        "packages": dict(sorted(packages.items())),
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def incomplete_marker_bytes(venv: Path, env: str, target: str) -> bytes:
    """The marker written before a build changes the venv: it still proves envbuilder owns the
    folder, and says the venv is not (yet) what any lock describes."""
    data = {
        "marker_version": MARKER_VERSION,
        "state": INCOMPLETE,
        "venv": str(venv),
        "env": env,
        "target": target,
        "envbuilder_version": __version__,
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def marker_state(marker: Mapping[str, Any]) -> str:
    """ "complete" or "incomplete" (a marker of an older envbuilder has no state: complete)."""
    return INCOMPLETE if marker.get("state", COMPLETE) != COMPLETE else COMPLETE


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's content, or None when it is missing or unreadable (then the venv is synced)."""
    try:  # statefile: a FIFO, a link, a huge or deeply nested marker is no marker
        data = read_state(path, _MAX_MARKER_BYTES, "json", "")
    except StateFileError:
        return None
    return data if isinstance(data, dict) and data.get("marker_version") == MARKER_VERSION else None


def package_diff(installed: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Human lines for every difference: extra, missing, other version ([] when equal)."""
    inst = {canonicalize_name(k): v for k, v in installed.items()}
    want = {canonicalize_name(k): v for k, v in expected.items()}
    out = [f"extra: {n}=={inst[n]}" for n in sorted(inst.keys() - want.keys())]
    out += [f"missing: {n}=={want[n]}" for n in sorted(want.keys() - inst.keys())]
    out += [
        f"other version: {n}=={inst[n]} (lock: {want[n]})"
        for n in sorted(inst.keys() & want.keys())
        if inst[n] != want[n]
    ]
    return out


def sync_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What a sync did, one short item per package: "+name==v", "-name==v", "name a -> b"."""
    old = {canonicalize_name(k): v for k, v in before.items()}
    new = {canonicalize_name(k): v for k, v in after.items()}
    out = [f"+{n}=={new[n]}" for n in sorted(new.keys() - old.keys())]
    out += [f"-{n}=={old[n]}" for n in sorted(old.keys() - new.keys())]
    out += [
        f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]
    ]
    return out


def _run(
    cmd: Sequence[str],
    what: str,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess[str]:
    try:  # in its own process group, ended with envbuilder when interrupted
        return interrupts.run(cmd, env=env, timeout=timeout, pass_fds=pass_fds)
    except FileNotFoundError as exc:
        raise BuildError(f"{what}: cannot run {cmd[0]}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what}: no answer within {timeout} s") from exc


class VenvBuilder:
    """The shared lifecycle; subclasses set the host OS, layout and Python discovery."""

    name: ClassVar[str]
    windows: ClassVar[bool]
    host_platform: ClassVar[str]  # sys.platform where this target can build

    # --- hooks -----------------------------------------------------------------------------

    def plan(self, env: EnvSpec, lock_sha256: str | None = None) -> Plan:
        """The target's plan for `env` (its descriptor's `plan`): what this builder carries out
        (find Python, make the venv, install the pylock, write the activation)."""
        descriptor = registry.get(self.name)
        if descriptor.plan is None:
            raise BuildError(f"target {self.name} has no plan (a bug in its descriptor)")
        pins = LockPins(None, pylock_name(env.name, self.name), lock_sha256)
        return descriptor.plan(env, PlanInputs(None, pins, descriptor.variables(env)))

    def python_request(self, env: EnvSpec) -> str:
        """The "MAJOR.MINOR" Python this env needs on this target (its plan's find-python)."""
        step = self.plan(env).first(FindPython)
        return step.version if step is not None else env.python_for(self.name)

    def find_python(self, version: str) -> pyfinder.FoundPython:
        return pyfinder.find_python(version, windows=self.windows)

    def wrong_host_message(self) -> str:
        """Why this host cannot build or validate this target, and what to use instead."""
        return f"the {self.name} target cannot run on {sys.platform}"

    # --- public ----------------------------------------------------------------------------

    def venv_path(self, project: Project, env: EnvSpec, path: Path | None = None) -> Path:
        """Where the venv is: `path` (--path) or the default under .envbuilder/venvs/; absolute,
        `..` removed from its spelling (links are not followed)."""
        # abspath, not resolve(): a link in the path stays as the user wrote it
        return Path(
            os.path.abspath(  # noqa: PTH100
                path or default_venv_path(project, env.name, self.name)
            )
        )

    def variables(self, env: EnvSpec) -> dict[str, str]:
        """The env's variables as this target's activation sets them (its plan's
        write-activation step)."""
        step = self.plan(env).first(WriteActivation)
        return dict(step.variables) if step is not None else {}

    def build(
        self, project: Project, env: EnvSpec, options: BuildOptions, progress: ProgressFn
    ) -> Artifact:
        """Make the venv at `options.path` hold exactly the env's lock for this target. Returns
        the venv as an Artifact; details["changed"] is "no" when it already did (nothing was
        written), details["changes"] lists what the sync added, removed or moved.

        Refuses (BuildError, nothing changed) a path that holds anything but nothing, an empty
        folder or a venv envbuilder made; `options.force` takes over a venv envbuilder did not
        make when its folder holds nothing else (claim_folder). Raises LockError/BuildError before
        touching the venv when the lock is not trustworthy."""
        self._check_host_and_env(env)
        venv = self.venv_path(project, env, options.path)
        real_folders_to(project.root, venv / MARKER)  # the default .envbuilder/venvs/<name>
        folder = claim_folder(venv, options.force)
        layout = VenvLayout(venv, self.windows)
        lock_sha = self._verified_lock_sha(project, env)
        if folder.kind == "ours" and self._is_current(layout, env, lock_sha):
            progress(f"{env.name}/{self.name}: venv is current", 1, 1)
            return self._artifact(env, venv, lock_sha, None)
        # Held from the first change to the end, and by the uv started: a build after one that
        # was killed while its uv went on syncing (its marker says incomplete) stops here.
        with stale.hold(venv_lock_path(project, venv), busy_message(venv)) as held:
            return self._change(
                project, env, venv, claim_folder(venv, options.force), held.fd, lock_sha, progress
            )

    def _change(
        self,
        project: Project,
        env: EnvSpec,
        venv: Path,
        folder: VenvFolder,
        lock_fd: int,
        lock_sha: str,
        progress: ProgressFn,
    ) -> Artifact:
        """Install the lock into the venv and write its activation and marker, while this
        process holds the venv's lock (`lock_fd`, handed to uv)."""
        layout = VenvLayout(venv, self.windows)
        python, packages, changes = self._install_locked(project, env, folder, lock_fd, progress)
        variables = self._venv_variables(layout, env)
        _write_or_fail(
            lambda: activate.write_activation(Path(layout.scripts), variables, self.windows),
            layout.scripts,
        )
        # the complete marker last: until then it says "incomplete" (see _install_locked)
        _write_or_fail(
            lambda: atomic_write_bytes(
                Path(layout.marker),
                marker_bytes(venv, env.name, self.name, lock_sha, python, packages),
            ),
            layout.marker,
        )
        progress(f"{env.name}/{self.name}: venv ready", 1, 1)
        return self._artifact(env, venv, lock_sha, changes)

    def _install_locked(
        self,
        project: Project,
        env: EnvSpec,
        folder: VenvFolder,
        lock_fd: int,
        progress: ProgressFn,
    ) -> tuple[str, dict[str, str], list[str]]:
        """Fetch and verify every locked artifact and find Python, and only then mark the venv
        incomplete and create or sync it. Returns its Python version, its packages and what the
        sync changed."""
        from envbuilder.lock import wheelcache  # the lock helper's module; imported when building

        layout = VenvLayout(folder.path, self.windows)
        progress(f"{env.name}/{self.name}: fetching locked artifacts", 0, None)
        artifacts = wheelcache.fetch_locked(
            project, env.name, self.name, progress, indexes=env.indexes
        )
        expected = {a.name: a.version for a in artifacts}
        # a venv envbuilder did not make is never run, only replaced (--force)
        kept = self._usable_python(layout, env) if folder.kind == "ours" else None
        before = (self._packages_or_none(layout) or {}) if folder.kind == "ours" else {}
        if not kept and folder.strangers:  # refused now, before the marker changes
            raise BuildError(strangers_message(folder.path, folder.strangers))
        # found before anything changes: a missing Python leaves the old venv as it was
        found = None if kept else self.find_python(self.python_request(env))
        python = self._sync_from_wheelhouse(project, env, layout, lock_fd, kept, found, progress)
        packages: dict[str, str] = self._state(layout)["packages"]
        if diff := package_diff(packages, expected):
            raise BuildError(
                f"after sync the venv at {layout.root} differs from the lock: {'; '.join(diff)}"
            )
        changes = sync_changes(before, packages)
        if changes:
            progress(f"{env.name}/{self.name}: {', '.join(changes)}", 0, None)
        return python, packages, changes

    def _sync_from_wheelhouse(
        self,
        project: Project,
        env: EnvSpec,
        layout: VenvLayout,
        lock_fd: int,
        kept: str | None,
        found: pyfinder.FoundPython | None,
        progress: ProgressFn,
    ) -> str:
        """Mark the venv incomplete, make it with the Python `found` unless its `kept` Python is
        usable, and sync it from a wheelhouse of the fetched artifacts; its Python version."""
        from envbuilder.lock import wheelcache

        project.cache.mkdir(parents=True, exist_ok=True)
        # swept by the next build once no process (this one, or a uv it started that outlived
        # a SIGKILL) holds its owner file
        with stale.owned_dir("venv-wheelhouse-", project.cache) as owned:
            house = owned.path
            fds = (lock_fd, owned.fd)  # uv holds both for as long as it runs
            requirements = wheelcache.write_wheelhouse(
                project,
                env.name,
                self.name,
                house,
                in_image_prefix=str(house / "wheels"),
                indexes=env.indexes,
            )
            self._mark_incomplete(layout, env)
            version = kept or self._make_venv(layout, env, found, fds, progress)
            progress(f"{env.name}/{self.name}: syncing the venv to the lock", 0, None)
            self._sync(layout, requirements, fds)
        return version

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        """Run the probe with the venv's Python against the env's pylock; write and return
        reports/<env>.<target>.json. Raises ValidationError when the probe cannot run."""
        self._check_host_and_env(env, error=ValidationError)
        venv = self.venv_path(project, env, options.path)
        layout = VenvLayout(venv, self.windows)
        self._refuse_incomplete(layout, env, options.path)
        if not Path(layout.python).exists():
            raise ValidationError(
                f"no venv at {venv} (no {layout.python}); build it first: envbuilder build "
                f"--target {self.name} --env {env.name}"
            )
        pylock = project.pylock(env.name, self.name)
        if not pylock.is_file():
            raise ValidationError(f"{pylock} is missing; run: envbuilder lock --env {env.name}")
        other = refuse_other_lock(self._other_lock(project, env, layout), options)
        from envbuilder.probe import build_zipapp  # the probe helper's module

        with temp_dir("envbuilder-probe-") as tmp:
            zipapp = build_zipapp(Path(tmp) / "probe.pyz")
            report = Path(tmp) / "report.json"
            cmd = probe_command(layout.python, zipapp, pylock, report, env, self.name, options)
            progress(f"{env.name}/{self.name}: probe ({options.level})", 0, None)
            proc = self._run_probe(cmd, layout, env, options, cwd=Path(tmp))
            if not report.is_file():
                raise ValidationError(
                    f"the probe wrote no report (exit {proc.returncode}):\n"
                    f"{output_tail(proc.stdout + proc.stderr, 15)}"
                )
            dest = project.report(env.name, self.name)
            real_folders_to(project.root, dest)
            atomic_write_bytes(dest, with_other_lock(report.read_bytes(), other))
        progress(f"{env.name}/{self.name}: probe done", 1, 1)
        return dest

    def command(
        self, project: Project, env: EnvSpec, options: RunOptions, progress: ProgressFn
    ) -> RunCommand:
        """`options.command` (default: the user's $SHELL) with the environment the probe gets
        (`validate`), and as a pasteable line: the venv's activate script, then the command.
        Refuses (ValidationError) a venv that is missing, incomplete, or holds another lock
        than the current one (its marker says which)."""
        self._check_host_and_env(env, error=ValidationError)
        venv = self.venv_path(project, env, options.path)
        layout = VenvLayout(venv, self.windows)
        self._refuse_incomplete(layout, env, options.path)
        marker = read_marker(Path(layout.marker))
        if marker is None or not Path(layout.python).exists():
            raise ValidationError(
                f"no venv envbuilder built at {venv}; build it first: envbuilder build "
                f"--target {self.name} --env {env.name}"
                + (f" --path {venv}" if options.path is not None else "")
            )
        if other := self._other_lock(project, env, layout):
            raise ValidationError(other.reason)
        progress(f"{env.name}/{self.name}: venv {venv}", 0, None)
        argv = options.command or (_user_shell(self.windows),)
        environment = self._run_environment(layout, env)
        line = (
            activation_line(layout.scripts, options.command, self.windows)
            if self.windows
            else posix_run_line(layout, self._venv_variables(layout, env), argv)
        )
        return RunCommand(tuple(argv), line, "powershell" if self.windows else "sh", environment)

    # --- steps -----------------------------------------------------------------------------

    def _check_host_and_env(
        self, env: EnvSpec, error: type[BuildError | ValidationError] = BuildError
    ) -> None:
        if sys.platform != self.host_platform:
            raise error(self.wrong_host_message())
        if self.name not in env.targets:
            raise UsageError(
                f"env {env.name!r} has no target {self.name!r} (environments.toml, "
                f"env.{env.name}.targets lists: {', '.join(env.targets)})"
            )

    def _other_lock(self, project: Project, env: EnvSpec, layout: VenvLayout) -> OtherLock | None:
        """None when the venv's marker names the current lock; else what it names and why that
        is not the lock's venv. `run` refuses such a venv, `validate` unless told otherwise."""
        venv = layout.root
        lock_sha = self._verified_lock_sha(project, env)
        marker = read_marker(Path(layout.marker))
        if marker is None:
            return OtherLock(
                f"the venv at {venv}",
                None,
                lock_sha,
                f"the venv at {venv} has no marker of envbuilder's ({MARKER}): it was not built "
                f"from the lock; build it: envbuilder build --target {self.name} --env {env.name}",
            )
        named = marker.get("lock_sha256")
        if named == lock_sha:
            return None
        return OtherLock(
            f"the venv at {venv}",
            named if isinstance(named, str) else None,
            lock_sha,
            f"the venv at {venv} holds lock {named}, not the current "
            f"{pylock_name(env.name, self.name)} ({lock_sha}); sync it: envbuilder build "
            f"--target {self.name} --env {env.name}",
        )

    def _verified_lock_sha(self, project: Project, env: EnvSpec) -> str:
        """The pylock's sha256, after load_verified_lock checked the env lock (current
        for the spec the env was loaded from, the env's own) and the pylock (as recorded,
        well-formed)."""
        from envbuilder.lock.verified import load_verified_lock

        verified = load_verified_lock(project, env.name, self.name, env.spec_hash)
        return verified.pylock.entry.pylock_sha256

    def _refuse_incomplete(self, layout: VenvLayout, env: EnvSpec, path: Path | None) -> None:
        """ValidationError when the marker says a build of this venv did not finish."""
        marker = read_marker(Path(layout.marker))
        if marker is None or marker_state(marker) != INCOMPLETE:
            return
        again = f"envbuilder build --target {self.name} --env {env.name}"
        if path is not None:
            again += f" --path {layout.root}"
        raise ValidationError(
            f"the venv at {layout.root} is incomplete: a build of it was interrupted or failed "
            f'({layout.marker} says state "{INCOMPLETE}"), so it holds no known lock. Build '
            f"it again: {again}"
        )

    def _venv_variables(self, layout: VenvLayout, env: EnvSpec) -> dict[str, str]:
        """The plan's variables, and on a pip-SDK release (Linux) ROCM_PATH first: what the
        venv's `rocm-sdk path --root` says (ROCm lives inside the venv; the path is known only
        once it is installed), unless the spec sets ROCM_PATH itself. BuildError when the venv
        cannot answer."""
        variables = self.variables(env)
        if self.windows or sdk_release(env) is None or "ROCM_PATH" in variables:
            return variables
        return {"ROCM_PATH": self._sdk_root(layout), **variables}

    def _sdk_root(self, layout: VenvLayout) -> str:
        command = str(layout.scripts / "rocm-sdk")
        proc = _run([command, "path", "--root"], "asking rocm-sdk for ROCm's root", timeout=120)
        root = proc.stdout.strip()
        if proc.returncode != 0 or not root or "\n" in root:
            said = output_tail(proc.stderr, 15) or f"it printed {proc.stdout.strip()!r}"
            raise BuildError(
                f"`{command} path --root` (the pip SDK's ROCm root, the venv's ROCM_PATH) "
                f"failed with exit code {proc.returncode}:\n{said}"
            )
        return root

    def _is_current(self, layout: VenvLayout, env: EnvSpec, lock_sha: str) -> bool:
        marker = read_marker(Path(layout.marker))
        if marker is None or marker_state(marker) != COMPLETE:
            return False
        if marker.get("lock_sha256") != lock_sha:
            return False
        if (marker.get("env"), marker.get("target"), marker.get("venv")) != (
            env.name,
            self.name,
            str(layout.root),
        ):
            return False
        try:
            state = self._state(layout)
        except BuildError:
            return False
        packages = marker.get("packages")
        return (
            isinstance(packages, dict)
            and _is_venv_at(state, Path(layout.root))
            and self._python_matches(state["python"], env)
            and not package_diff(state["packages"], packages)
            and self._activation_is_current(layout, env)
        )

    def _activation_is_current(self, layout: VenvLayout, env: EnvSpec) -> bool:
        try:
            variables = self._venv_variables(layout, env)
        except BuildError:
            return False  # rocm-sdk does not answer: the venv is synced again
        return activate.activation_is_current(Path(layout.scripts), variables, self.windows)

    def _python_matches(self, full: str, env: EnvSpec) -> bool:
        return full.rsplit(".", 1)[0] == self.python_request(env)

    def _usable_python(self, layout: VenvLayout, env: EnvSpec) -> str | None:
        """The full Python version of the venv at layout.root when it works, is a venv of that
        folder and has the Python the env needs; None when it must be made again."""
        if not Path(layout.python).exists():
            return None
        try:
            state = self._state(layout)
        except BuildError:
            return None  # a broken venv (its base Python removed): made again
        if not _is_venv_at(state, Path(layout.root)):
            return None  # its bin/python is another environment's: never synced
        return str(state["python"]) if self._python_matches(state["python"], env) else None

    def _mark_incomplete(self, layout: VenvLayout, env: EnvSpec) -> None:
        """Write the "incomplete" marker (creating the folder if needed) before the venv is
        changed: an interrupted build leaves a folder that is provably envbuilder's, that the
        next build repairs and that validate refuses."""
        _write_or_fail(
            lambda: atomic_write_bytes(
                Path(layout.marker), incomplete_marker_bytes(Path(layout.root), env.name, self.name)
            ),
            layout.marker,
        )

    def _make_venv(
        self,
        layout: VenvLayout,
        env: EnvSpec,
        found: pyfinder.FoundPython | None,
        fds: Sequence[int],
        progress: ProgressFn,
    ) -> str:
        """A new venv of `found` at layout.root, whose folder holds the incomplete marker; what
        an old venv left there (wrong Python, broken, taken over with --force) is removed first.
        Returns its Python version."""
        assert found is not None  # _install_locked finds Python whenever no venv is kept
        venv = Path(layout.root)
        if [p for p in venv.iterdir() if p.name != MARKER]:
            progress(f"{env.name}/{self.name}: removing the old venv in {venv}", 0, None)
            empty_venv_folder(venv)
        progress(f"{env.name}/{self.name}: creating venv with Python {found.version}", 0, None)
        cmd = uv_venv_command(
            pyfinder.uv_bin(), str(found.executable), venv, f"{env.name}-{self.name}"
        )
        proc = _run(cmd, "creating the venv", env=uv_venv_environment(), pass_fds=fds)
        if proc.returncode != 0:
            said = output_tail(proc.stderr, 15)
            raise BuildError(f"creating the venv at {venv} failed:\n{said}")
        return found.version

    def _sync(self, layout: VenvLayout, requirements: Path, fds: Sequence[int]) -> None:
        proc = _run(
            uv_sync_command(
                pyfinder.uv_bin(), layout.python, requirements, requirements.parent / "wheels"
            ),
            "installing the lock",
            pass_fds=fds,
        )
        if proc.returncode != 0:
            raise BuildError(
                f"installing the locked packages into {layout.root} failed:\n"
                f"{output_tail(proc.stderr, 15)}"
            )

    def _state(self, layout: VenvLayout) -> dict[str, Any]:
        """The venv Python's version and installed distributions."""
        proc = _run(
            [str(layout.python), "-I", "-c", _STATE_SCRIPT],
            "reading the venv",
            env=_clean_env(),
            timeout=120,
        )
        if proc.returncode != 0:
            raise BuildError(
                f"the venv's Python at {layout.python} does not run:\n"
                f"{output_tail(proc.stderr, 15)}"
            )
        data: dict[str, Any] = json.loads(proc.stdout)
        data["packages"] = {str(canonicalize_name(k)): v for k, v in data["packages"].items()}
        return data

    def _run_probe(
        self, cmd: list[str], layout: VenvLayout, env: EnvSpec, options: ValidateOptions, cwd: Path
    ) -> subprocess.CompletedProcess[str]:
        """Run the probe in an empty folder: a project checkout as the working directory would
        put its own packages (e.g. envbuilder.egg-info) on `python -m`'s path."""
        run_env = self._run_environment(layout, env)
        try:
            return interrupts.run(cmd, env=run_env, timeout=options.timeout_s, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            raise ValidationError(f"the probe did not finish within {options.timeout_s} s") from exc
        except OSError as exc:
            raise ValidationError(f"cannot run the venv's Python {cmd[0]}: {exc}") from exc

    def _run_environment(self, layout: VenvLayout, env: EnvSpec) -> dict[str, str]:
        """The environment the probe (and `envbuilder run`) gets: envbuilder's own without what
        would show other packages, the env's variables, the venv first on PATH."""
        run_env = _clean_env()
        try:
            run_env.update(self._venv_variables(layout, env))
        except BuildError as exc:
            raise ValidationError(str(exc)) from None
        run_env["VIRTUAL_ENV"] = str(layout.root)
        run_env["PATH"] = os.pathsep.join([str(layout.scripts), run_env.get("PATH", "")])
        return run_env

    def _packages_or_none(self, layout: VenvLayout) -> dict[str, str] | None:
        if not Path(layout.python).exists():
            return None
        try:
            packages: dict[str, str] = self._state(layout)["packages"]
        except BuildError:
            return None
        return packages

    def _artifact(
        self, env: EnvSpec, venv: Path, lock_sha: str, changes: list[str] | None
    ) -> Artifact:
        """changes None: nothing was done (the venv was current)."""
        details = {"lock_sha256": lock_sha, "changed": "no" if changes is None else "yes"}
        if changes is not None:
            details["changes"] = ", ".join(changes) or "none"
        return Artifact(
            target=self.name, env=env.name, reference=str(venv), digest=None, details=details
        )


def _user_shell(windows: bool) -> str:
    """The interactive shell `envbuilder shell` starts in a venv: $SHELL (POSIX; /bin/sh
    without it), PowerShell on Windows."""
    if windows:
        return "powershell.exe"
    return os.environ.get("SHELL") or "/bin/sh"


def activation_line(scripts: PurePath, command: Sequence[str], windows: bool) -> str:
    """What a user pastes to do what `envbuilder run` does in a venv: source its activate
    script (which sets the env's variables too), then run `command` (nothing when empty).
    The native target's `run --print` gives posix_run_line instead (the activate script is
    bash's and zsh's, not POSIX sh's)."""
    if windows:
        line = f"& {ps_quote(str(scripts / 'Activate.ps1'))}"
        return f"{line}; & {' '.join(ps_quote(a) for a in command)}" if command else line
    line = f". {shlex.quote(str(scripts / 'activate'))}"
    return f"{line} && {shlex.join(command)}" if command else line


def posix_run_line(layout: VenvLayout, variables: Mapping[str, str], argv: Sequence[str]) -> str:
    """`envbuilder run` in a native venv as one POSIX sh line: in a subshell (the pasting
    shell keeps its own environment), the variables run drops unset, the venv's and the env's
    exported, then exactly `argv` (quoting.sh_command). No activate script: it is written for
    bash and zsh (`declare -f`), and it would not drop what run drops."""
    steps = [f"unset {' '.join(sorted(_DROPPED))}"]
    if variables:
        steps.append("export " + " ".join(f"{k}={sh_word(v)}" for k, v in variables.items()))
    # a second export: "$PATH" is expanded before export runs, so it is the env's PATH if it
    # sets one, as run's is
    venv_bin = sh_word(str(layout.scripts) + os.pathsep)
    steps.append(f'export VIRTUAL_ENV={sh_word(str(layout.root))} PATH={venv_bin}"$PATH"')
    return f"({'; '.join([*steps, sh_command(argv)])})"


def _is_venv_at(state: Mapping[str, Any], venv: Path) -> bool:
    """True when the interpreter that reported `state` is a venv's, and that venv is `venv`."""
    prefix, base = state.get("prefix"), state.get("base_prefix")
    if not isinstance(prefix, str) or prefix == base:
        return False
    try:
        return Path(prefix).samefile(venv)
    except OSError:
        return False


def _write_or_fail(write: Callable[[], object], where: PurePath) -> None:
    """Run a write into the venv; a failing disk or permission is a BuildError, not a traceback."""
    try:
        write()
    except OSError as exc:
        raise BuildError(f"cannot write {where}: {exc.strerror or exc}") from None


#: What would make the venv's Python see other packages: not passed to what runs in a venv.
_DROPPED = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV"})


def _clean_env() -> dict[str, str]:
    """The caller's environment without _DROPPED."""
    return {k: v for k, v in os.environ.items() if k not in _DROPPED}


class NativeVenvBuilder(VenvBuilder):
    """A venv on a Linux host (Python found by uv), e.g. for a machine with ROCm installed."""

    name = "native"
    windows = False
    host_platform = "linux"

    def wrong_host_message(self) -> str:
        return (
            f"the native target builds a Linux venv (its lock is for x86_64 manylinux) and "
            f"runs only on Linux, not on {sys.platform}; on Windows use --target windows"
        )


class WindowsVenvBuilder(VenvBuilder):
    """A venv on Windows (Python found by the py launcher) for AMD's native Windows wheels."""

    name = "windows"
    windows = True
    host_platform = "win32"

    def wrong_host_message(self) -> str:
        return (
            f"the windows target builds a venv with Windows' Python and the env's Windows "
            f"wheels, so it needs Windows (this is {sys.platform}); run the same command "
            f"there, or use the rendered windows/<env>/setup.ps1. On Linux use --target "
            f"native, docker or wsl2"
        )

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

The folder and its marker (step 0, the marker's bytes) are envbuilder.builders.venvfolder; the
command lines the build runs and the lines `run --print` gives, envbuilder.builders.venvcommands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, ClassVar

from packaging.utils import canonicalize_name

from envbuilder.builders.proberun import OtherLock, refuse_other_lock, with_other_lock
from envbuilder.builders.venvcommands import (
    STATE_SCRIPT,
    VenvLayout,
    activation_line,
    clean_env,
    package_diff,
    posix_run_line,
    probe_command,
    run_tool,
    sync_changes,
    user_shell,
    uv_sync_command,
    uv_venv_command,
    uv_venv_environment,
)
from envbuilder.builders.venvfolder import (
    COMPLETE,
    INCOMPLETE,
    MARKER,
    VenvFolder,
    busy_message,
    claim_folder,
    default_venv_path,
    empty_venv_folder,
    incomplete_marker_bytes,
    marker_bytes,
    marker_state,
    read_marker,
    strangers_message,
    venv_lock_path,
)
from envbuilder.core import activate, interrupts, stale
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import BuildError, UsageError, ValidationError, output_tail
from envbuilder.core.fsutil import atomic_write_bytes, temp_dir
from envbuilder.core.model import EnvSpec
from envbuilder.core.pipsdk import sdk_release
from envbuilder.core.plan import FindPython, LockPins, Plan, PlanInputs, WriteActivation
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project, pylock_name
from envbuilder.host import pyfinder
from envbuilder.targets import registry
from envbuilder.targets.base import Artifact, BuildOptions, RunCommand, RunOptions, ValidateOptions


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
        argv = options.command or (user_shell(self.windows),)
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
        proc = run_tool([command, "path", "--root"], "asking rocm-sdk for ROCm's root", timeout=120)
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
        proc = run_tool(cmd, "creating the venv", env=uv_venv_environment(), pass_fds=fds)
        if proc.returncode != 0:
            said = output_tail(proc.stderr, 15)
            raise BuildError(f"creating the venv at {venv} failed:\n{said}")
        return found.version

    def _sync(self, layout: VenvLayout, requirements: Path, fds: Sequence[int]) -> None:
        proc = run_tool(
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
        proc = run_tool(
            [str(layout.python), "-I", "-c", STATE_SCRIPT],
            "reading the venv",
            env=clean_env(),
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
        run_env = clean_env()
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

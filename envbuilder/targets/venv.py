"""The venv targets: `native` (Linux) and `windows` (the "native Windows driver" option).

Both make a plain venv that holds exactly the env's pylock, installed offline from the host wheel
cache with hash checking (`uv pip sync --require-hashes`), with the env's variables written into
its activate scripts and a marker file (`envbuilder-venv.json`) that records what was built.

Order of a build, so a bad lock never touches a working venv:
  1. the pylock's sha256 must equal what the env lock recorded (a hand-edited pylock is refused);
  2. nothing to do when the marker names this lock and the venv holds exactly its packages;
  3. every locked artifact is fetched into the wheel cache and verified by sha256;
  4. only then the venv is created (or re-created, when its Python is wrong) and synced: what the
     lock dropped is removed, what it added is installed;
  5. the activate scripts and, last, the marker are written.
The two targets differ only in their host OS, their folder layout (`bin/python` vs
`Scripts\\python.exe`), and how Python is found (uv vs the `py` launcher).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, ClassVar

from packaging.utils import canonicalize_name

from envbuilder import __version__, activate, interrupts, pyfinder
from envbuilder.errors import BuildError, LockError, UsageError, ValidationError
from envbuilder.fsutil import atomic_write_bytes, sha256_file, temp_dir
from envbuilder.project import Project
from envbuilder.spec import EnvSpec, TargetName
from envbuilder.targets import Artifact, ProgressFn, ValidateOptions, probe_options, register

MARKER = "envbuilder-venv.json"
MARKER_VERSION = 1

#: Run by the venv's Python: its version and the installed distributions (what sync produced).
_STATE_SCRIPT = (
    "import json, sys, importlib.metadata as m\n"
    "pk = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n: pk[n] = d.version\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': pk}))\n"
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


def default_venv_path(project: Project, env: str, target: str) -> Path:
    """The venv's folder when `--path` is not given: <project>/.envbuilder/venvs/<env>-<target>
    (gitignored)."""
    return project.root / ".envbuilder" / "venvs" / f"{env}-{target}"


def uv_venv_command(uv: str, python: str, venv: PurePath, prompt: str) -> list[str]:
    """Create a venv (no pip, setuptools or wheel in it: it holds the lock and nothing else)."""
    return [uv, "venv", "--no-project", "--python", python, "--prompt", prompt, str(venv)]


def uv_sync_command(uv: str, venv_python: PurePath, requirements: PurePath) -> list[str]:
    """Make the venv hold exactly `requirements` (local files with hashes): offline, no index,
    every artifact's sha256 checked.

    `--no-cache`: the wheels sit in a fresh wheelhouse folder each build, so uv's cache would
    key every build's torch anew and keep one more unpacked copy (~0.7 GB) each time (seen
    here: 30 copies, 21 GB). envbuilder's own wheel cache already keeps the downloads."""
    return [uv, "pip", "sync", "--python", str(venv_python), "--offline", "--no-index",
            "--require-hashes", "--no-cache", str(requirements)]


def probe_command(
    venv_python: PurePath, zipapp: PurePath, pylock: PurePath, report: PurePath,
    env: EnvSpec, target: str, options: ValidateOptions,
) -> list[str]:
    """The probe's command line, run with the venv's Python (probe contract in the brief)."""
    return [str(venv_python), str(zipapp),
            *probe_options(env, options, {"env": env.name, "target": target}),
            "--lock", str(pylock), "--json", str(report)]


def marker_bytes(
    venv: Path, env: str, target: str, lock_sha256: str, python: str,
    packages: Mapping[str, str],
) -> bytes:
    """The marker's content: sorted JSON, no timestamp (same build, same bytes)."""
    data = {
        "marker_version": MARKER_VERSION, "venv": str(venv), "env": env, "target": target,
        "lock_sha256": lock_sha256, "python": python, "envbuilder_version": __version__,
        "packages": dict(sorted(packages.items())),
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's content, or None when it is missing or unreadable (then the venv is synced)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("marker_version") == MARKER_VERSION else None


def package_diff(installed: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Human lines for every difference: extra, missing, other version ([] when equal)."""
    inst = {canonicalize_name(k): v for k, v in installed.items()}
    want = {canonicalize_name(k): v for k, v in expected.items()}
    out = [f"extra: {n}=={inst[n]}" for n in sorted(inst.keys() - want.keys())]
    out += [f"missing: {n}=={want[n]}" for n in sorted(want.keys() - inst.keys())]
    out += [f"other version: {n}=={inst[n]} (lock: {want[n]})"
            for n in sorted(inst.keys() & want.keys()) if inst[n] != want[n]]
    return out


def sync_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What a sync did, one short item per package: "+name==v", "-name==v", "name a -> b"."""
    old = {canonicalize_name(k): v for k, v in before.items()}
    new = {canonicalize_name(k): v for k, v in after.items()}
    out = [f"+{n}=={new[n]}" for n in sorted(new.keys() - old.keys())]
    out += [f"-{n}=={old[n]}" for n in sorted(old.keys() - new.keys())]
    out += [f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys())
            if old[n] != new[n]]
    return out


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(cmd: Sequence[str], what: str, env: Mapping[str, str] | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    try:  # in its own process group, ended with envbuilder when interrupted
        return interrupts.run(cmd, env=env, timeout=timeout)
    except FileNotFoundError as exc:
        raise BuildError(f"{what}: cannot run {cmd[0]}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what}: no answer within {timeout} s") from exc


class VenvTarget:
    """The shared lifecycle; subclasses set the host OS, layout and Python discovery."""

    name: ClassVar[TargetName]
    windows: ClassVar[bool]
    host_platform: ClassVar[str]  # sys.platform where this target can build

    # --- hooks -----------------------------------------------------------------------------

    def python_request(self, env: EnvSpec) -> str:
        """The "MAJOR.MINOR" Python this env needs on this target."""
        return env.python_for(self.name)

    def find_python(self, version: str) -> pyfinder.FoundPython:
        return pyfinder.find_python(version, windows=self.windows)

    def wrong_host_message(self) -> str:
        """Why this host cannot build or validate this target, and what to use instead."""
        return f"the {self.name} target cannot run on {sys.platform}"

    # --- public ----------------------------------------------------------------------------

    def venv_path(self, project: Project, env: EnvSpec, path: Path | None = None) -> Path:
        """Where the venv is: `path` (--path) or the default under .envbuilder/venvs/."""
        return (path or default_venv_path(project, env.name, self.name)).absolute()

    def build(self, project: Project, env: EnvSpec, progress: ProgressFn,
              path: Path | None = None) -> Artifact:
        """Make the venv at `path` hold exactly the env's lock for this target. Returns the venv
        as an Artifact; details["changed"] is "no" when it already did (nothing was written),
        details["changes"] lists what the sync added, removed or moved.
        Raises LockError/BuildError before touching the venv when the lock is not trustworthy."""
        self._check_host_and_env(env)
        venv = self.venv_path(project, env, path)
        self._refuse_foreign_folder(venv)
        layout = VenvLayout(venv, self.windows)
        lock_sha = self._verified_lock_sha(project, env)
        variables = activate.activation_env(env, self.name)
        if self._is_current(layout, env, lock_sha, variables):
            progress(f"{env.name}/{self.name}: venv is current", 1, 1)
            return self._artifact(env, venv, lock_sha, None)
        python, packages, changes = self._install_locked(project, env, layout, progress)
        activate.write_activation(Path(layout.scripts), variables, self.windows)
        # the marker last: an interrupted build is redone next time
        atomic_write_bytes(Path(layout.marker),
                           marker_bytes(venv, env.name, self.name, lock_sha, python, packages))
        progress(f"{env.name}/{self.name}: venv ready", 1, 1)
        return self._artifact(env, venv, lock_sha, changes)

    def _install_locked(self, project: Project, env: EnvSpec, layout: VenvLayout,
                        progress: ProgressFn) -> tuple[str, dict[str, str], list[str]]:
        """Fetch and verify every locked artifact, and only then create or sync the venv.
        Returns its Python version, its packages and what the sync changed."""
        from envbuilder import wheelcache  # the lock helper's module; imported when building

        progress(f"{env.name}/{self.name}: fetching locked artifacts", 0, None)
        artifacts = wheelcache.fetch_locked(project, env.name, self.name, progress)
        expected = {a.name: a.version for a in artifacts}
        before = self._packages_or_none(layout) or {}
        project.cache.mkdir(parents=True, exist_ok=True)
        with temp_dir("venv-wheelhouse-", project.cache) as tmp:
            house = Path(tmp)
            requirements = wheelcache.write_wheelhouse(
                project, env.name, self.name, house, in_image_prefix=str(house / "wheels"))
            python = self._ensure_venv(layout, env, progress)
            progress(f"{env.name}/{self.name}: syncing the venv to the lock", 0, None)
            self._sync(layout, requirements)
        packages: dict[str, str] = self._state(layout)["packages"]
        if diff := package_diff(packages, expected):
            raise BuildError(f"after sync the venv at {layout.root} differs from the lock: "
                             f"{'; '.join(diff)}")
        changes = sync_changes(before, packages)
        if changes:
            progress(f"{env.name}/{self.name}: {', '.join(changes)}", 0, None)
        return python, packages, changes

    def validate(self, project: Project, env: EnvSpec, options: ValidateOptions,
                 progress: ProgressFn, path: Path | None = None) -> Path:
        """Run the probe with the venv's Python against the env's pylock; write and return
        reports/<env>.<target>.json. Raises ValidationError when the probe cannot run."""
        self._check_host_and_env(env, error=ValidationError)
        venv = self.venv_path(project, env, path)
        layout = VenvLayout(venv, self.windows)
        if not Path(layout.python).exists():
            raise ValidationError(
                f"no venv at {venv} (no {layout.python}); build it first: envbuilder build "
                f"--target {self.name} --env {env.name}")
        pylock = project.pylock(env.name, self.name)
        if not pylock.is_file():
            raise ValidationError(f"{pylock} is missing; run: envbuilder lock --env {env.name}")
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
                    f"{_tail(proc.stdout + proc.stderr)}")
            dest = project.report(env.name, self.name)
            atomic_write_bytes(dest, report.read_bytes())
        progress(f"{env.name}/{self.name}: probe done", 1, 1)
        return dest

    # --- steps -----------------------------------------------------------------------------

    def _check_host_and_env(self, env: EnvSpec,
                            error: type[BuildError | ValidationError] = BuildError) -> None:
        if sys.platform != self.host_platform:
            raise error(self.wrong_host_message())
        if self.name not in env.targets:
            raise UsageError(f"env {env.name!r} has no target {self.name!r} (environments.toml, "
                             f"env.{env.name}.targets lists: {', '.join(env.targets)})")

    def _verified_lock_sha(self, project: Project, env: EnvSpec) -> str:
        """The pylock's sha256, after checking it against the env lock's record."""
        from envbuilder.lockfile import load_env_lock  # the lock helper's module

        lock = load_env_lock(project, env.name)
        if lock is None or self.name not in lock.targets:
            raise LockError(f"env {env.name!r} is not locked for target {self.name!r}; run: "
                            f"envbuilder lock --env {env.name}")
        pylock = project.lockfiles / lock.targets[self.name].pylock
        if not pylock.is_file():
            raise LockError(f"{pylock} is missing; run: envbuilder lock --env {env.name}")
        actual, recorded = sha256_file(pylock), lock.targets[self.name].pylock_sha256
        if actual != recorded:
            raise LockError(
                f"{pylock} has sha256 {actual}, but {project.env_lock(env.name)} records "
                f"{recorded}: the pylock was edited after locking. Nothing was changed. Restore it "
                f"(git checkout) or lock again: envbuilder lock --env {env.name}")
        return actual

    def _is_current(self, layout: VenvLayout, env: EnvSpec, lock_sha: str,
                    variables: Mapping[str, str]) -> bool:
        marker = read_marker(Path(layout.marker))
        if marker is None or marker.get("lock_sha256") != lock_sha:
            return False
        if (marker.get("env"), marker.get("target"), marker.get("venv")) != (
                env.name, self.name, str(layout.root)):
            return False
        try:
            state = self._state(layout)
        except BuildError:
            return False
        packages = marker.get("packages")
        return (isinstance(packages, dict)
                and self._python_matches(state["python"], env)
                and not package_diff(state["packages"], packages)
                and activate.activation_is_current(Path(layout.scripts), variables, self.windows))

    def _python_matches(self, full: str, env: EnvSpec) -> bool:
        return full.rsplit(".", 1)[0] == self.python_request(env)

    def _ensure_venv(self, layout: VenvLayout, env: EnvSpec, progress: ProgressFn) -> str:
        """A venv with the right Python at layout.root (kept when it has one); its version."""
        venv = Path(layout.root)
        try:
            current = self._state(layout)["python"] if Path(layout.python).exists() else None
        except BuildError:
            current = None  # a broken venv (its base Python removed): made again
        if current is not None and self._python_matches(current, env):
            return str(current)
        found = self.find_python(self.python_request(env))  # before removing anything
        if venv.exists():
            self._refuse_foreign_folder(venv)
            shutil.rmtree(venv)
        progress(f"{env.name}/{self.name}: creating venv with Python {found.version}", 0, None)
        cmd = uv_venv_command(pyfinder.uv_bin(), str(found.executable), venv,
                              f"{env.name}-{self.name}")
        proc = _run(cmd, "creating the venv")
        if proc.returncode != 0:
            raise BuildError(f"creating the venv at {venv} failed:\n{_tail(proc.stderr)}")
        return found.version

    @staticmethod
    def _refuse_foreign_folder(venv: Path) -> None:
        """A folder that is neither empty nor a venv is never replaced (it may be someone's)."""
        if venv.is_file() or (venv.is_dir() and not (venv / "pyvenv.cfg").is_file()
                              and any(venv.iterdir())):
            raise BuildError(f"{venv} exists and is not a venv; choose another --path or empty it")

    def _sync(self, layout: VenvLayout, requirements: Path) -> None:
        proc = _run(uv_sync_command(pyfinder.uv_bin(), layout.python, requirements),
                    "installing the lock")
        if proc.returncode != 0:
            raise BuildError(f"installing the locked packages into {layout.root} failed:\n"
                             f"{_tail(proc.stderr)}")

    def _state(self, layout: VenvLayout) -> dict[str, Any]:
        """The venv Python's version and installed distributions."""
        proc = _run([str(layout.python), "-I", "-c", _STATE_SCRIPT], "reading the venv",
                    env=_clean_env(), timeout=120)
        if proc.returncode != 0:
            raise BuildError(f"the venv's Python at {layout.python} does not run:\n"
                             f"{_tail(proc.stderr)}")
        data: dict[str, Any] = json.loads(proc.stdout)
        data["packages"] = {str(canonicalize_name(k)): v for k, v in data["packages"].items()}
        return data

    def _run_probe(self, cmd: list[str], layout: VenvLayout, env: EnvSpec,
                   options: ValidateOptions, cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run the probe in an empty folder: a project checkout as the working directory would
        put its own packages (e.g. envbuilder.egg-info) on `python -m`'s path."""
        run_env = _clean_env()
        run_env.update(activate.activation_env(env, self.name))
        run_env["VIRTUAL_ENV"] = str(layout.root)
        run_env["PATH"] = os.pathsep.join([str(layout.scripts), run_env.get("PATH", "")])
        try:
            return interrupts.run(cmd, env=run_env, timeout=options.timeout_s, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            raise ValidationError(f"the probe did not finish within {options.timeout_s} s") from exc
        except OSError as exc:
            raise ValidationError(f"cannot run the venv's Python {cmd[0]}: {exc}") from exc

    def _packages_or_none(self, layout: VenvLayout) -> dict[str, str] | None:
        if not Path(layout.python).exists():
            return None
        try:
            packages: dict[str, str] = self._state(layout)["packages"]
        except BuildError:
            return None
        return packages

    def _artifact(self, env: EnvSpec, venv: Path, lock_sha: str,
                  changes: list[str] | None) -> Artifact:
        """changes None: nothing was done (the venv was current)."""
        details = {"lock_sha256": lock_sha, "changed": "no" if changes is None else "yes"}
        if changes is not None:
            details["changes"] = ", ".join(changes) or "none"
        return Artifact(target=self.name, env=env.name, reference=str(venv), digest=None,
                        details=details)


def _clean_env() -> dict[str, str]:
    """The caller's environment without what would make the venv's Python see other packages."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@register
class NativeVenvTarget(VenvTarget):
    """A venv on a Linux host (Python found by uv), e.g. for a machine with ROCm installed."""

    name = "native"
    windows = False
    host_platform = "linux"

    def wrong_host_message(self) -> str:
        return (f"the native target builds a Linux venv (its lock is for x86_64 manylinux) and "
                f"runs only on Linux, not on {sys.platform}; on Windows use --target windows")


@register
class WindowsVenvTarget(VenvTarget):
    """A venv on Windows (Python found by the py launcher) for AMD's native Windows wheels."""

    name = "windows"
    windows = True
    host_platform = "win32"

    def wrong_host_message(self) -> str:
        return (f"the windows target builds a venv with Windows' Python and the env's Windows "
                f"wheels, so it needs Windows (this is {sys.platform}); run the same command "
                f"there, or use the rendered windows/<env>/setup.ps1. On Linux use --target "
                f"native, docker or wsl2")

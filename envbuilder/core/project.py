"""Where things live: one `Project` value, derived from the spec's path, passed explicitly."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The spec's file name, which commands look for from the current folder upwards.
SPEC_NAME = "environments.toml"


def find_spec(start: Path) -> Path | None:
    """The nearest `environments.toml` at or above `start` (absolute), as git finds its
    repository and nox its noxfile; None when no folder up to the root has one."""
    folder = start.absolute()
    for candidate in (folder, *folder.parents):
        path = candidate / SPEC_NAME
        if path.is_file():
            return path
    return None


def default_cache_dir() -> Path:
    """The host-side cache (wheels by sha256, probe zipapps): $ENVBUILDER_CACHE, else XDG."""
    if env := os.environ.get("ENVBUILDER_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuilder"


def pylock_name(env: str, target: str) -> str:
    """The file name of an env's pylock for one target (in lockfiles/).

    PEP 751 allows no dot inside the name (`pylock.<name>.toml`); pip and uv refuse
    `pylock.cpu.native.toml` (pip parses it as requirements.txt), hence the dash."""
    return f"pylock.{env}-{target}.toml"


def venv_folder(env: str, target: str) -> str:
    """Where a venv target's venv goes when --path is not given, relative to the project root
    (.envbuilder/ is gitignored)."""
    return f".envbuilder/venvs/{env}-{target}"


@dataclass(frozen=True)
class Project:
    """The folders of one checkout. All outputs are relative to the spec file's folder (each
    target's rendered files: its descriptor's `output_dir`, envbuilder.targets)."""

    root: Path
    spec_path: Path
    cache: Path

    @classmethod
    def from_spec(cls, spec_path: str | Path, cache: Path | None = None) -> Project:
        spec = Path(spec_path).resolve()
        return cls(root=spec.parent, spec_path=spec, cache=cache or default_cache_dir())

    @property
    def lockfiles(self) -> Path:
        return self.root / "lockfiles"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def wheels(self) -> Path:
        """Wheel cache keyed by sha256: <cache>/wheels/<sha256[:2]>/<sha256>/<filename>."""
        return self.cache / "wheels"

    def env_lock(self, env: str) -> Path:
        return self.lockfiles / f"{env}.lock.toml"

    def pylock(self, env: str, target: str) -> Path:
        return self.lockfiles / pylock_name(env, target)

    def report(self, env: str, target: str) -> Path:
        return self.reports / f"{env}.{target}.json"

    def relative(self, path: Path) -> str:
        """`path` as messages show it: relative to the root, or as given when outside it."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

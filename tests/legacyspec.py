"""The shipped spec plus the legacy amdgpu-install envs (rocm64: ROCm 6.4.1, rocm61: the seed
guides' corrected 6.1.3 setup), which environments.toml no longer ships (issue 15): tests of the
legacy path (WSL legacy stack, libhsa fixes, AMD's 6.4.4 Windows wheels) use them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LEGACY_ENVS = REPO / "tests" / "data" / "spec" / "legacy_envs.toml"


def spec_with_legacy_text() -> str:
    """environments.toml with the legacy envs (and their indexes) appended."""
    shipped = (REPO / "environments.toml").read_text(encoding="utf-8")
    return shipped + "\n" + LEGACY_ENVS.read_text(encoding="utf-8")


def write_spec_with_legacy(path: Path) -> Path:
    """Write that spec to `path` (an environments.toml) and return it."""
    path.write_text(spec_with_legacy_text(), encoding="utf-8")
    return path

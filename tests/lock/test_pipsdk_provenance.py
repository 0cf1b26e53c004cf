"""The pip SDK's provenance check (envbuilder.core.pipsdk.provenance_problems) and uv's clean
environment (envbuilder.lock.uv.uv_environment), on pylock documents as envbuilder writes them.
The lock-level behaviour against the replica of AMD's index is in tests/lock/test_pipsdk_lock.py."""

from __future__ import annotations

from typing import Any

import pytest

from envbuilder.core.compat import RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.pipsdk import provenance_problems
from envbuilder.lock.uv import ignored_uv_warnings, uv_environment

AMD = "https://repo.amd.com/rocm/whl-multi-arch/"
PYPI_FILES = "https://files.example.org/packages/"


def release() -> RocmRelease:
    found = load_compat().rocm("7.14.1")
    assert found is not None
    return found


def entry(name: str, version: str, index: str | None = AMD) -> dict[str, Any]:
    base = index or PYPI_FILES
    pkg: dict[str, Any] = {"name": name, "version": version}
    if index is not None:
        pkg["index"] = index
    pkg["wheels"] = [{"url": f"{base}{name.replace('-', '_')}-{version}-py3-none-any.whl"}]
    return pkg


def test_a_lock_with_every_family_entry_from_amd_passes() -> None:
    doc = {
        "packages": [
            entry("torch", "2.12.0+rocm7.14.1"),
            entry("amd-torch-device-gfx11", "2.12.0+rocm7.14.1"),
            entry("rocm", "7.14.1"),
            entry("rocm-sdk-core", "7.14.1"),
            entry("rocm-bootstrap", "0.3.0"),
            entry("filelock", "3.21.0", index=None),  # not of the family: the default index
        ]
    }
    assert provenance_problems(doc, release(), [AMD]) == []


@pytest.mark.parametrize(
    ("pkg", "says"),
    [
        (entry("amd-torch-device-gfx11", "0.0.1.dev0", index=None), "the default index"),
        (entry("rocm-bootstrap", "99.0.0", index=None), "the default index"),
        (entry("triton", "3.8.0", index=None), "the default index"),
        (entry("rocm-sdk-core", "0.1.0"), "placeholder"),
        (entry("amd-torch-device-gfx110x", "0.0.1.dev0"), "placeholder"),
        (entry("rocm-sdk-devel", "7.14.0"), "placeholder"),  # not the release's version
        (entry("torch", "2.14.1", index="https://elsewhere.example/simple/"), "index https://"),
    ],
)
def test_a_family_entry_from_elsewhere_or_a_placeholder_is_named(
    pkg: dict[str, Any], says: str
) -> None:
    problems = provenance_problems({"packages": [pkg]}, release(), [AMD])
    assert len(problems) == 1
    assert problems[0].startswith(f"{pkg['name']} {pkg['version']}") and says in problems[0]
    assert pkg["wheels"][0]["url"] in problems[0]  # where it came from


def test_uv_runs_without_settings_that_change_resolution() -> None:
    hostile = {
        "UV_INDEX_URL": "https://evil.example/simple",
        "UV_EXTRA_INDEX_URL": "https://evil.example/simple",
        "UV_INDEX": "evil=https://evil.example/simple",
        "UV_DEFAULT_INDEX": "https://evil.example/simple",
        "UV_FIND_LINKS": "/tmp",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_PRERELEASE": "allow",
        "UV_CONSTRAINT": "/tmp/c.txt",
        "UV_TORCH_BACKEND": "auto",
    }
    kept = {"UV_CACHE_DIR": "/c", "UV_OFFLINE": "1", "UV_HTTP_TIMEOUT": "60", "PATH": "/bin"}
    env = uv_environment({**hostile, **kept})
    assert not set(hostile) & set(env)
    assert {k: env[k] for k in kept} == kept
    (warning,) = ignored_uv_warnings({**hostile, **kept})
    assert all(name in warning for name in hostile) and "ENVBUILDER_DEFAULT_INDEX" in warning
    assert ignored_uv_warnings(kept) == []
    # dropped without a word: settings of uv's Python discovery and tools, not of resolution
    quiet = {"UV_PYTHON_DOWNLOADS": "never", "UV_TOOL_DIR": "/t"}
    assert ignored_uv_warnings(quiet) == [] and not set(quiet) & set(uv_environment(quiet))

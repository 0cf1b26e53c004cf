"""Property tests: random and malformed specs never raise, never write, and what is accepted is
safe to put into a Dockerfile, shell or PowerShell line."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.pylock import is_valid_pylock_path

from envbuilder.commands._cli import main
from envbuilder.core.model import EnvSpec
from envbuilder.core.project import pylock_name
from envbuilder.spec.load import SpecCheck, check_spec, load_spec
from envbuilder.spec.schema import env_keys
from envbuilder.targets import registry

ENV_KEYS = env_keys()

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = tomlkit.parse((ROOT / "environments.toml").read_text(encoding="utf-8")).unwrap()

NASTY = ["\n", "\r", "\x00", "'", '"', "`", "$(", ";", "\\", " ", "${X}", "\t", "é", "\u2028"]
WORDS = [
    "rocm",
    "cpu",
    "cuda",
    "3.12",
    "3.10",
    "6.4.1",
    "6.3.3",
    "7.0",
    "RX 7900 XTX",
    "RX 6800",
    "gfx1100",
    "docker",
    "wsl2",
    "windows",
    "native",
    "torch==2.9.1+rocm6.4",
    "torch==2.13.0+cpu",
    "pytorch-cpu",
    "22.04",
    "24.04",
    "HSA_OVERRIDE_GFX_VERSION",
    "RCCL_ALGO",
    "NCCL_ALGO",
    "debian:bookworm-slim",
    "https://download.pytorch.org/whl/cpu",
    "/opt/wheels",
    "envbuilder",
    "root",
    "",
]

text_values = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.builds(
        lambda a, b, c: a + b + c,
        st.sampled_from(WORDS),
        st.sampled_from(NASTY),
        st.sampled_from(WORDS),
    ),
)
scalars = st.one_of(text_values, st.integers(-5, 10**20), st.floats(allow_nan=False), st.booleans())
keys = st.one_of(
    st.sampled_from(
        [
            *ENV_KEYS,
            "url",
            "mirror",
            "base",
            "ubuntu",
            "distro",
            "user",
            "systemd",
            "hip_path",
            "TORCH",
            "A;B",
        ]
    ),
    st.text(min_size=1, max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=20,
)
env_tables = st.dictionaries(st.sampled_from(list(ENV_KEYS)), values, max_size=10)
specs = st.fixed_dictionaries(
    {},
    optional={
        "indexes": st.dictionaries(
            st.sampled_from(["pytorch-cpu", "x", "Bad Name"]),
            st.dictionaries(st.sampled_from(["url", "mirror", "urll"]), values, max_size=3),
            max_size=3,
        ),
        "defaults": env_tables,
        "env": st.dictionaries(
            st.sampled_from(["cpu", "rocm714", "Bad Name", "a" * 70, "seed-6.1", "con"]),
            env_tables,
            max_size=3,
        ),
        "extra": values,
    },
)


@contextlib.contextmanager
def spec_file(content: str | bytes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "environments.toml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        yield path
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["environments.toml"], (
            "checking a spec must never write a file"
        )


def assert_handled(result: SpecCheck) -> None:
    assert isinstance(result, SpecCheck)
    for f in result.findings:
        assert f.severity in ("error", "warning")
        assert str(f).isprintable(), f"a finding is one printable line: {f!r}"
    if result.spec is not None:
        assert not result.errors
        for env in result.spec.envs.values():
            assert_safe(env)


def assert_safe(env: EnvSpec) -> None:
    """What an accepted spec may carry into generated files (and lock file names pip takes)."""
    assert all(is_valid_pylock_path(Path(pylock_name(env.name, t))) for t in registry.names())
    for name, value in {**env.env, **env.rccl}.items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
        assert "\n" not in value and "\x00" not in value and "\r" not in value
    for target in env.targets:
        for spec in env.packages_for(target):
            assert not any(ch in spec for ch in "\n\r\x00`$\\"), spec
    for apt in env.apt:
        assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", apt)
    for table in env.tables.values():
        for value in dataclasses.asdict(table).values():
            if isinstance(value, str):
                assert not any(ch in value for ch in "\n\r\x00`$;'\""), value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    with spec_file(text) as path:
        assert_handled(check_spec(path))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    with spec_file(data) as path:
        assert_handled(check_spec(path))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_random_structures_never_raise(doc: dict[str, Any]) -> None:
    with spec_file(tomlkit.dumps(doc)) as path:
        assert_handled(check_spec(path))


def _paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    return out


SHIPPED_PATHS = _paths(SHIPPED)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SHIPPED_PATHS), values)
def test_mutated_shipped_spec_never_raises(path: tuple[str, ...], value: Any) -> None:
    doc = tomlkit.parse((ROOT / "environments.toml").read_text(encoding="utf-8")).unwrap()
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with spec_file(tomlkit.dumps(doc)) as spec:
        result = check_spec(spec)
        assert_handled(result)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["-q", "check", "--spec", str(spec)])
        assert code == (0 if result.ok else 1)
        assert "Traceback" not in out.getvalue() + err.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["cpu", "rocm714", "mi300x"]),
    st.sampled_from(["python", "description"]),
    st.sampled_from(["3.13", "3.11", "x", "another description"]),
)
def test_env_hash_changes_only_with_the_env(env: str, key: str, value: str) -> None:
    doc = tomlkit.parse((ROOT / "environments.toml").read_text(encoding="utf-8"))
    base = load_spec(ROOT / "environments.toml")
    doc["env"][env][key] = value
    with spec_file(tomlkit.dumps(doc)) as path:
        result = check_spec(path)
        if result.spec is None:
            return
        changed = base.merged[env].get(key) != value
        assert (result.spec.env_hash(env) != base.env_hash(env)) == changed
        for other in ("cpu", "rocm714", "mi300x"):
            if other != env:
                assert result.spec.env_hash(other) == base.env_hash(other)


plausible_env = st.fixed_dictionaries(
    {
        "accelerator": st.sampled_from(["rocm", "cpu", "cuda"]),
        "python": st.sampled_from(["3.9", "3.10", "3.11", "3.12", "3.13", "3.14"]),
        "targets": st.lists(
            st.sampled_from(["docker", "wsl2", "windows", "native"]),
            min_size=1,
            max_size=4,
            unique=True,
        ),
    },
    optional={
        "rocm": st.sampled_from(
            [
                "6.1.3",
                "6.2.3",
                "6.3.3",
                "6.3.4",
                "6.4",
                "6.4.1",
                "7.0",
                "7.0.2",
                "7.2.0",
                "7.2.1",
                "9.9",
            ]
        ),
        "cuda": st.sampled_from(["12.8"]),
        "gpu": st.sampled_from(
            [
                "RX 7900 XTX",
                "RX 6800",
                "RX 6700 XT",
                "RX 7800 XT",
                "780M",
                "gfx1151",
                "gfx1036",
                "MI300X",
                "RX 9070 XT",
            ]
        ),
        "packages": st.lists(
            st.sampled_from(
                [
                    "torch==2.9.1+rocm6.4",
                    "torch==2.5.1",
                    "torch==2.13.0+cpu",
                    "torch>=2.4,<2.6",
                    "torch~=2.8.0",
                    "torch!=2.9.0",
                    "numpy<2; python_version < '3.13'",
                    "torch @ https://repo.radeon.com/rocm/windows/rocm-rel-6.4.4/"
                    "torch-2.8.0a0%2Bgitfc14c65-cp312-cp312-win_amd64.whl",
                    "x @ https://h.example/x-1.0-py3-none-any.whl",
                    "x @ https://h.example/notawheel.whl",
                ]
            ),
            max_size=3,
        ),
        "index_pins": st.dictionaries(
            st.sampled_from(["torch", "numpy"]),
            st.sampled_from(["r61", "r64", "cpu", "r72", "other"]),
            max_size=2,
        ),
        "env": st.dictionaries(
            st.sampled_from(["HSA_OVERRIDE_GFX_VERSION", "RCCL_ALGO", "NCCL_X", "A"]),
            st.sampled_from(["", "11.0.0", "10.3.0", "x"]),
            max_size=3,
        ),
        "rccl": st.dictionaries(
            st.sampled_from(["RCCL_NTHREADS", "NCCL_ALGO", "HSA_X", "NCCL_DEBG"]),
            st.sampled_from(["1", "ring"]),
            max_size=3,
        ),
        "docker": st.fixed_dictionaries(
            {},
            optional={
                "base": st.sampled_from(
                    [
                        "debian:bookworm-slim",
                        "rocm/dev-ubuntu-22.04:6.1.3",
                        "rocm/dev-ubuntu-24.04:6.4.1",
                        "ubuntu",
                        "x/y@sha256:" + "a" * 64,
                        "rocm/dev-ubuntu-24.04:6..1",
                        "rocm/dev-ubuntu-24.04:6.4.1-complete",
                        "rocm/dev-ubuntu-22.04:7",
                    ]
                )
            },
        ),
        "wsl2": st.fixed_dictionaries(
            {}, optional={"ubuntu": st.sampled_from(["22.04", "24.04", "20.04"])}
        ),
        "windows": st.fixed_dictionaries(
            {},
            optional={
                "python": st.sampled_from(["3.11", "3.12"]),
                "index_pins": st.just({}),
                "packages": st.just(
                    [
                        "torch @ https://repo.radeon.com/rocm/windows/rocm-rel-6.4.4/"
                        "torch-2.8.0a0%2Bgitfc14c65-cp312-cp312-win_amd64.whl"
                    ]
                ),
            },
        ),
    },
)
INDEXES = {
    "r61": {"url": "https://download.pytorch.org/whl/rocm6.1"},
    "r64": {"url": "https://download.pytorch.org/whl/rocm6.4"},
    "r72": {"url": "https://download.pytorch.org/whl/rocm7.2/"},
    "cpu": {"url": "https://download.pytorch.org/whl/cpu", "mirror": "/nonexistent"},
    "other": {"url": "https://example.org/simple"},
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), plausible_env, min_size=1, max_size=3))
def test_plausible_specs_reach_every_check_without_raising(envs: dict[str, Any]) -> None:
    with spec_file(tomlkit.dumps({"indexes": INDEXES, "env": envs})) as path:
        result = check_spec(path)
        assert_handled(result)
        if result.spec is not None:
            for name in result.spec.envs:
                assert len(result.spec.env_hash(name)) == 64

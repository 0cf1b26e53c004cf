"""load_spec / Spec / EnvSpec on the shipped spec and small hand-written ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomlkit
from legacyspec import write_spec_with_legacy

from envbuilder.core.errors import SpecError, UsageError
from envbuilder.core.model import Finding, Index
from envbuilder.spec.load import check_spec, load_spec
from envbuilder.targets.docker import DockerTable
from envbuilder.targets.native import NativeTable
from envbuilder.targets.windows import WindowsTable
from envbuilder.targets.wsl2 import Wsl2Table

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "environments.toml"
DATA = Path(__file__).parents[1] / "data" / "spec"


def test_shipped_envs() -> None:
    spec = load_spec(SHIPPED)
    assert list(spec.envs) == ["cpu", "rocm714", "mi300x"]
    assert not spec.findings  # no warning a user would have to ignore


def test_legacy_envs_still_load_clean(tmp_path: Path) -> None:
    """The former shipped envs (the amdgpu-install path's fixture): AMD's 6.4.4 Windows wheel
    URLs are verified (rocm-2026.md)."""
    spec = load_spec(write_spec_with_legacy(tmp_path / "environments.toml"))
    assert list(spec.envs) == ["cpu", "rocm714", "mi300x", "rocm64", "rocm61"]
    assert not spec.findings


def test_flagship_contract() -> None:
    """rocm714: the pip SDK (7.14.1) from AMD's index on docker (plain Ubuntu), wsl2, windows."""
    env = load_spec(SHIPPED).env("rocm714")
    assert (env.rocm, env.python, env.gfx, env.gfx_targets) == (
        "7.14.1",
        "3.12",
        "gfx1100",
        ("gfx1100",),
    )
    assert env.targets == ("docker", "wsl2", "windows")
    assert env.packages == ("torch==2.12.0+rocm7.14.1",)
    assert env.index_pins_for("windows") == env.index_pins_for("docker") == {"torch": "amd-rocm"}
    docker, wsl2 = env.table(DockerTable), env.table(Wsl2Table)
    assert docker is not None and docker.base == "ubuntu:24.04"
    assert wsl2 is not None and (wsl2.ubuntu, wsl2.base) == ("24.04", "ubuntu:24.04")
    assert env.indexes["amd-rocm"].url == "https://repo.amd.com/rocm/whl-multi-arch/"


def test_datacenter_contract() -> None:
    env = load_spec(SHIPPED).env("mi300x")
    assert (env.rocm, env.gfx, env.targets) == ("10.1.0", "gfx942", ("docker", "native"))
    assert env.indexes["amd-rocm-next"].url == "https://stable.repo.amd.com/rocm/whl-next/"


def test_gpu_may_name_several(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8").replace(
        'gpu = "RX 7900 XTX"', 'gpu = ["RX 7900 XTX", "gfx1201", "RX 7900 XTX"]'
    )
    env = load_spec(_write(tmp_path, text)).env("rocm714")
    assert (env.gpu, env.gfx, env.gfx_targets) == ("RX 7900 XTX", "gfx1100", ("gfx1100", "gfx1201"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "environments.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_cpu_env_contract() -> None:
    cpu = load_spec(SHIPPED).env("cpu")
    assert (cpu.accelerator, cpu.python, cpu.targets) == (
        "cpu",
        "3.11",
        ("docker", "wsl2", "native"),
    )
    assert cpu.packages == ("torch==2.13.0+cpu",)
    assert cpu.index_pins == {"torch": "pytorch-cpu"}
    docker, wsl2, native = cpu.table(DockerTable), cpu.table(Wsl2Table), cpu.table(NativeTable)
    assert docker is not None and docker.base == "debian:bookworm-slim"
    assert docker.python == "python3" and docker.user == "envbuilder"
    assert wsl2 is not None and wsl2.distro == "envbuilder-cpu"
    assert wsl2.base == "debian:bookworm-slim" and wsl2.ubuntu is None
    assert native is not None and native.python == "3.11"
    assert cpu.rocm is None and cpu.gpu is None and cpu.gfx is None
    # [defaults] env vars are merged in
    assert cpu.env["PYTHONUNBUFFERED"] == "1"


def test_indexes_and_mirror() -> None:
    spec = load_spec(SHIPPED)
    # No mirror: where a machine reads an index from is its own setting (docs/lock.md).
    assert spec.indexes["pytorch-cpu"] == Index(
        "pytorch-cpu", "https://download.pytorch.org/whl/cpu", None
    )
    assert spec.indexes["amd-rocm"].mirror is None
    assert list(spec.indexes_for("cpu")) == ["pytorch-cpu"]
    assert list(spec.indexes_for("rocm714")) == ["amd-rocm"]


def test_rocm64_contract(tmp_path: Path) -> None:
    env = load_spec(write_spec_with_legacy(tmp_path / "environments.toml")).env("rocm64")
    assert (env.rocm, env.python, env.gfx) == ("6.4.1", "3.12", "gfx1100")
    assert env.targets == ("docker", "wsl2", "windows")
    wsl2, docker = env.table(Wsl2Table), env.table(DockerTable)
    windows = env.table(WindowsTable)
    assert wsl2 is not None and (wsl2.ubuntu, wsl2.base) == ("24.04", "ubuntu:24.04")
    assert docker is not None and docker.base == "rocm/dev-ubuntu-24.04:6.4.1"
    assert windows is not None and windows.python == "3.12"
    # the windows target has its own packages and no index pins; the others keep the env's
    assert env.packages_for("windows")[0].startswith("torch @ https://repo.radeon.com/")
    assert env.index_pins_for("windows") == {}
    assert env.packages_for("docker") == ("torch==2.9.1+rocm6.4",)
    assert env.index_pins_for("docker") == {"torch": "pytorch-rocm64"}
    assert env.python_for("windows") == "3.12"


def test_rocm61_is_the_corrected_seed_setup(tmp_path: Path) -> None:
    env = load_spec(write_spec_with_legacy(tmp_path / "environments.toml")).env("rocm61")
    assert (env.rocm, env.python, env.gfx) == ("6.1.3", "3.10", "gfx1100")
    assert "HSA_OVERRIDE_GFX_VERSION" not in env.env
    assert "RCCL_ALGO" not in env.rccl and env.rccl["NCCL_ALGO"] == "Ring"
    wsl2 = env.table(Wsl2Table)
    assert wsl2 is not None and wsl2.ubuntu == "22.04"
    assert "windows" not in env.targets


def test_select_and_env() -> None:
    spec = load_spec(SHIPPED)
    assert [e.name for e in spec.select(None)] == ["cpu", "rocm714", "mi300x"]
    assert [e.name for e in spec.select([])] == ["cpu", "rocm714", "mi300x"]
    assert [e.name for e in spec.select(["mi300x", "cpu", "mi300x"])] == ["mi300x", "cpu"]
    with pytest.raises(UsageError, match=r"no environment 'rocm741' \(did you mean 'rocm714'\?\)"):
        spec.select(["rocm741"])
    with pytest.raises(UsageError, match="known: cpu, rocm714, mi300x"):
        spec.env("nope")


def test_env_hash_is_stable_and_canonical(tmp_path: Path) -> None:
    spec = load_spec(SHIPPED)
    h = spec.env_hash("cpu")
    assert len(h) == 64 and h == load_spec(SHIPPED).env_hash("cpu")
    assert len({spec.env_hash(n) for n in spec.envs}) == 3
    # comments, key order and whitespace do not change it
    doc = tomlkit.parse(SHIPPED.read_text(encoding="utf-8"))
    cpu = doc["env"]["cpu"]
    items = list(cpu.items())
    for k, _ in items:
        del cpu[k]
    for k, v in reversed(items):
        cpu[k] = v
    other = tmp_path / "environments.toml"
    other.write_text("# a comment\n" + tomlkit.dumps(doc), encoding="utf-8")
    assert load_spec(other).env_hash("cpu") == h


def test_env_hash_follows_index_url_not_mirror(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    base = load_spec(SHIPPED)
    p = tmp_path / "environments.toml"
    url = 'url = "https://download.pytorch.org/whl/cpu"\n'
    assert url in text
    p.write_text(text.replace(url, url + 'mirror = "/srv/wheels"\n'), encoding="utf-8")
    assert load_spec(p).env_hash("cpu") == base.env_hash("cpu")
    p.write_text(
        text.replace(
            "https://download.pytorch.org/whl/cpu", "https://download.pytorch.org/whl/cpu/"
        ),
        encoding="utf-8",
    )
    assert load_spec(p).env_hash("cpu") != base.env_hash("cpu")
    assert load_spec(p).env_hash("rocm714") == base.env_hash("rocm714")


def test_defaults_merge_tables_by_key(tmp_path: Path) -> None:
    p = tmp_path / "environments.toml"
    p.write_text(
        """
[defaults]
accelerator = "cpu"
python = "3.11"
targets = ["docker"]
env = { A = "1", B = "2" }
[defaults.docker]
base = "debian:bookworm-slim"
user = "alice"

[env.one]
env = { B = "3" }
[env.one.docker]
user = "bob"

[env.two]
targets = ["docker", "native"]
""",
        encoding="utf-8",
    )
    spec = load_spec(p)
    one, two = spec.env("one"), spec.env("two")
    assert one.env == {"A": "1", "B": "3"}
    docker_one, docker_two = one.table(DockerTable), two.table(DockerTable)
    assert docker_one is not None and (docker_one.base, docker_one.user) == (
        "debian:bookworm-slim",
        "bob",
    )
    assert docker_two is not None and docker_two.user == "alice"
    native = two.table(NativeTable)
    assert two.targets == ("docker", "native") and native is not None
    assert native.python == "3.11"


def test_load_spec_raises_with_every_error(tmp_path: Path) -> None:
    p = tmp_path / "environments.toml"
    p.write_text(
        '[env.x]\naccelerator = "gpu"\npython = "3"\ntargets = ["docker"]\n', encoding="utf-8"
    )
    with pytest.raises(SpecError) as info:
        load_spec(p)
    msg = str(info.value)
    assert "env.x.accelerator: error: unknown accelerator 'gpu'" in msg
    assert "env.x.python: error: '3' is not a Python major.minor version" in msg
    assert "env.x.docker.base: error: missing" in msg


def test_check_spec_keeps_the_tomlkit_document() -> None:
    result = check_spec(SHIPPED)
    assert result.spec is not None and result.spec.document is not None
    assert "# envbuilder spec" in tomlkit.dumps(result.spec.document)


def test_finding_str() -> None:
    f = Finding("error", "environments.toml", "env.x.python", "bad; write 3.12")
    assert str(f) == "environments.toml: env.x.python: error: bad; write 3.12"


def test_rocm_docker_base_defaults_from_compat(tmp_path: Path) -> None:
    p = tmp_path / "environments.toml"
    p.write_text(
        """
[indexes.r64]
url = "https://download.pytorch.org/whl/rocm6.4"
[env.g]
accelerator = "rocm"
rocm = "6.4.1"
gpu = "gfx1100"
python = "3.12"
packages = ["torch==2.9.1"]
index_pins = { torch = "r64" }
targets = ["docker"]
""",
        encoding="utf-8",
    )
    env = load_spec(p).env("g")
    docker = env.table(DockerTable)
    assert docker is not None and docker.base == "rocm/dev-ubuntu-24.04:6.4.1"
    assert env.gfx == "gfx1100"

"""Every check's message: a spec with one mistake -> its line, exit code, and nothing written.

Each case mutates tests/data/spec/base.toml (valid) and runs the real CLI
(`envbuilder.commands._cli.main(["check", "--spec", PATH])`), asserting the exact finding line
prefix (file: key: severity:) and the message's words.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from envbuilder.commands._cli import main
from envbuilder.core.compat import INSTALL_MODEL_LABELS
from envbuilder.core.pipsdk import lock_inputs
from envbuilder.spec.load import load_spec

DATA = Path(__file__).parents[1] / "data" / "spec"
BASE: dict[str, Any] = tomllib.loads((DATA / "base.toml").read_text(encoding="utf-8"))

Mutation = Callable[[dict[str, Any]], None]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and mtime: to prove a command wrote nothing."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def run_check(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, list[str]]:
    spec = tmp_path / "environments.toml"
    spec.write_text(text, encoding="utf-8")
    before = _tree(tmp_path)
    code = main(["check", "--spec", str(spec), *extra])
    assert _tree(tmp_path) == before, "check must never write a file"
    out = capsys.readouterr().out
    return code, [line for line in out.splitlines() if line]


def mutated(mutate: Mutation) -> str:
    data = copy.deepcopy(BASE)
    mutate(data)
    return tomlkit.dumps(data)


def gpu(**values: Any) -> Mutation:
    def m(d: dict[str, Any]) -> None:
        d["env"]["gpu"].update(values)

    return m


def gpu_table(table: str, **values: Any) -> Mutation:
    def m(d: dict[str, Any]) -> None:
        d["env"]["gpu"].setdefault(table, {}).update(values)

    return m


def index(name: str, url: str) -> Mutation:
    def m(d: dict[str, Any]) -> None:
        d["indexes"][name] = {"url": url}

    return m


#: The pip SDK's index per release line (envbuilder/data/rocm.toml pip_index) and a torch on it.
AMD_SDK = {
    "7.14.0": ("https://repo.amd.com/rocm/whl-multi-arch/", "torch==2.12.0+rocm7.14.0"),
    "7.14.1": ("https://repo.amd.com/rocm/whl-multi-arch/", "torch==2.12.0+rocm7.14.1"),
    "10.1.0": ("https://stable.repo.amd.com/rocm/whl-next/", "torch==2.14.0+rocm10.1.0"),
}


def amd_sdk(rocm: str, **values: Any) -> Mutation:
    """The env on pip-SDK release `rocm`, torch from its index (pinned to index "amd")."""
    url, torch = AMD_SDK[rocm]

    def m(d: dict[str, Any]) -> None:
        d["indexes"]["amd"] = {"url": url}
        d["env"]["gpu"].update(
            {"rocm": rocm, "packages": [torch], "index_pins": {"torch": "amd"}, **values}
        )

    return m


def chain(*ms: Mutation) -> Mutation:
    def m(d: dict[str, Any]) -> None:
        for one in ms:
            one(d)

    return m


# (id, mutation, key, severity, words in the message)
CASES: list[tuple[str, Mutation, str, str, list[str]]] = [
    (
        "unknown-key",
        gpu(pyhton="3.12"),
        "env.gpu.pyhton",
        "error",
        ["unknown key (did you mean 'python'?)"],
    ),
    (
        "unknown-top-key",
        lambda d: d.update(indexs={}),
        "indexs",
        "error",
        ["unknown top-level key (did you mean 'indexes'?)"],
    ),
    (
        "unknown-target-key",
        gpu_table("docker", bsae="x:1"),
        "env.gpu.docker.bsae",
        "error",
        ["did you mean 'base'?"],
    ),
    (
        "wrong-type",
        gpu(python=3.12),
        "env.gpu.python",
        "error",
        ['must be a string, not a float; quote it: "3.12"'],
    ),
    (
        "wrong-type-list",
        gpu(packages="torch"),
        "env.gpu.packages",
        "error",
        ['must be a list of strings, not a string; write ["torch"]'],
    ),
    (
        "wrong-type-list-items",
        gpu(packages=["torch", 2]),
        "env.gpu.packages",
        "error",
        ["must be a list of strings, not an array holding an integer"],
    ),
    (
        "gpu-empty-list",
        gpu(gpu=[]),
        "env.gpu.gpu",
        "error",
        ["must be a string or a list of strings, not an empty array"],
    ),
    (
        "wrong-type-bool",
        gpu_table("wsl2", systemd="yes"),
        "env.gpu.wsl2.systemd",
        "error",
        ["must be true or false, not a string"],
    ),
    (
        "python-version",
        gpu(python="3.12.1"),
        "env.gpu.python",
        "error",
        ["'3.12.1' is not a Python major.minor version; write e.g. \"3.12\""],
    ),
    (
        "rocm-version",
        gpu(rocm="six"),
        "env.gpu.rocm",
        "error",
        ["'six' is not a ROCm release number"],
    ),
    (
        "rocm-unknown",
        gpu(rocm="5.0.0"),
        "env.gpu.rocm",
        "error",
        ["ROCm 5.0.0 is not in envbuilder's release table; use one of: 6.1.3"],
    ),
    (
        "accelerator",
        gpu(accelerator="rocn"),
        "env.gpu.accelerator",
        "error",
        ["unknown accelerator 'rocn' (did you mean 'rocm'?)"],
    ),
    (
        "pep508",
        gpu(packages=["torch=="]),
        "env.gpu.packages",
        "error",
        ["'torch==': not a valid PEP 508 requirement"],
    ),
    (
        "pep508-version",
        gpu(packages=["torch==2.9.1+rocm6.4", "numpy>=1.x"]),
        "env.gpu.packages",
        "error",
        ["'numpy>=1.x': not a valid PEP 508 requirement"],
    ),
    (
        "torch-no-wheel",
        gpu(packages=["torch==2.7.1"]),
        "env.gpu.packages",
        "error",
        [
            "torch==2.7.1: no torch wheel matching '==2.7.1' on the rocm6.4 index",
            "torch 2.7.1 is on: rocm6.2.4, rocm6.3",
        ],
    ),
    (
        "torch-wrong-local",
        gpu(packages=["torch==2.9.1+rocm6.3"]),
        "env.gpu.packages",
        "error",
        ["no torch wheel matching '==2.9.1+rocm6.3' on the rocm6.4 index"],
    ),
    (
        "torch-python-range",
        chain(gpu(python="3.9"), gpu_table("docker", base="x/y:1")),
        "env.gpu.python",
        "error",
        [
            "Python 3.9: torch==2.9.1+rocm6.4 on the rocm6.4 index has wheels for Python "
            "3.10-3.14 only"
        ],
    ),
    (
        "torch-no-pin",
        gpu(index_pins={}),
        "env.gpu.index_pins",
        "error",
        ["torch has no index pin", "a CUDA build on Linux"],
    ),
    (
        "gpu-wsl",
        gpu(gpu="RX 6800"),
        "env.gpu.targets",
        "error",
        ["RX 6800 (gfx1030) is not supported by AMD's WSL stack"],
    ),
    (
        "gpu-windows",
        chain(gpu(gpu="RX 6800", targets=["windows"])),
        "env.gpu.targets",
        "error",
        ["RX 6800 (gfx1030) is not covered by AMD's native-Windows PyTorch wheels"],
    ),
    (
        "gpu-unknown",
        gpu(gpu="RX 7900 XTXX"),
        "env.gpu.gpu",
        "error",
        ["unknown GPU 'RX 7900 XTXX' (did you mean 'Radeon RX 7900 XTX'?)"],
    ),
    (
        "wsl-runtime-633",
        gpu(rocm="6.3.3"),
        "env.gpu.rocm",
        "error",
        ["ROCm 6.3.3 ships no WSL runtime", "nearest releases that have one: 6.3.4, 6.4.1"],
    ),
    (
        "wsl-runtime-70",
        gpu(rocm="7.0"),
        "env.gpu.rocm",
        "error",
        ["ROCm 7.0.0 ships no WSL runtime", "nearest releases that have one: 7.2.0"],
    ),
    (
        "wsl-runtime-702",
        gpu(rocm="7.0.2"),
        "env.gpu.rocm",
        "error",
        ["ROCm 7.0.2 ships no WSL runtime", "7.2.0"],
    ),
    (
        "wsl-ubuntu",
        gpu(rocm="6.1.3"),
        "env.gpu.wsl2.ubuntu",
        "error",
        ["Ubuntu 24.04 is not supported by ROCm 6.1.3 in WSL; use 22.04"],
    ),
    (
        "wsl-ubuntu-missing",
        gpu_table("wsl2", ubuntu=None) if False else (lambda d: d["env"]["gpu"].pop("wsl2")),
        "env.gpu.wsl2.ubuntu",
        "error",
        ["missing; the WSL ROCm stack is installed for an Ubuntu release"],
    ),
    (
        "hsa-empty",
        gpu(env={"HSA_OVERRIDE_GFX_VERSION": ""}),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        ["is empty; an empty HSA_OVERRIDE_GFX_VERSION breaks GPU detection"],
    ),
    (
        "hsa-not-needed",
        gpu(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        [
            "set to 11.0.0 for RX 7900 XTX (gfx1100), which needs no override",
            "remove HSA_OVERRIDE_GFX_VERSION",
        ],
    ),
    (
        "hsa-wheel-has-gfx",
        gpu(gpu="RX 7800 XT", env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        ["the torch wheel is compiled for gfx1101"],
    ),
    (
        "hsa-format",
        gpu(env={"HSA_OVERRIDE_GFX_VERSION": "gfx1100"}),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        ["is not a gfx version like 10.3.0"],
    ),
    (
        "rccl-algo",
        gpu(rccl={"RCCL_ALGO": "ring"}),
        "env.gpu.rccl.RCCL_ALGO",
        "error",
        ["RCCL_ALGO is not read by RCCL", 'use NCCL_ALGO = "ring"'],
    ),
    (
        "rccl-nthreads-env",
        gpu(env={"RCCL_NTHREADS": "8"}),
        "env.gpu.env.RCCL_NTHREADS",
        "error",
        ["RCCL_NTHREADS is not read by RCCL", 'use NCCL_NTHREADS = "8"'],
    ),
    (
        "rccl-not-nccl",
        gpu(rccl={"HSA_FORCE_FINE_GRAIN_PCIE": "1"}),
        "env.gpu.rccl.HSA_FORCE_FINE_GRAIN_PCIE",
        "error",
        ["is not an NCCL_*/RCCL_* setting; move it to [env.gpu.env]"],
    ),
    (
        "env-name",
        lambda d: d["env"].update({"My Env": d["env"].pop("cpu")}),
        "env.My Env",
        "error",
        ["environment name cannot be a Docker image name/tag or WSL distro name"],
    ),
    (
        "env-name-upper",
        lambda d: d["env"].update({"CPU": d["env"].pop("cpu")}),
        "env.CPU",
        "error",
        ["use lower-case letters"],
    ),
    # --- issue 13: what render and lock would refuse later, check refuses first --------------
    (
        "env-name-dot",
        lambda d: d["env"].update({"seed-6.1": d["env"].pop("cpu")}),
        "env.seed-6.1",
        "error",
        [
            "env name has a dot",
            "pylock.seed-6.1-docker.toml",
            "pip and uv refuse",
            "use 'seed-6-1'",
        ],
    ),
    (
        "env-name-windows-device",
        lambda d: d["env"].update({"con": d["env"].pop("cpu")}),
        "env.con",
        "error",
        ["is a device name Windows reserves", "use e.g. 'con-env'"],
    ),
    (
        "distro-default-too-long",
        lambda d: d["env"].update(
            {
                "a" * 60: {
                    **d["env"].pop("cpu"),
                    "targets": ["wsl2"],
                    "wsl2": {"base": "debian:bookworm-slim"},
                }
            }
        ),
        "env." + "a" * 60 + ".wsl2.distro",
        "error",
        ["the default distro name 'envbuilder-" + "a" * 60 + "'", "longer than 64 characters"],
    ),
    (
        "env-value-quote-windows",
        gpu(targets=["windows"], packages=["numpy"], index_pins={}, env={"GREETING": 'say "hi"'}),
        "env.gpu.env.GREETING",
        "error",
        [
            "value contains a double quote, which a cmd.exe `set` cannot carry",
            "the windows target writes it into the venv's activate.bat",
            "drop the windows target",
        ],
    ),
    (
        "package-file-url",
        gpu(packages=["torch==2.9.1+rocm6.4", "x @ file:///tmp/x-1.0-py3-none-any.whl"]),
        "env.gpu.packages",
        "error",
        ["a direct reference to a local file cannot be locked"],
    ),
    (
        "package-vcs-url",
        gpu(packages=["torch==2.9.1+rocm6.4", "y @ git+https://h.example/y"]),
        "env.gpu.packages",
        "error",
        ["a direct reference must be an http(s) URL"],
    ),
    (
        "wsl-ubuntu-unpackaged",
        gpu_table("wsl2", ubuntu="20.04"),
        "env.gpu.wsl2.ubuntu",
        "error",
        ["Ubuntu 20.04 is not a release AMD's WSL ROCm stack is packaged for; use 22.04 or 24.04"],
    ),
    (
        "wsl-runtime-and-ubuntu",
        chain(gpu(rocm="6.3.3"), gpu_table("wsl2", ubuntu="20.04")),
        "env.gpu.wsl2.ubuntu",
        "error",
        ["Ubuntu 20.04 is not a release"],
    ),
    (
        "distro-name",
        gpu_table("wsl2", distro="my distro"),
        "env.gpu.wsl2.distro",
        "error",
        ["'my distro' cannot be a WSL distro name"],
    ),
    (
        "unknown-index",
        gpu(index_pins={"torch": "pytorch-rocm46"}),
        "env.gpu.index_pins.torch",
        "error",
        ["pins torch to unknown index 'pytorch-rocm46' (did you mean 'pytorch-rocm64'?)"],
    ),
    (
        "image-ref",
        gpu_table("docker", base="Debian:Bookworm Slim"),
        "env.gpu.docker.base",
        "error",
        ["is not a Docker image reference"],
    ),
    (
        "image-python",
        gpu_table("docker", base="debian:bookworm-slim"),
        "env.gpu.docker.base",
        "error",
        ["debian:bookworm-slim's python3 is 3.11, but the env's Python is 3.12"],
    ),
    (
        "target-unknown",
        gpu(targets=["docker", "wsl"]),
        "env.gpu.targets",
        "error",
        ["unknown target 'wsl' (did you mean 'wsl2'?)"],
    ),
    ("target-empty", gpu(targets=[]), "env.gpu.targets", "error", ["is empty"]),
    (
        "windows-python",
        gpu(targets=["windows"], python="3.11", packages=["numpy"], index_pins={}),
        "env.gpu.python",
        "error",
        ["AMD's native-Windows PyTorch wheels for ROCm 6.4.4 need Python 3.12"],
    ),
    (
        "windows-wheel-python",
        chain(
            gpu(targets=["windows"]),
            gpu_table(
                "windows",
                python="3.11",
                index_pins={},
                packages=[
                    "torch @ https://repo.radeon.com/rocm/windows/rocm-rel-6.4.4/"
                    "torch-2.8.0a0%2Bgitfc14c65-cp312-cp312-win_amd64.whl"
                ],
            ),
        ),
        "env.gpu.windows.packages",
        "error",
        ["is for cp312, but the windows target uses Python 3.11"],
    ),
    (
        "windows-linux-pin",
        gpu(targets=["windows"]),
        "env.gpu.windows.index_pins",
        "error",
        ["torch for windows is pinned to a Linux wheel index"],
    ),
    (
        "rocm-cpu-index",
        gpu(packages=["torch==2.13.0+cpu"], index_pins={"torch": "pytorch-cpu"}),
        "env.gpu.index_pins",
        "error",
        ["torch comes from the cpu index, which has no ROCm build"],
    ),
    (
        "distro-twice",
        chain(
            gpu_table("wsl2", distro="Shared"),
            lambda d: d["env"]["cpu"].update(
                targets=["wsl2"], wsl2={"distro": "shared", "base": "debian:bookworm-slim"}
            ),
        ),
        "env.cpu.wsl2.distro",
        "error",
        ["'shared' is also env 'gpu''s WSL distro name"],
    ),
    (
        "missing-accelerator",
        lambda d: d["env"]["cpu"].pop("accelerator"),
        "env.cpu.accelerator",
        "error",
        ['missing; set accelerator = "rocm", "cuda" or "cpu"'],
    ),
    (
        "missing-docker-base",
        lambda d: d["env"]["cpu"].pop("docker"),
        "env.cpu.docker.base",
        "error",
        ['missing; set base = "debian:bookworm-slim"'],
    ),
    (
        "cpu-with-rocm",
        lambda d: d["env"]["cpu"].update(rocm="6.4.1"),
        "env.cpu.rocm",
        "error",
        ['set for accelerator "cpu"'],
    ),
    (
        "index-url",
        lambda d: d["indexes"]["pytorch-cpu"].update(url="ftp://x"),
        "indexes.pytorch-cpu.url",
        "error",
        ["is not an http(s) URL"],
    ),
    (
        "index-missing-url",
        lambda d: d["indexes"]["pytorch-cpu"].pop("url"),
        "indexes.pytorch-cpu.url",
        "error",
        ["missing; every index needs url"],
    ),
    (
        "duplicate-package",
        gpu(packages=["torch==2.9.1+rocm6.4", "torch>=2"]),
        "env.gpu.packages",
        "error",
        ["torch is already required by 'torch==2.9.1+rocm6.4'"],
    ),
    (
        "defaults-origin",
        lambda d: d["defaults"].update(python="3.12.0"),
        "env.gpu.python",
        "error",
        ["is not a Python major.minor version", "(set in [defaults])"],
    ),
    # --- compatibility data of rocm-2026.md (install models, WSL, HSA per index, RCCL) ------
    (
        "wsl-pip-sdk-no-librocdxg",
        amd_sdk("10.1.0", targets=["docker", "wsl2"]),
        "env.gpu.rocm",
        "error",
        ["ROCm 10.1.0: envbuilder's data pairs no prebuilt librocdxg", "use ROCm 7.14.x"],
    ),
    (
        "pip-sdk-wrong-index",
        gpu(rocm="7.14.1", targets=["docker"]),
        "env.gpu.index_pins",
        "error",
        [
            "but envbuilder locks ROCm 7.14.1's pip SDK from its index "
            "https://repo.amd.com/rocm/whl-multi-arch/"
        ],
    ),
    # AMD's 7.14 torch ships gfx1030 natively (and an override breaks TheRock >= 7.13 runtimes)
    (
        "hsa-pip-sdk",
        chain(
            amd_sdk("7.14.1", targets=["docker"]),
            gpu(gpu="RX 6800 XT", env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}),
        ),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        ["for RX 6800 XT (gfx1030), which needs no override", "remove HSA_OVERRIDE_GFX_VERSION"],
    ),
    # AMD's 7.14 index has device extras for the 15 targets of its install pages, not gfx1031
    (
        "pip-sdk-gpu-not-on-the-index",
        chain(amd_sdk("7.14.1", targets=["docker"]), gpu(gpu="RX 6700 XT")),
        "env.gpu.gpu",
        "error",
        [
            "gfx1031: no device-<gfx> extra on ROCm 7.14.1's index "
            "(https://repo.amd.com/rocm/whl-multi-arch/); it has gfx1030, gfx1100,",
            "; the index of ROCm 10.0.0, 10.1.0 has it",
        ],
    ),
    (
        "pip-sdk-no-gpu",
        chain(amd_sdk("7.14.1", targets=["docker"]), lambda d: d["env"]["gpu"].pop("gpu")),
        "env.gpu.gpu",
        "error",
        ["the pip SDK, whose lock holds the device code of the env's GPUs only"],
    ),
    (
        "gpu-wsl-since",
        chain(
            index("r72", "https://download.pytorch.org/whl/rocm7.2"),
            gpu(
                rocm="7.2.4",
                gpu="Radeon 860M",
                packages=["torch==2.13.0+rocm7.2"],
                index_pins={"torch": "r72"},
            ),
        ),
        "env.gpu.targets",
        "error",
        ["Radeon 860M (gfx1152) is supported by AMD's WSL stack from ROCm 7.13, not in ROCm 7.2.4"],
    ),
    (
        "hsa-wheel-has-gfx-rocm63",
        chain(
            index("r63", "https://download.pytorch.org/whl/rocm6.3"),
            gpu(
                gpu="RX 7800 XT",
                rocm="6.3.4",
                packages=["torch==2.7.1+rocm6.3"],
                index_pins={"torch": "r63"},
                env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
            ),
        ),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        "error",
        ["set to 11.0.0 for RX 7800 XT (gfx1101), but the torch wheel is compiled for gfx1101"],
    ),
    (
        "rccl-proto",
        gpu(rccl={"RCCL_PROTO": "Simple"}),
        "env.gpu.rccl.RCCL_PROTO",
        "error",
        ["RCCL_PROTO is not read by RCCL", 'use NCCL_PROTO = "Simple"'],
    ),
    (
        "rccl-pytorch-name",
        gpu(rccl={"NCCL_ASYNC_ERROR_HANDLING": "1"}),
        "env.gpu.rccl.NCCL_ASYNC_ERROR_HANDLING",
        "error",
        [
            "NCCL_ASYNC_ERROR_HANDLING is PyTorch's setting, not RCCL's",
            'set TORCH_NCCL_ASYNC_ERROR_HANDLING = "1" in [env.gpu.env]',
        ],
    ),
    (
        "windows-rdna2-before-7.14",
        gpu(gpu="RX 6800", rocm="7.2.1", targets=["windows"], packages=["numpy"], index_pins={}),
        "env.gpu.targets",
        "error",
        ["RX 6800 (gfx1030) is not covered by AMD's native-Windows PyTorch wheels"],
    ),
    (
        "windows-gfx1031-on-7.14",
        gpu(
            gpu="RX 6700 XT", rocm="7.14.1", targets=["windows"], packages=["numpy"], index_pins={}
        ),
        "env.gpu.targets",
        "error",
        [
            "RX 6700 XT (gfx1031) is not covered by AMD's native-Windows PyTorch wheels for "
            "ROCm 7.14.1 (gfx1030, gfx1100,"
        ],
    ),
    # --- the injection rule: nothing a user writes may become code in a generated file -----
    (
        "inject-package-subst",
        gpu(packages=["torch==2.9.1+rocm6.4", "x; $(rm -rf ~)"]),
        "env.gpu.packages",
        "error",
        ["contains '$'"],
    ),
    (
        "inject-package-newline",
        gpu(packages=["torch==2.9.1+rocm6.4\nRUN id"]),
        "env.gpu.packages",
        "error",
        ["contains a newline"],
    ),
    (
        "inject-package-backtick",
        gpu(packages=["torch==2.9.1+rocm6.4", "numpy`id`"]),
        "env.gpu.packages",
        "error",
        ["contains '`'"],
    ),
    (
        "inject-package-quote",
        gpu(packages=["torch==2.9.1+rocm6.4", "numpy'"]),
        "env.gpu.packages",
        "error",
        ['"numpy\'": not a valid PEP 508 requirement'],
    ),
    (
        "inject-package-url-quote",
        gpu(packages=["torch==2.9.1+rocm6.4", "x @ https://h.example/a'b.whl"]),
        "env.gpu.packages",
        "error",
        ["quotes or ';' outside an environment marker"],
    ),
    (
        "inject-package-semicolon",
        gpu(packages=["torch==2.9.1+rocm6.4", "numpy==1.0;"]),
        "env.gpu.packages",
        "error",
        ["'numpy==1.0;'"],
    ),
    (
        "inject-env-name",
        gpu(env={"A;B": "1"}),
        "env.gpu.env.A;B",
        "error",
        ["is not a valid environment variable name"],
    ),
    (
        "inject-env-name-subst",
        gpu(env={"$(id)": "1"}),
        "env.gpu.env.$(id)",
        "error",
        ["is not a valid environment variable name"],
    ),
    (
        "inject-env-value",
        gpu(env={"A": "1\nRUN rm -rf /"}),
        "env.gpu.env.A",
        "error",
        ["value contains a newline"],
    ),
    (
        "inject-env-value-nul",
        gpu(env={"A": "1\x00"}),
        "env.gpu.env.A",
        "error",
        ["value contains a newline, NUL"],
    ),
    (
        "inject-apt",
        gpu(apt=["curl; rm -rf /"]),
        "env.gpu.apt",
        "error",
        ["'curl; rm -rf /' is not a Debian package name"],
    ),
    (
        "inject-user",
        gpu_table("docker", user="x$(id)"),
        "env.gpu.docker.user",
        "error",
        ["'x$(id)' is not a valid user name"],
    ),
    (
        "root-user",
        gpu_table("wsl2", user="root"),
        "env.gpu.wsl2.user",
        "error",
        ["must not be root"],
    ),
    (
        "inject-hip-path",
        chain(
            gpu(targets=["windows"], packages=["numpy"], index_pins={}),
            gpu_table("windows", hip_path='C:\\ROCm"; iex x'),
        ),
        "env.gpu.windows.hip_path",
        "error",
        ["contains '\"'"],
    ),
    (
        "inject-mirror",
        lambda d: d["indexes"]["pytorch-cpu"].update(mirror="/opt/w;id"),
        "indexes.pytorch-cpu.mirror",
        "error",
        ["contains ';'"],
    ),
    (
        "inject-url",
        lambda d: d["indexes"]["pytorch-cpu"].update(url="https://x/`id`"),
        "indexes.pytorch-cpu.url",
        "error",
        ["contains '`'"],
    ),
    (
        "inject-python",
        gpu_table("docker", python="python3; id"),
        "env.gpu.docker.python",
        "error",
        ["is not an interpreter name or absolute path"],
    ),
    (
        "inject-description",
        gpu(description="a\nRUN id"),
        "env.gpu.description",
        "error",
        ["contains a newline"],
    ),
    (
        "inject-image",
        gpu_table("docker", base="debian:12\nRUN id"),
        "env.gpu.docker.base",
        "error",
        ["is not a Docker image reference"],
    ),
]

WARNINGS: list[tuple[str, Mutation, str, list[str]]] = [
    (
        "nccl-typo",
        gpu(rccl={"NCCL_DEBG": "INFO"}),
        "env.gpu.rccl.NCCL_DEBG",
        ["did you mean NCCL_DEBUG?"],
    ),
    (
        "hsa-other-value",
        gpu(gpu="RX 6700 XT", targets=["docker"], env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        "env.gpu.env.HSA_OVERRIDE_GFX_VERSION",
        ["it runs as 10.3.0"],
    ),
    (
        "hsa-needed",
        gpu(gpu="RX 6700 XT", targets=["docker"]),
        "env.gpu.env",
        ['usually needs HSA_OVERRIDE_GFX_VERSION = "10.3.0"'],
    ),
    (
        "image-no-tag",
        lambda d: d["env"]["cpu"]["docker"].update(base="debian"),
        "env.cpu.docker.base",
        ["has no tag"],
    ),
    (
        "unused-pin",
        lambda d: d["env"]["cpu"].update(packages=["numpy"]),
        "env.cpu.index_pins.torch",
        ["pins torch, which is not in packages"],
    ),
    (
        "index-release-mismatch",
        gpu(rocm="6.3.4"),
        "env.gpu.index_pins",
        ["torch comes from the rocm6.4 index but the env's ROCm is 6.3.4"],
    ),
    (
        "wsl-base-not-ubuntu",
        gpu_table("wsl2", base="myorg/rootfs:1"),
        "env.gpu.wsl2.base",
        ["does not look like Ubuntu 24.04"],
    ),
    (
        "windows-rocm-release",
        gpu(rocm="6.1.3", targets=["windows"], packages=["numpy"], index_pins={}),
        "env.gpu.rocm",
        [
            "AMD publishes native-Windows PyTorch wheels for ROCm 6.4.4, 7.2, 7.2.1, "
            "7.14.0, 7.14.1, not 6.1.3"
        ],
    ),
    (
        "rocm-major-minor",
        gpu(rocm="6.4"),
        "env.gpu.rocm",
        ["'6.4' means ROCm 6.4.4 with this envbuilder's data", 'write rocm = "6.4.4"'],
    ),
    ("no-gpu", lambda d: d["env"]["gpu"].pop("gpu"), "env.gpu.gpu", ["not set; the GPU checks"]),
    (
        "table-not-in-targets",
        lambda d: d["env"]["cpu"].update(native={"python": "3.11"}),
        "env.cpu.native",
        ["is set but 'native' is not in targets"],
    ),
    (
        "unverified-release",
        gpu(rocm="7.2.1", packages=["torch==2.13.0+rocm7.2"], index_pins={"torch": "r72"}),
        "env.gpu.rocm",
        ["unverified"],
    ),
    (
        "hsa-needed-rocm62",
        chain(
            index("r62", "https://download.pytorch.org/whl/rocm6.2"),
            gpu(
                gpu="RX 7800 XT",
                rocm="6.2.3",
                targets=["docker"],
                packages=["torch==2.5.1+rocm6.2"],
                index_pins={"torch": "r62"},
            ),
        ),
        "env.gpu.env",
        [
            "RX 7800 XT (gfx1101) is not among the torch wheel's gfx targets",
            'usually needs HSA_OVERRIDE_GFX_VERSION = "11.0.0"',
        ],
    ),
    (
        "hsa-no-override-known",
        gpu(gpu="MI355X", targets=["docker"]),
        "env.gpu.env",
        [
            "MI355X (gfx950) is not among the torch wheel's gfx targets and no override is known "
            "to work",
            "pin torch to an index whose wheels have it (rocm7.0, rocm7.1, rocm7.2",
        ],
    ),
    (
        "pytorch-knob-env",
        gpu(env={"NCCL_BLOCKING_WAIT": "1"}),
        "env.gpu.env.NCCL_BLOCKING_WAIT",
        [
            "NCCL_BLOCKING_WAIT is PyTorch's deprecated name for TORCH_NCCL_BLOCKING_WAIT",
            'use TORCH_NCCL_BLOCKING_WAIT = "1"',
        ],
    ),
    (
        "unverified-torch-row",
        chain(
            index("r72x", "https://download.pytorch.org/whl/rocm7.2"),
            gpu(
                rocm="7.2.4",
                targets=["docker"],
                packages=["torch==2.14.0+rocm7.2"],
                index_pins={"torch": "r72x"},
            ),
        ),
        "env.gpu.packages",
        ["the rocm7.2 index's torch", "is unverified"],
    ),
    (
        "unverified-gpu",
        gpu(gpu="gfx1250", targets=["docker"]),
        "env.gpu.gpu",
        ["the GPU table's facts for gfx1250 (gfx1250) are unverified"],
    ),
]


@pytest.mark.parametrize(
    ("case", "mutate", "key", "severity", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_error_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    mutate: Mutation,
    key: str,
    severity: str,
    words: list[str],
) -> None:
    code, lines = run_check(tmp_path, mutated(mutate), capsys)
    assert code == 1, lines
    prefix = f"{tmp_path / 'environments.toml'}: {key}: {severity}: "
    hits = [line for line in lines if line.startswith(prefix)]
    assert hits, f"no line starting {prefix!r} in:\n" + "\n".join(lines)
    assert any(all(w in h for w in words) for h in hits), (words, hits)
    assert all("; " in h for h in hits), "every message says what would be right"


@pytest.mark.parametrize(("case", "mutate", "key", "words"), WARNINGS, ids=[c[0] for c in WARNINGS])
def test_warning_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    mutate: Mutation,
    key: str,
    words: list[str],
) -> None:
    def with_r72(d: dict[str, Any]) -> None:
        d["indexes"]["r72"] = {"url": "https://download.pytorch.org/whl/rocm7.2"}
        mutate(d)

    code, lines = run_check(tmp_path, mutated(with_r72), capsys)
    assert code == 0, lines
    prefix = f"{tmp_path / 'environments.toml'}: {key}: warning: "
    hits = [line for line in lines if line.startswith(prefix)]
    assert hits and any(all(w in h for w in words) for h in hits), lines


def test_base_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_check(tmp_path, mutated(lambda d: None), capsys)
    assert (code, lines) == (0, [])


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[env.gpu\naccelerator = 'rocm'\n", 1),
        ("[env.x]\naccelerator = rocm\n", 2),
        ("[env.x]\npython = '3.12'\npython = '3.11'\n", 3),
        ('[env.x]\npackages = ["torch",\n', 2),
    ],
)
def test_toml_syntax_error_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int
) -> None:
    code, lines = run_check(tmp_path, text, capsys)
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"{tmp_path / 'environments.toml'}: line {line}: "), lines
    assert ": error: invalid TOML" in lines[0]


def test_duplicate_key_is_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_check(tmp_path, "[env.x]\npython = '3.12'\npython = '3.11'\n", capsys)
    assert code == 1 and "python" in lines[0], lines


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--spec", str(tmp_path / "nope.toml")])
    out = capsys.readouterr().out
    assert code == 1
    assert out.strip() == (
        f"{tmp_path / 'nope.toml'}: file: error: not found; create it "
        "(see docs/spec.md) or pass --spec PATH"
    )
    assert list(tmp_path.iterdir()) == []


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "environments.toml"
    spec.write_bytes(b"[env.x]\ndescription = '\xff'\n")
    assert main(["check", "--spec", str(spec)]) == 1
    assert "is not UTF-8" in capsys.readouterr().out


def test_seed_guides_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed guides' own setup: each of their mistakes is named."""
    code = main(["check", "--spec", str(DATA / "seeds.toml")])
    out = capsys.readouterr().out
    assert code == 1
    for words in [
        "HSA_OVERRIDE_GFX_VERSION: error: set to 11.0.0 for RX 7900 XTX (gfx1100), "
        "which needs no override",
        "env.seed.env.RCCL_ALGO: error: RCCL_ALGO is not read by RCCL",
        "env.seed.env.RCCL_NTHREADS: error: RCCL_NTHREADS is not read by RCCL",
        "env.seed.wsl2.ubuntu: error: Ubuntu 24.04 is not supported by ROCm 6.1.3",
        "env.seed.index_pins: warning: torch comes from the rocm5.6 index",
    ]:
        assert words in out, (words, out)


def test_env_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = mutated(
        chain(gpu(rccl={"RCCL_ALGO": "ring"}), lambda d: d["env"]["cpu"].update(env={"A": "1\n"}))
    )
    code, lines = run_check(tmp_path, text, capsys, "--env", "cpu")
    assert code == 1
    assert lines and all(": env.cpu." in line for line in lines), lines


def test_env_filter_unknown_env_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--spec", str(DATA / "base.toml"), "--env", "gpuu"]) == 2
    assert "no environment 'gpuu' (did you mean 'gpu'?)" in capsys.readouterr().err


def test_shipped_spec_checks_clean(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    before = _tree(root / "envbuilder")
    assert main(["check", "--spec", str(root / "environments.toml")]) == 0
    out = capsys.readouterr().out
    assert ": error:" not in out
    assert _tree(root / "envbuilder") == before


def test_wrong_type_quotes_the_value_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = mutated(lambda d: None).replace('python = "3.12"', "python = 3.10")
    text += '\n[env.gpu.env]\nNCCL_NTHREADS = 256\nA = "ok"\n'
    code, lines = run_check(tmp_path, text, capsys)
    spec = tmp_path / "environments.toml"
    assert code == 1
    assert (
        f'{spec}: defaults.python: error: must be a string, not a float; quote it: "3.10"'
    ) in lines
    assert (
        f"{spec}: env.gpu.env.NCCL_NTHREADS: error: must be a string, not an integer; "
        'quote it: "256"'
    ) in lines
    # the mistyped python is reported once, not again as "missing" in every env
    assert not [line for line in lines if "python: error: missing" in line]


def test_finding_is_one_line_even_for_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run_check(tmp_path, mutated(gpu(env={"A\nB": "1"})), capsys)
    assert code == 1
    assert (
        f"{tmp_path / 'environments.toml'}: env.gpu.env.A\\nB: error: is not a valid "
        "environment variable name" in "\n".join(lines)
    )


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_check(tmp_path, mutated(gpu(rccl={"RCCL_ALGO": "ring"})), capsys)
    spec = tmp_path / "environments.toml"
    assert main(["check", "--spec", str(spec), "--json"]) == code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["envs"] == []
    assert {
        "severity": "error",
        "file": str(spec),
        "key": "env.gpu.rccl.RCCL_ALGO",
        "message": "RCCL_ALGO is not read by RCCL (it reads the NCCL_* names); use "
        'NCCL_ALGO = "ring"',
    } in data["findings"]


def test_spec_path_is_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--spec", str(tmp_path)]) == 1
    assert capsys.readouterr().out.strip() == (
        f"{tmp_path}: file: error: is a folder; pass the spec file itself with --spec PATH"
    )


# --- compatibility data (rocm-2026.md): install models, torch/index, HSA per index, RCCL -------


def _env_lines(lines: list[str], words: str) -> list[str]:
    return [line for line in lines if words in line]


@pytest.mark.parametrize(
    ("rocm", "targets", "torch", "index_url", "model"),
    [
        (
            "10.1.0",
            ["docker", "native"],
            "torch==2.14.0+rocm10.1.0",
            "https://stable.repo.amd.com/rocm/whl-next/",
            "pip-sdk",
        ),
        (
            "7.14.1",
            ["docker", "wsl2", "windows"],
            "torch==2.12.0+rocm7.14.1",
            "https://repo.amd.com/rocm/whl-multi-arch/",
            "pip-sdk",
        ),
        (
            "7.2.4",
            ["docker", "wsl2"],
            "torch==2.13.0+rocm7.2",
            "https://download.pytorch.org/whl/rocm7.2",
            "amdgpu-install",
        ),
        (
            "6.4.2.1",
            ["wsl2"],
            "torch==2.9.1+rocm6.4",
            "https://download.pytorch.org/whl/rocm6.4",
            "amdgpu-install",
        ),
    ],
)
def test_check_resolves_the_install_model(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rocm: str,
    targets: list[str],
    torch: str,
    index_url: str,
    model: str,
) -> None:
    """`check` takes each release to its install model and passes each clean: a pip-SDK env
    (torch from the release's index) is locked as the pip SDK (its device extras and pinned
    names, envbuilder.core.pipsdk), an amdgpu-install env as it is written."""
    from envbuilder.core.compatload import load_compat

    release = load_compat().rocm(rocm)
    assert release is not None and release.install_model == model
    text = mutated(
        chain(
            index("idx", index_url),
            gpu(rocm=rocm, targets=targets, packages=[torch], index_pins={"torch": "idx"}),
        )
    )
    spec = tmp_path / "environments.toml"
    spec.write_text(text, encoding="utf-8")
    code = main(["check", "--spec", str(spec)])
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line]
    assert code == 0, lines
    assert not _env_lines(lines, ": error: ")
    assert not _env_lines(lines, "installs through"), lines  # stdout holds findings only
    # stderr names the model the release resolves to, in the words of compat's labels
    label = INSTALL_MODEL_LABELS[model]
    # a release whose install page names the host's driver (rocm.toml host_driver) says so too
    needs = f"; the host needs {release.host_driver}" if release.host_driver else ""
    assert f"gpu: ROCm {rocm} installs through {label}{needs}" in err.splitlines(), err
    assert main(["check", "--spec", str(spec), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = {"env": "gpu", "rocm": rocm, "install_model": model, "label": label}
    if release.host_driver:
        expected["host_driver"] = release.host_driver
    assert data["install_models"] == [expected]
    env = load_spec(tmp_path / "environments.toml").env("gpu")
    packages, pins = lock_inputs(env, targets[0])
    if model == "pip-sdk":
        assert packages[0] == torch.replace("torch==", "torch[device-gfx1100]==")
        assert f"rocm[libraries,devel,device-gfx1100]=={rocm}" in packages
        assert set(pins.values()) == {"idx"} and "rocm-sdk-device-gfx1100" in pins
    else:
        assert (packages, pins) == ((torch,), {"torch": "idx"})


def test_wsl_release_6_4_2_1_renders_its_amdgpu_install_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """6.4.2.1 is a WSL release: check passes clean and the wsl2 plan installs its .deb."""
    from envbuilder.builders.render import build_plan
    from envbuilder.core import plan
    from envbuilder.core.compatload import load_compat
    from envbuilder.spec.load import load_spec

    text = mutated(gpu(rocm="6.4.2.1", targets=["wsl2"]))
    code, lines = run_check(tmp_path, text, capsys)
    assert (code, lines) == (0, [])
    env = load_spec(tmp_path / "environments.toml").env("gpu")
    built = build_plan(
        env, "wsl2", rocm=load_compat().rocm("6.4.2.1"), lock=plan.LockPins(), variables={}
    )
    stacks = [
        step
        for stage in built.stages
        for step in stage.steps
        if isinstance(step, plan.RocmWslStack)
    ]
    assert [(s.stack, s.deb_url) for s in stacks] == [
        (
            "legacy",
            "https://repo.radeon.com/amdgpu-install/6.4.2.1/ubuntu/noble/"
            "amdgpu-install_6.4.60402-1_all.deb",
        )
    ]


def test_torch_2_9_1_rocm6_3_from_the_rocm6_3_index_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rocm-2026.md section 3: torch 2.9.x is on rocm6.3 too (the data had rocm6.4 only)."""
    text = mutated(
        chain(
            index("pytorch-rocm63", "https://download.pytorch.org/whl/rocm6.3"),
            gpu(
                rocm="6.3.4",
                packages=["torch==2.9.1+rocm6.3"],
                index_pins={"torch": "pytorch-rocm63"},
            ),
        )
    )
    assert run_check(tmp_path, text, capsys) == (0, [])


@pytest.mark.parametrize(
    ("index_name", "rocm", "torch", "needs"),
    [
        ("rocm6.2", "6.2.3", "torch==2.5.1+rocm6.2", True),
        ("rocm6.3", "6.3.4", "torch==2.7.1+rocm6.3", False),
        ("rocm6.3", "6.3.4", "torch==2.9.1+rocm6.3", False),
    ],
)
def test_hsa_override_follows_the_wheel_of_the_index(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    index_name: str,
    rocm: str,
    torch: str,
    needs: bool,
) -> None:
    """An RX 7800 XT (gfx1101) needs HSA_OVERRIDE_GFX_VERSION=11.0.0 on rocm6.2 wheels, not on
    rocm6.3 ones (one gfx list for every index was wrong)."""
    text = mutated(
        chain(
            index("idx", f"https://download.pytorch.org/whl/{index_name}"),
            gpu(
                gpu="RX 7800 XT",
                rocm=rocm,
                targets=["docker"],
                packages=[torch],
                index_pins={"torch": "idx"},
            ),
        )
    )
    code, lines = run_check(tmp_path, text, capsys)
    assert code == 0, lines
    hsa = _env_lines(lines, "HSA_OVERRIDE_GFX_VERSION")
    assert bool(hsa) is needs, lines
    if needs:
        assert 'usually needs HSA_OVERRIDE_GFX_VERSION = "11.0.0"' in hsa[0]


def test_rccl_param_names_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RCCL's own RCCL_PARAM names drew a false warning (rocm-2026.md section 7)."""
    names = [
        "RCCL_MSCCL_ENABLE",
        "RCCL_MSCCLPP_ENABLE",
        "RCCL_ENABLE_CLIQUE",
        "RCCL_P2P_NET_DISABLE",
        "RCCL_LL128_FORCE_ENABLE",
        "RCCL_ENABLE_SIGNALHANDLER",
        "RCCL_KERNEL_COLL_TRACE_ENABLE",
        "RCCL_FORCE_ENABLE_GDRDMA",
        "NCCL_P2P_LEVEL",
        "NCCL_NET_GDR_LEVEL",
    ]
    text = mutated(gpu(rccl={n: "1" for n in names}))
    assert run_check(tmp_path, text, capsys) == (0, [])


def test_windows_from_7_14_covers_rdna2_and_python_3_13(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From 7.14 AMD's Windows wheels are the multi-arch index's: RX 6000 and Python 3.11-3.14."""
    text = mutated(
        chain(
            index("amd", "https://repo.amd.com/rocm/whl-multi-arch/"),
            gpu(
                gpu="RX 6800", rocm="7.14.1", targets=["windows"], packages=["numpy"], index_pins={}
            ),
            gpu_table(
                "windows",
                python="3.13",
                packages=["torch==2.12.0+rocm7.14.1"],
                index_pins={"torch": "amd"},
            ),
        )
    )
    code, lines = run_check(tmp_path, text, capsys)
    assert code == 0, lines
    assert not _env_lines(lines, "not covered") and not _env_lines(lines, "need Python")
    assert not _env_lines(lines, "pinned to a Linux wheel index")


@pytest.mark.parametrize(
    ("rocm", "gpu_name", "on_index"),
    [
        ("7.14.0", "gfx1152", True),
        ("7.14.1", "RX 6800 XT", True),
        ("7.14.1", "RX 6700 XT", False),
        ("7.14.0", "gfx1010", False),
        ("7.14.1", "gfx900", False),
        ("7.14.1", "gfx1036", False),
        ("10.1.0", "RX 6700 XT", True),
    ],
)
def test_pip_sdk_gpus_follow_the_index_targets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rocm: str, gpu_name: str, on_index: bool
) -> None:
    """Issue 35: AMD's 7.14 index offers the device extras of its install pages' 15 targets; a GPU
    outside them is an error on gpu (the lock cannot hold its device code), with no
    HSA_OVERRIDE_GFX_VERSION advice beside it (an override is warned against on TheRock)."""
    text = mutated(chain(amd_sdk(rocm, targets=["docker"]), gpu(gpu=gpu_name)))
    code, lines = run_check(tmp_path, text, capsys)
    extra = _env_lines(lines, "no device-<gfx> extra")
    assert bool(extra) is not on_index and code == (0 if on_index else 1), lines
    assert not _env_lines(lines, "HSA_OVERRIDE_GFX_VERSION"), lines
    if extra:
        assert f"ROCm {rocm}'s index (https://repo.amd.com/rocm/whl-multi-arch/)" in extra[0]


def no_wsl2(d: dict[str, Any]) -> None:
    d["env"]["gpu"].pop("wsl2", None)


@pytest.mark.parametrize(
    ("ubuntu", "codename", "python"), [("22.04", "jammy", "3.10"), ("24.04", "noble", "3.12")]
)
def test_legacy_release_on_plain_ubuntu_installs_amdgpu_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ubuntu: str, codename: str, python: str
) -> None:
    """Issue 15: `rocm = "7.0.2"` on a plain Ubuntu base renders the release's amdgpu-install
    .deb with its full-version file name (the data's URL), installed in the runtime stage (so
    the final image has /opt/rocm); a rocm/dev image as base gets no such step (its ROCm is
    there already), and an Ubuntu the package does not exist for is a check error."""
    text = mutated(
        chain(
            index("pytorch-rocm70", "https://download.pytorch.org/whl/rocm7.0"),
            gpu(
                rocm="7.0.2",
                python=python,
                targets=["docker"],
                packages=["torch==2.10.0+rocm7.0"],
                index_pins={"torch": "pytorch-rocm70"},
            ),
            gpu_table("docker", base=f"ubuntu:{ubuntu}"),
            no_wsl2,
        )
    )
    code, lines = run_check(tmp_path, text, capsys)
    assert (code, lines) == (0, [])
    spec = tmp_path / "environments.toml"
    assert main(["render", "--spec", str(spec), "--env", "gpu", "--target", "docker"]) == 0
    dockerfile = (tmp_path / "dockerfiles" / "gpu" / "Dockerfile").read_text(encoding="utf-8")
    url = (
        f"https://repo.radeon.com/amdgpu-install/7.0.2/ubuntu/{codename}/"
        "amdgpu-install_7.0.2.70002-1_all.deb"
    )
    assert f"        {url} \\\n" in dockerfile
    runtime = dockerfile.split("FROM runtime AS build", 1)[0]
    assert f"FROM ubuntu:{ubuntu} AS runtime" in runtime
    assert "amdgpu-install -y --usecase=rocm --no-dkms" in runtime
    assert runtime.index(url) < runtime.index("useradd")
    assert 'ROCM_PATH="/opt/rocm"' in dockerfile
    # the release's own dev image holds ROCm: no amdgpu-install step there
    dev = text.replace(f'base = "ubuntu:{ubuntu}"', f'base = "rocm/dev-ubuntu-{ubuntu}:7.0.2"')
    spec.write_text(dev, encoding="utf-8")
    assert main(["render", "--spec", str(spec), "--env", "gpu", "--target", "docker"]) == 0
    capsys.readouterr()
    assert "amdgpu-install" not in (tmp_path / "dockerfiles" / "gpu" / "Dockerfile").read_text()
    # an Ubuntu release AMD packages 7.0.2 for neither in jammy nor noble paths
    spec.write_text(
        text.replace(f'base = "ubuntu:{ubuntu}"', 'base = "ubuntu:20.04"'), encoding="utf-8"
    )
    assert main(["check", "--spec", str(spec)]) == 1
    assert (
        "env.gpu.docker.base: error: ROCm 7.0.2 on a plain Ubuntu 20.04 image: the "
        "compatibility data has no amdgpu-install package for it"
    ) in capsys.readouterr().out

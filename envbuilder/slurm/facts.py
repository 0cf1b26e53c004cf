"""envbuilder/data/slurm.toml as values: how the batch script starts an env on a node.

load_facts() -> SlurmFacts      CompatDataError when the shipped file is malformed
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, cast

from envbuilder.core.compat import HOST_KINDS, HostKind
from envbuilder.core.errors import CompatDataError

FILE = "slurm.toml"
ACCELERATORS = ("rocm", "cuda", "cpu")


@dataclass(frozen=True)
class SlurmFacts:
    """What the rendered script needs per accelerator and for torchrun's rendezvous."""

    host_kind: Mapping[str, HostKind]  # accelerator -> docker.toml host kind
    apptainer_gpu_flag: Mapping[str, str]  # accelerator -> "--rocm" / "--nv" / ""
    rdzv_port_base: int
    join_timeout_s: int
    gpu_request: Mapping[str, str] = field(default_factory=dict)  # accelerator -> sbatch option


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise CompatDataError(f"envbuilder/data/{FILE}: [{where}{key}] is missing or not a table")
    return value


def _per_accelerator(table: Mapping[str, Any], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for accelerator in ACCELERATORS:
        value = table.get(accelerator)
        if not isinstance(value, str):
            raise CompatDataError(f"envbuilder/data/{FILE}: {where}.{accelerator} must be a string")
        out[accelerator] = value
    return out


def _int(table: Mapping[str, Any], key: str, where: str) -> int:
    value = table.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CompatDataError(f"envbuilder/data/{FILE}: {where}.{key} must be a positive integer")
    return value


@functools.cache
def load_facts() -> SlurmFacts:
    """The shipped facts, checked: every accelerator has a host kind of docker.toml and an
    Apptainer flag, the rendezvous numbers are positive integers."""
    try:
        text = resources.files("envbuilder.data").joinpath(FILE).read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CompatDataError(f"envbuilder/data/{FILE}: cannot be read: {exc}") from exc
    kinds = _per_accelerator(_table(data, "host_kind", ""), "host_kind")
    for accelerator, kind in kinds.items():
        if kind not in HOST_KINDS:
            raise CompatDataError(
                f"envbuilder/data/{FILE}: host_kind.{accelerator} = {kind!r} "
                f"is not one of docker.toml's {', '.join(HOST_KINDS)}"
            )
    runtimes = _table(data, "runtime", "")
    apptainer = _table(runtimes, "apptainer", "runtime.")
    flags = _per_accelerator(
        _table(apptainer, "gpu_flag", "runtime.apptainer."), "runtime.apptainer.gpu_flag"
    )
    torchrun = _table(data, "torchrun", "")
    gpus = _per_accelerator(_table(_table(data, "gpus", ""), "request", "gpus."), "gpus.request")
    return SlurmFacts(
        host_kind={a: cast(HostKind, k) for a, k in kinds.items()},
        apptainer_gpu_flag=flags,
        rdzv_port_base=_int(torchrun, "rdzv_port_base", "torchrun"),
        join_timeout_s=_int(torchrun, "join_timeout_s", "torchrun"),
        gpu_request=gpus,
    )

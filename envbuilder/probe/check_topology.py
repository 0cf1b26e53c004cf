"""topology: which GPUs can reach which (peer access), and how they are linked.

`rocm-smi --showtopo` / `nvidia-smi topo -m` in the report. Peer access comes from torch
(`torch.cuda.can_device_access_peer`, every ordered pair). The link kind comes from the vendor's
management library where it is installed, never required:

- amdsmi (ROCm): `amdsmi_topo_get_link_type` gives the hops and the link type (XGMI or PCIe);
- pynvml (NVIDIA): `nvmlDeviceGetP2PStatus(..., NVML_P2P_CAPS_INDEX_NVLINK)` says NVLink, else
  `nvmlDeviceGetTopologyCommonAncestor` says how far apart on PCIe (single switch, multiple
  switches, host bridge, NUMA node, across the system).

Devices are matched to the library's by PCI address (torch's device order need not be the
library's: CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, the runtime's own order). Where no
library is installed, or the addresses cannot be matched, only peer access is recorded, with
the reason. No metrics: this check records; it fails only when torch cannot answer.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from envbuilder.probe.common import CheckResult, CheckSkipped, Context, torch_device

#: nvmlGpuTopologyLevel_t (nvml.h): the closest common ancestor of two GPUs on PCIe.
NVML_LEVELS = {
    0: "internal",
    10: "pcie-single-switch",
    20: "pcie-multiple-switches",
    30: "pcie-host-bridge",
    40: "pcie-numa-node",
    50: "system",
}
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0


def pci_address(index: int) -> str | None:
    """torch's device `index` as a PCI address "dddd:bb:dd.0" (lower case), if torch says."""
    import torch

    props = torch.cuda.get_device_properties(index)
    parts = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    if any(not isinstance(p, int) for p in parts):
        return None
    domain, bus, dev = parts
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def peer_matrix(count: int) -> list[list[bool]]:
    """[i][j]: device i can access device j's memory directly (True on the diagonal)."""
    import torch

    return [
        [i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(count)]
        for i in range(count)
    ]


def _normal_bdf(text: str) -> str:
    """A PCI address in one spelling: lower case, a 4-digit domain ("0000:c1:00.0")."""
    parts = text.strip().lower().split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return text.strip().lower()


def amdsmi_links(addresses: list[str]) -> tuple[list[dict[str, Any]], str]:
    """Link kind and hops for every pair, from amdsmi; (links, library name)."""
    amdsmi = importlib.import_module("amdsmi")
    amdsmi.amdsmi_init()
    try:
        handles = {
            _normal_bdf(str(amdsmi.amdsmi_get_gpu_device_bdf(h))): h
            for h in amdsmi.amdsmi_get_processor_handles()
        }
        mine = [handles[a] for a in addresses]  # KeyError: a device amdsmi does not list
        kinds = getattr(amdsmi, "AmdSmiLinkType", None) or getattr(amdsmi, "AmdSmiIoLinkType", None)
        links = []
        for i, a in enumerate(mine):
            for j, b in enumerate(mine):
                if i < j:
                    found = amdsmi.amdsmi_topo_get_link_type(a, b)
                    links.append(
                        {
                            "a": i,
                            "b": j,
                            "kind": _enum_name(found["type"], kinds),
                            "hops": int(found["hops"]),
                        }
                    )
        return links, "amdsmi"
    finally:
        amdsmi.amdsmi_shut_down()


def _enum_name(value: Any, enum: Any) -> str:
    """An amdsmi link type as a lower-case name ("xgmi", "pciexpress"), whichever amdsmi
    version gave it (an IntEnum, a ctypes integer or a plain int)."""
    name = getattr(value, "name", None)
    raw = getattr(value, "value", value)
    if name is None and enum is not None:
        try:
            name = enum(int(raw)).name
        except (ValueError, TypeError):
            name = None
    return str(name if name is not None else raw).lower()


def pynvml_links(addresses: list[str]) -> tuple[list[dict[str, Any]], str]:
    """NVLink or the PCIe distance for every pair, from pynvml; (links, library name)."""
    nvml = importlib.import_module("pynvml")
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByPciBusId(a) for a in addresses]
        links = []
        for i, a in enumerate(handles):
            for j, b in enumerate(handles):
                if i < j:
                    links.append({"a": i, "b": j, "kind": _nvml_kind(nvml, a, b)})
        return links, "pynvml"
    finally:
        nvml.nvmlShutdown()


def _nvml_kind(nvml: Any, a: Any, b: Any) -> str:
    if nvml.nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK) == NVML_P2P_STATUS_OK:
        return "nvlink"
    level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    return NVML_LEVELS.get(level, f"nvml-level-{level}")


def link_kinds(count: int, hip: bool) -> tuple[list[dict[str, Any]] | None, str]:
    """Every pair's link kind from the vendor library, or None and why not."""
    library = "amdsmi" if hip else "pynvml"
    if importlib.util.find_spec(library) is None:
        return None, f"{library} is not installed: peer access only"
    addresses = [pci_address(i) for i in range(count)]
    if any(a is None for a in addresses):
        return None, "torch does not report the devices' PCI addresses: peer access only"
    reader = amdsmi_links if hip else pynvml_links
    try:
        links, source = reader([str(a) for a in addresses])
    except Exception as exc:  # a library that cannot answer here (WSL, old driver, no device)
        return None, f"{library} could not tell the links ({type(exc).__name__}: {exc})"
    return links, source


def run(ctx: Context) -> CheckResult:
    """Peer access between every pair of visible GPUs, and the link kinds where known."""
    if ctx.expect == "cpu":
        raise CheckSkipped("--expect cpu: no GPU is used, nothing is linked")
    import torch

    torch_device(ctx)  # fails with the reason when a promised GPU is missing
    count = torch.cuda.device_count()
    details: dict[str, Any] = {
        "devices": count,
        "pci": [pci_address(i) for i in range(count)],
        "peer_access": peer_matrix(count),
    }
    if count < 2:
        details["links"] = []
        return CheckResult(details=details, reason="1 GPU visible: no links between GPUs")
    links, source = link_kinds(count, bool(torch.version.hip))
    details["links"] = links
    details["link_source"] = source
    no_peer = [
        f"{i}->{j}"
        for i, row in enumerate(details["peer_access"])
        for j, ok in enumerate(row)
        if not ok
    ]
    note = f"no peer access: {', '.join(no_peer)}" if no_peer else None
    if links is None:
        note = "; ".join(n for n in (note, source) if n)
    return CheckResult(details=details, reason=note)

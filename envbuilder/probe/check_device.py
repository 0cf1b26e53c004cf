"""device: what torch was built for, what it sees, and whether a kernel runs on each device.

Its details also feed the report's fingerprint (torch, HIP/CUDA, driver, devices).
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envbuilder.probe.common import CheckFailed, CheckResult, Context, in_wsl

DEVICE_NODES = ("/dev/kfd", "/dev/dri", "/dev/dxg")
#: Variables that change what ROCm/CUDA/RCCL see or do; recorded as found (never changed).
ENV_PREFIXES = (
    "HSA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "RCCL_",
    "NCCL_",
    "AMD_",
    "GPU_DEVICE_ORDINAL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "PYTORCH_ROCM_ARCH",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_NCCL_",
    "TORCH_SYMM_MEM_",
    "NVSHMEM_",
    "GLOO_",
    "LD_LIBRARY_PATH",
)


def relevant_env() -> dict[str, str]:
    """The GPU-related environment variables, as this process sees them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def driver_version() -> str | None:
    """The kernel driver's version where the OS exposes it (NVIDIA, amdgpu-dkms), else None."""
    nvidia = Path("/proc/driver/nvidia/version")
    amdgpu = Path("/sys/module/amdgpu/version")
    try:
        if nvidia.is_file():
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", nvidia.read_text())
            if found:
                return f"nvidia {found.group(1)}"
        if amdgpu.is_file():
            return f"amdgpu {amdgpu.read_text().strip()}"
    except OSError:
        return None
    return None


def torch_facts() -> dict[str, Any]:
    """torch's build and the devices it sees: the fingerprint's torch part."""
    import torch

    available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if available else 0
    devices = [_device_facts(i) for i in range(count)]
    return {
        "torch": str(torch.__version__),
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "driver": _driver(available),
        "gpu_available": available,
        "devices": devices,
        "distributed": bool(torch.distributed.is_available()),
        "nccl": _nccl_version(),
        # The threads this process's CPU kernels use (the checks run in it): CPU figures
        # scale with them, so the fingerprint records them.
        "threads": int(torch.get_num_threads()),
        "interop_threads": int(torch.get_num_interop_threads()),
    }


def _device_facts(i: int) -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(i)
    return {
        "index": i,
        "name": str(props.name),
        # CUDA builds fill gcnArchName with the device name: a gfx target only on ROCm.
        "gfx": (str(getattr(props, "gcnArchName", "")) or None) if torch.version.hip else None,
        "memory_bytes": int(props.total_memory),
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": int(props.multi_processor_count),
    }


def _driver(available: bool) -> str | None:
    """The OS's driver version, else the one torch's driver API reports (with a GPU)."""
    import torch

    driver = driver_version()
    if driver is None and available and hasattr(torch._C, "_cuda_getDriverVersion"):
        api = int(torch._C._cuda_getDriverVersion())
        if api > 0:
            driver = f"{'hip' if torch.version.hip else 'cuda'}-driver-api {api}"
    return driver


def _nccl_version() -> str | None:
    import torch

    try:
        version = torch.cuda.nccl.version()
    except Exception:  # not built with NCCL/RCCL (CPU builds, Windows ROCm)
        return None
    if isinstance(version, tuple):
        return ".".join(str(v) for v in version)
    return str(version)


def _expectation_problems(ctx: Context, facts: dict[str, Any]) -> list[str]:
    """What contradicts --expect: a CPU build where a GPU build was promised, no GPU, etc."""
    problems: list[str] = []
    if ctx.expect == "rocm" and not facts["hip"]:
        problems.append(
            f"--expect rocm, but torch {facts['torch']} is not a ROCm build "
            f"(torch.version.hip is None, cuda={facts['cuda']})"
        )
    if ctx.expect == "cuda" and not facts["cuda"]:
        problems.append(
            f"--expect cuda, but torch {facts['torch']} is not a CUDA build "
            f"(torch.version.cuda is None, hip={facts['hip']})"
        )
    if ctx.expect != "cpu" and not facts["devices"]:
        problems.append(
            f"--expect {ctx.expect}, but torch sees no GPU "
            "(check the driver, the device nodes and *_VISIBLE_DEVICES)"
        )
    override = os.environ.get("HSA_OVERRIDE_GFX_VERSION")
    if override is not None and not override.strip():
        problems.append(
            "HSA_OVERRIDE_GFX_VERSION is set but empty, which breaks GPU detection: unset it"
        )
    return problems


def _run_kernels(facts: dict[str, Any]) -> None:
    """A small computation on every visible device, checked (proves kernels launch)."""
    import torch

    for dev in facts["devices"]:
        x = torch.arange(1, 1001, device=f"cuda:{dev['index']}", dtype=torch.float32)
        got = float(x.sum().item())
        if got != 500500.0:
            raise CheckFailed(f"device {dev['index']} ({dev['name']}): sum(1..1000) gave {got}")
    y = torch.arange(1, 1001, dtype=torch.float32)
    if float(y.sum()) != 500500.0:
        raise CheckFailed("CPU: sum(1..1000) is wrong")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No garbage collection while torch imports: it makes hundreds of thousands of objects
    that live as long as the process, and the collections they trigger (372 with torch 2.13 on
    the CPU machine, ~10% of the import's CPU time) freed 7,004 objects of the 165,000 left.
    Collection resumes right after (the worker collects after each check, then freezes what
    torch made)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run(ctx: Context) -> CheckResult:
    """Collect the build/device facts; fail where they contradict --expect."""
    t0 = time.perf_counter()
    with _gc_paused():
        import torch  # noqa: F401  (the worker's first import of torch: timed, details.startup_s)

    imported = time.perf_counter() - t0
    facts = torch_facts()
    nodes = {node: Path(node).exists() for node in DEVICE_NODES}
    wsl = in_wsl()
    details: dict[str, Any] = {
        **facts,
        "device_nodes": nodes,
        "wsl": wsl,
        "env_vars": relevant_env(),
    }
    notes: list[str] = []
    if ctx.expect == "rocm" and facts["devices"]:
        wanted = ("/dev/dxg",) if wsl else ("/dev/kfd", "/dev/dri")
        notes += [f"{n} missing" for n in wanted if not nodes[n]]
    if ctx.expect == "cpu" and facts["devices"]:
        notes.append(
            f"{len(facts['devices'])} GPU(s) visible, but --expect cpu: the checks run on the CPU"
        )
    details["notes"] = notes
    # Where the check's time goes (it carries the worker's start): importing torch, asking it
    # for the facts (initialises the runtime), the first kernels (creates the GPU context).
    details["startup_s"] = {
        "import_torch": round(imported, 3),
        "facts": round(time.perf_counter() - t0 - imported, 3),
    }
    result = CheckResult(details=details, reason="; ".join(notes) or None)
    problems = _expectation_problems(ctx, facts)
    if problems:
        # The details still go back: the fingerprint needs them even when the check fails.
        raise CheckFailed("; ".join(problems), result)
    t1 = time.perf_counter()
    _run_kernels(facts)
    details["startup_s"]["first_kernels"] = round(time.perf_counter() - t1, 3)
    return result

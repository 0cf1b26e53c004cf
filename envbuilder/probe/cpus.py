"""The CPUs a run may use and how busy the machine was: the fingerprint's CPU facts (stdlib).

CPU figures scale with the threads torch runs and the CPUs it gets. Three limits can differ
between two machines (or two containers on one machine) with the same core count: the
affinity mask (`taskset`, `docker --cpuset-cpus`), the cgroup CPU quota (`docker --cpus`, a
Kubernetes limit: the kernel throttles the process once it used its share of each period,
however many threads it runs) and other work on the machine (the load average). The probe
records all three, and warns when the figures cannot be trusted.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def cpus_allowed() -> int | None:
    """How many CPUs this process may run on (its affinity mask), else the CPU count."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            pass
    return os.cpu_count()


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, None where the OS has none (Windows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_v2(text: str | None) -> float | None:
    """CPUs a cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max PERIOD") allows; None: no limit."""
    parts = (text or "").split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(quota_text: str | None, period_text: str | None) -> float | None:
    """CPUs cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us allow; None: no limit (-1)."""
    try:
        quota, period = int(quota_text or ""), int(period_text or "")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _ancestors(root: Path, rel: str) -> list[Path]:
    """`root/rel` and each folder above it up to `root`, deepest first, that exists.

    Inside a container the path in /proc/self/cgroup is often the host's, while the container
    sees its own cgroup mounted at the root: then only `root` itself exists, which is right.
    """
    parts = [p for p in rel.strip("/").split("/") if p and p != ".."]
    found = []
    for depth in range(len(parts), -1, -1):
        folder = root.joinpath(*parts[:depth])
        if folder.is_dir():
            found.append(folder)
    return found


def cgroup_cpu_quota(
    proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = CGROUP_ROOT
) -> float | None:
    """The tightest CPU quota (in CPUs) of this process's cgroup and its parents; None: none.

    cgroup v2 (`0::/path` in /proc/self/cgroup): `cpu.max` along the path. cgroup v1 (a line
    naming the `cpu` controller): `cpu.cfs_quota_us`/`cpu.cfs_period_us` under the cpu
    controller's mount (`cpu` or `cpu,cpuacct`). A nested limit counts where it is the lower.
    """
    text = _read(proc_cgroup)
    if text is None:
        return None
    quotas: list[float] = []
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if hier == "0" and controllers == "":
            quotas += _v2_quotas(root, rel)
        elif "cpu" in controllers.split(","):
            quotas += _v1_quotas(root, controllers, rel)
    return round(min(quotas), 3) if quotas else None


def _v2_quotas(root: Path, rel: str) -> list[float]:
    """The quotas in `cpu.max` along a cgroup v2 path."""
    quotas = []
    for folder in _ancestors(root, rel):
        q = _quota_v2(_read(folder / "cpu.max"))
        if q is not None:
            quotas.append(q)
    return quotas


def _v1_quotas(root: Path, controllers: str, rel: str) -> list[float]:
    """The quotas along a cgroup v1 path, under the first mount of the cpu controller that
    holds it."""
    quotas = []
    for mount in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
        folders = _ancestors(mount, rel) if mount.is_dir() else []
        for folder in folders:
            q = _quota_v1(_read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us"))
            if q is not None:
                quotas.append(q)
        if folders:
            break
    return quotas


def usable_cpus(allowed: int | None, quota: float | None) -> int | None:
    """The CPUs the process can keep busy: its affinity, capped by the quota (rounded up)."""
    if quota is None:
        return allowed
    capped = max(1, math.ceil(quota))
    return capped if allowed is None else min(allowed, capped)


def cpu_warnings(
    load: list[float] | None,
    cores: int | None,
    torch_threads: int | None,
    allowed: int | None,
    quota: float | None,
) -> list[str]:
    """Why this run's CPU figures are not to be trusted, if they are not; empty otherwise.

    The load average counts the whole machine's runnable tasks, so it is held against the
    machine's cores (`os.cpu_count()`), not against this process's share of them.
    """
    warnings = []
    if load is not None and cores and load[0] > cores:
        warnings.append(
            f"the machine was loaded beyond its cores at the start (load average "
            f"{load[0]:g} on {cores} cores): other work competed with the checks, "
            "so CPU figures are low and noisy"
        )
    usable = usable_cpus(allowed, quota)
    if torch_threads is not None and usable is not None and torch_threads > usable:
        limit = (
            f"a CPU quota of {quota:g} CPUs"
            if quota is not None and math.ceil(quota) < (allowed or math.inf)
            else f"{allowed} allowed CPUs"
        )
        warnings.append(
            f"torch ran {torch_threads} threads on {limit}: the threads contend "
            f"and CPU figures suffer (OMP_NUM_THREADS={usable} fits)"
        )
    return warnings

"""Estimate the download of a device-narrowed pip-SDK lock against `device-all`, from the real file
sizes recorded in tests/data/replica/packages.toml ([[size]], each with its source in SOURCES.md).

Nothing is downloaded (AMD's index is not reachable from this project's machines): the sizes are
what public reports state for the ROCm 7.14 files, so the result is an estimate.

    .venv/bin/python benchmarks/pipsdk_size.py

Printed: the ROCm part (rocm-sdk-core + rocm-sdk-libraries + the device wheels) for one gfx942
device (the only device wheel whose size a source states exactly) and for all the published
targets (`device-all`), and the same with PyTorch's rocm7.14 torch 2.14.1 and triton-rocm added
(the only torch wheel sized by a source; AMD's own torch is split differently, see below).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "replica" / "packages.toml"


def sizes() -> dict[str, dict[str, Any]]:
    raw = tomllib.loads(DATA.read_text(encoding="utf-8"))
    return {entry["name"]: entry for entry in raw["size"]}


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def main() -> None:
    s = sizes()
    core = s["rocm-sdk-core"]["bytes"]
    libraries = s["rocm-sdk-libraries"]["bytes"]
    gfx942 = s["rocm-sdk-device-gfx942"]["bytes"]
    all_devices = s["rocm-sdk-device-* (all 25 published targets)"]["bytes"]
    torch = s["torch"]["bytes"]
    triton = s["triton-rocm"]["bytes"]
    narrowed = core + libraries + gfx942
    everything = core + libraries + all_devices
    rows = [
        ("ROCm 7.14 SDK, device-gfx942 only", narrowed),
        ("ROCm 7.14 SDK, device-all (25 targets)", everything),
        ("+ torch 2.14.1+rocm7.14 and triton-rocm, device-gfx942", narrowed + torch + triton),
        ("+ torch 2.14.1+rocm7.14 and triton-rocm, device-all", everything + torch + triton),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'lock':<{width}}  {'bytes':>14}  size")
    for label, n in rows:
        print(f"{label:<{width}}  {n:>14,}  {gb(n)}")
    print(
        f"device-all / device-gfx942 (SDK only): {everything / narrowed:.2f}x; "
        f"saved {gb(everything - narrowed)}"
    )
    mean = all_devices / 25
    print(f"mean device wheel: {gb(int(mean))} (gfx942: {gb(gfx942)})")
    note = s["amd-torch-device-gfx1100"]
    print(f"gfx1100 (approximate, {note['version']}): {note['note']}")
    print(
        "sources: tests/data/replica/SOURCES.md "
        f"({', '.join(sorted({e['source'] for e in s.values()}))})"
    )


if __name__ == "__main__":
    main()

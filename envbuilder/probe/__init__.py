"""envbuilder's validation suite: one probe that runs inside every environment.

Standard library and torch only (torch is imported inside the checks, never at import time),
and no other envbuilder module but `envbuilder.core.records` (standard library only: the
probe's options are records declared once), so it runs from a single zipapp file where
envbuilder is not installed. `build_zipapp(dest)` writes that file, byte-for-byte reproducible.

Checks (in turn, in one worker process that a watchdog replaces after a timeout or a crash):
device, topology (peer access, link kinds), latency (kernel launch and synchronisation), matmul,
amp, train (ResNet-50 images/s), collectives, membw (device copy; host link each way and both
ways at once), conformance (the lock's packages, and the release check: torch's build, HIP
version and visible gfx targets against --expect-rocm/--expect-hip/--expect-gfx).
See docs/probe.md for the command line, the report and the fault-injection hook.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from envbuilder.probe.options import CHECK_NAMES
from envbuilder.probe.runner import PROBE_VERSION, SCHEMA_VERSION

__all__ = ["CHECK_NAMES", "PROBE_VERSION", "SCHEMA_VERSION", "build_zipapp"]

#: Fixed timestamp of every zip entry (the earliest a zip can hold): same sources, same bytes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
SHEBANG = b"#!/usr/bin/env python3\n"
_STUB_INIT = b'"""Only the probe of envbuilder (a zipapp made by build_zipapp)."""\n'
_STUB_CORE_INIT = (
    b'"""Only envbuilder.core.records, which the probe declares its records with."""\n'
)
#: The modules of envbuilder outside the probe that it imports (each standard library only).
SHIPPED = ("core/records.py",)
_MAIN = b"import sys\n\nfrom envbuilder.probe.cli import main\n\nsys.exit(main())\n"


def _entries() -> list[tuple[str, bytes]]:
    """(archive name, bytes) of every file in the zipapp, sorted by name."""
    here = Path(__file__).parent
    files = [(f"envbuilder/probe/{p.name}", p.read_bytes()) for p in here.glob("*.py")]
    files += [(f"envbuilder/{name}", (here.parent / name).read_bytes()) for name in SHIPPED]
    files += [
        ("__main__.py", _MAIN),
        ("envbuilder/__init__.py", _STUB_INIT),
        ("envbuilder/core/__init__.py", _STUB_CORE_INIT),
    ]
    return sorted(files)


def build_zipapp(dest: Path) -> Path:
    """Write the probe as one executable zipapp at `dest` and return `dest`.

    Deterministic: sorted entries, fixed timestamps and modes, no compression (zlib builds
    differ between Pythons), so the same probe sources always give the same sha256. Written
    to a temp file and renamed: `dest` is never left half-written.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp: created exclusively (O_EXCL|O_NOFOLLOW) under an unpredictable name
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            raw.write(SHEBANG)
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as zf:
                for name, data in _entries():
                    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                    info.external_attr = 0o644 << 16
                    info.create_system = 3  # unix, wherever it is built
                    zf.writestr(info, data)
        tmp.chmod(0o755)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest

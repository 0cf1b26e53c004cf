"""Helpers shared by the lock and wheel-cache tests (no tests here): tiny real wheels, small
spec files, and a Project rooted in a temp dir with its own wheel cache."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from envbuilder.core.project import Project

FAKE_INDEX_URL = "https://wheels.example.invalid/whl/fake"


def make_wheel(
    folder: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = ()
) -> Path:
    """Write a valid, installable wheel (METADATA, WHEEL, RECORD and one module); return it.
    The bytes depend only on the arguments (fixed zip timestamps)."""
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        f"Tag: {tag}\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / filename
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in files.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), text)
    return out


def write_spec(root: Path, body: str) -> Project:
    """Write `root/environments.toml`; return its Project with a cache under `root/.cache`."""
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "environments.toml"
    spec.write_text(body, encoding="utf-8")
    return Project.from_spec(spec, cache=root / ".cache")


def small_spec(
    mirror: Path, packages: str = '"six==1.15.0", "idna==3.4"', extra_env: str = ""
) -> str:
    """A spec with one env `small` (native target only): packages from the default index plus
    `tinytorch` pinned to the unreachable index `fake`, mirrored by the folder `mirror`."""
    return f"""
[indexes.fake]
url = "{FAKE_INDEX_URL}"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = [{packages}, "tinytorch==1.0+cpu"]
index_pins = {{ tinytorch = "fake" }}
targets = ["native"]
{extra_env}
"""

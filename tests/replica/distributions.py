"""Tiny stand-in distributions: valid wheels (METADATA, WHEEL, RECORD, one module) and the one
sdist the replica needs (`rocm`, which AMD publishes as an sdist only).

Every file's bytes depend only on its arguments (fixed zip and tar timestamps), so hashes are
stable from run to run. The payload is a few bytes: these are test data that carry the real
names, versions, tags and dependency metadata, never the real content.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
#: Stands for the GPU target that the machine building the `rocm` sdist picks (a valid name part,
#: so requirements that carry it still parse).
BUILD_HOST_TARGET = "BUILDHOSTTARGET"
#: The `rocm` sdist's build requirement, as the real one declares it (SOURCES.md S1).
BUILD_REQUIRES = "setuptools>=70.2.0"
#: The marker every stand-in's module carries, so an installed stand-in is recognisable.
STANDIN_MARKER = "ENVBUILDER_TEST_STANDIN = True"


def dist_filename_stem(name: str) -> str:
    """The distribution part of a wheel or sdist file name (PEP 427 / 625): `rocm-sdk-core` ->
    `rocm_sdk_core`."""
    return name.replace("-", "_").replace(".", "_").lower()


def requirement_lines(requires: Sequence[str], extras: Mapping[str, Sequence[str]]) -> list[str]:
    """`Requires-Dist` / `Provides-Extra` header lines for METADATA or PKG-INFO. A requirement of
    an extra keeps its own marker: `X; m` in extra `e` becomes `X; (m) and extra == "e"`."""
    lines = [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in extras.items():
        lines.append(f"Provides-Extra: {extra}")
        for text in reqs:
            req = Requirement(text)
            marker = f'extra == "{extra}"'
            if req.marker is not None:
                marker = f"({req.marker}) and {marker}"
            req.marker = None
            lines.append(f"Requires-Dist: {req}; {marker}")
    return lines


def metadata_text(
    name: str,
    version: str,
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
    summary: str = "envbuilder test stand-in",
) -> str:
    """A core-metadata (2.1) document with the given dependencies."""
    head = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    return "\n".join(head + requirement_lines(requires, extras or {})) + "\n"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel_bytes(name: str, version: str, tag: str, metadata: str) -> bytes:
    """The bytes of a valid wheel: one module, METADATA, WHEEL (Root-Is-Purelib false when the
    tag names a platform) and RECORD."""
    stem = dist_filename_stem(name)
    info = f"{stem}-{version}.dist-info"
    purelib = tag.endswith("-any")
    files: dict[str, bytes] = {
        f"_{stem}_standin.py": f"{STANDIN_MARKER}\nVERSION = {version!r}\n".encode(),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: envbuilder-test-replica\n"
            f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n"
        ).encode(),
    }
    record = [_record_line(path, data) for path, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, ZIP_EPOCH), data)
    return buffer.getvalue()


def wheel_filename(name: str, version: str, tag: str) -> str:
    return f"{dist_filename_stem(name)}-{version}-{tag}.whl"


def write_wheel(
    folder: Path,
    name: str,
    version: str,
    tag: str,
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Write one stand-in wheel into `folder`; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / wheel_filename(name, version, tag)
    out.write_bytes(wheel_bytes(name, version, tag, metadata_text(name, version, requires, extras)))
    return out


# The in-tree PEP 517 backend of the `rocm` stand-in sdist. It needs nothing but the standard
# library; the sdist still declares the real one's build requirement (BUILD_REQUIRES), so a
# build installs setuptools>=70.2.0 into its isolated environment first, from an index or,
# offline, from the wheelhouse (the stand-in setuptools wheel of the replica's PyPI). Like the
# real setup.py it decides the generic `device` extra on the machine that builds it:
# ROCM_SDK_TARGET_FAMILY, else DEFAULT_TARGET_FAMILY (the stand-in never runs offload-arch,
# which the real one would, to probe the GPUs of the build host).
_BACKEND = '''\
"""PEP 517 backend of an envbuilder test stand-in (standard library only)."""
import base64, hashlib, io, os, zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEM = (HERE / "STEM").read_text().strip()
VERSION = (HERE / "VERSION").read_text().strip()
DEFAULT_TARGET_FAMILY = (HERE / "DEFAULT_TARGET_FAMILY").read_text().strip()
INFO = STEM + "-" + VERSION + ".dist-info"


def _metadata():
    text = (HERE / "METADATA.in").read_text()
    target = os.environ.get("ROCM_SDK_TARGET_FAMILY") or DEFAULT_TARGET_FAMILY
    return text.replace("BUILDHOSTTARGET", target)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = Path(metadata_directory) / INFO
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(_metadata())
    return INFO


def _line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return path + ",sha256=" + digest + "," + str(len(data))


# The real `rocm` package's `rocm-sdk path --root` expands rocm-sdk-devel's tarball into
# site-packages/_rocm_sdk_devel on first use and answers that folder (TheRock therock-7.14,
# rocm_sdk/__main__.py _do_path -> _devel.get_devel_root); the stand-in makes the same folder,
# empty, and answers it, so that a build that asks (the images' ROCM_PATH link, a venv's
# activation) runs for real.
ROCM_SDK_MAIN = b"""import sys
from pathlib import Path


def main():
    if sys.argv[1:] != ["path", "--root"]:
        sys.exit("envbuilder test stand-in of rocm-sdk: only `rocm-sdk path --root`")
    root = Path(__file__).resolve().parent.parent / "_rocm_sdk_devel"
    root.mkdir(exist_ok=True)
    print(root)
"""


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {
        "_" + STEM + "_standin.py": b"ENVBUILDER_TEST_STANDIN = True\\n",
        INFO + "/METADATA": _metadata().encode(),
        INFO + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: envbuilder-test-replica\\n"
                         b"Root-Is-Purelib: true\\nTag: py3-none-any\\n",
    }
    if STEM == "rocm":  # the real one ships the rocm-sdk command (TheRock rocm_sdk)
        files["rocm_sdk/__init__.py"] = b""
        files["rocm_sdk/__main__.py"] = ROCM_SDK_MAIN
        files[INFO + "/entry_points.txt"] = (
            b"[console_scripts]\\nrocm-sdk = rocm_sdk.__main__:main\\n"
        )
    record = [_line(p, d) for p, d in files.items()] + [INFO + "/RECORD,,"]
    files[INFO + "/RECORD"] = ("\\n".join(record) + "\\n").encode()
    name = STEM + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
    return name
'''


def sdist_bytes(
    name: str,
    version: str,
    requires: Sequence[str],
    extras: Mapping[str, Sequence[str]],
    default_target_family: str,
) -> bytes:
    """A `.tar.gz` sdist whose dependency metadata is dynamic (PKG-INFO says so, as setuptools
    does for a setup.py that computes install_requires), so a resolver must build it. In
    `extras`, the text BUILD_HOST_TARGET stands for the target chosen on the build host."""
    stem = dist_filename_stem(name)
    root = f"{stem}-{version}"
    pkg_info = (
        "\n".join(
            [
                "Metadata-Version: 2.2",
                f"Name: {name}",
                f"Version: {version}",
                "Summary: envbuilder test stand-in (sdist)",
                "Dynamic: Requires-Dist",
                "Dynamic: Provides-Extra",
            ]
        )
        + "\n"
    )
    files = {
        "PKG-INFO": pkg_info,
        # The real sdist's build requirement (TheRock's rocm/pyproject.toml, SOURCES.md S1), so
        # an installer must find setuptools>=70.2.0 to build it, as for the real one; the
        # backend itself stays in-tree and needs nothing of it.
        "pyproject.toml": f"[build-system]\nrequires = [{BUILD_REQUIRES!r}]\n"
        'build-backend = "standin_backend"\nbackend-path = ["."]\n',
        "standin_backend.py": _BACKEND,
        "STEM": stem + "\n",
        "VERSION": version + "\n",
        "DEFAULT_TARGET_FAMILY": default_target_family + "\n",
        "METADATA.in": metadata_text(name, version, requires, extras),
    }
    buffer = io.BytesIO()
    # mtime 0 and a fixed gzip header: the bytes depend only on the arguments.
    with tarfile.open(
        fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=9
    ) as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{path}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return _fixed_gzip_header(buffer.getvalue())


def _fixed_gzip_header(data: bytes) -> bytes:
    """Zero the gzip header's mtime (bytes 4-7), which tarfile sets to the current time."""
    return data[:4] + b"\0\0\0\0" + data[8:]


def sdist_filename(name: str, version: str) -> str:
    return f"{dist_filename_stem(name)}-{version}.tar.gz"


def write_sdist(
    folder: Path,
    name: str,
    version: str,
    requires: Sequence[str],
    extras: Mapping[str, Sequence[str]],
    default_target_family: str,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / sdist_filename(name, version)
    out.write_bytes(sdist_bytes(name, version, requires, extras, default_target_family))
    return out

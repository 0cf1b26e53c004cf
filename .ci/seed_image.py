#!/usr/bin/env python3
"""Turn a debootstrap tree into a reproducible image and push it to a local registry.

`docker import` stamps `created` with the current time and docker's push recompresses layers,
so seeding `debian:bookworm-slim` twice gave two digests, and a lock pinned on one machine
could not be built on the next. This script makes the digest a function of the installed
package versions only:

  1. normalize the tree in place: remove or fix every file that records when or where
     debootstrap ran (logs, *-old backups, ldconfig's aux-cache, shadow's last-change days,
     device nodes);
  2. write the layer as a deterministic tar (sorted names, one fixed mtime, numeric owners,
     no user/group names, GNU format: no pax timestamps) and gzip it with mtime 0;
  3. write a fixed image config (fixed `created`, Env PATH, Cmd ["bash"]) and a schema-2
     manifest, and upload the three blobs with the registry's HTTP API, so that the repository
     digest is the sha256 of bytes this script wrote (no docker push, no recompression).

The image documents, digests and the gzip come from envbuilder.image.oci.blobs (stdlib only),
the same code envbuilder writes its reproducible images with; this script adds the seed's own
normalisation and tree walk. Runs as root (the tree is root-owned) with the system Python, no
envbuilder install needed. Prints the manifest digest on stdout.

  seed_image.py build ROOTFS --out DIR    # normalize ROOTFS; write layer.tar.gz, config.json,
                                          # manifest.json to DIR; print the manifest digest
  seed_image.py push DIR --registry 127.0.0.1:5000 --name library/debian --tag bookworm-slim
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# The checkout's envbuilder package (its ociimage.blobs module needs only the stdlib).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from envbuilder.image.oci.blobs import (
    MANIFEST_TYPE,
    Blob,
    canonical_json,
    file_blob,
    gzip_file,
    image_config,
    registry_manifest,
)

#: Every timestamp in the image: 2025-01-01T00:00:00Z. A constant, not the build time and not
#: the environment's SOURCE_DATE_EPOCH, so that every machine and every day agree.
SOURCE_DATE_EPOCH = 1735689600
CREATED = "2025-01-01T00:00:00Z"
ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CREATED_BY = "debootstrap --variant=minbase bookworm (envbuilder CI seed, .ci/seed_image.py)"

#: Files that only record the run (time, inode numbers, the previous state): removed.
VOLATILE = (
    "var/log/dpkg.log",
    "var/log/bootstrap.log",
    "var/log/alternatives.log",
    "var/cache/ldconfig/aux-cache",
    "var/cache/debconf/config.dat-old",
    "var/cache/debconf/templates.dat-old",
    "var/cache/debconf/passwords.dat-old",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/available-old",
    "var/lib/dpkg/diversions-old",
    "var/lib/dpkg/statoverride-old",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
    "run/mount/utab",
    "etc/.pwd.lock",
)
#: Login records: kept, emptied (like the official image).
TRUNCATE = ("var/log/lastlog", "var/log/faillog", "var/log/wtmp", "var/log/btmp")
#: The container runtime provides these; their contents (device nodes) are dropped.
RUNTIME_DIRS = ("dev", "proc", "sys")
#: /etc/shadow field 3 is "days since 1970 of the last password change": set to the epoch's day.
SHADOW_FILES = ("etc/shadow", "etc/shadow-")


def normalize(root: Path) -> None:
    """Remove or fix, in place, every file of `root` that depends on when debootstrap ran."""
    for rel in VOLATILE:
        path = root / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
    for rel in TRUNCATE:
        path = root / rel
        if path.is_file():
            path.write_bytes(b"")
    for rel in RUNTIME_DIRS:
        _empty_folder(root / rel)
    _fix_shadow_files(root)


def _empty_folder(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def _fix_shadow_files(root: Path) -> None:
    day = str(SOURCE_DATE_EPOCH // 86400)
    for rel in SHADOW_FILES:
        path = root / rel
        if path.is_file():
            lines = path.read_text().splitlines(keepends=True)
            path.write_text("".join(_fix_shadow_line(line, day) for line in lines))


def _fix_shadow_line(line: str, day: str) -> str:
    fields = line.split(":")
    if len(fields) > 2 and fields[2]:
        fields[2] = day
    return ":".join(fields)


def _walk(root: Path) -> list[Path]:
    """Every path under `root` (not `root` itself), depth first, names sorted bytewise."""
    out: list[Path] = []

    def visit(folder: Path) -> None:
        for path in sorted(folder.iterdir(), key=lambda p: os.fsencode(p.name)):
            out.append(path)
            if path.is_dir() and not path.is_symlink():
                visit(path)

    visit(root)
    return out


def write_layer(root: Path, dest: Path) -> None:
    """Write `root` as an uncompressed, byte-for-byte reproducible tar to `dest`."""
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        for path in _walk(root):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                raise SystemExit(f"seed_image: unexpected file type in the tree: {path}")
            info.mtime = SOURCE_DATE_EPOCH
            info.uname = info.gname = ""
            info.devmajor = info.devminor = 0
            if info.isreg():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def build_image(root: Path, out: Path) -> tuple[Blob, Blob, Blob]:
    """Write layer.tar.gz, config.json and manifest.json for the (normalized) tree `root` into
    `out`; return their blobs (layer, config, manifest). Same tree, same bytes."""
    tar_path = out / "layer.tar"
    write_layer(root, tar_path)
    diff_id = file_blob(tar_path).digest
    # Level 9: zlib's output depends only on its version (1.2.13 throughout Debian bookworm).
    gzip_file(tar_path, out / "layer.tar.gz", level=9)
    tar_path.unlink()
    layer = file_blob(out / "layer.tar.gz")
    config_doc = image_config(
        created=CREATED,
        config={"Env": [ENV_PATH], "Cmd": ["bash"]},
        diff_ids=[diff_id],
        history=[{"created": CREATED, "created_by": CREATED_BY}],
    )
    (out / "config.json").write_bytes(canonical_json(config_doc))
    config = file_blob(out / "config.json")
    (out / "manifest.json").write_bytes(canonical_json(registry_manifest(config, [layer])))
    return layer, config, file_blob(out / "manifest.json")


# --- registry HTTP API (no auth: the local open registry) ---------------------------------------


def _request(
    method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            resp.read()
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        if method == "HEAD" and exc.code == 404:
            return 404, {}
        body = exc.read().decode(errors="replace")[:500]
        raise SystemExit(f"seed_image: {method} {url} -> HTTP {exc.code}: {body}") from None


def push_blob(base: str, name: str, blob: Blob) -> None:
    """Upload `blob` to repository `name` unless the registry has it already."""
    status, _ = _request("HEAD", f"{base}/v2/{name}/blobs/{blob.digest}")
    if status == 200:
        return
    _status, headers = _request("POST", f"{base}/v2/{name}/blobs/uploads/")
    location = urllib.parse.urljoin(f"{base}/", headers["Location"])
    sep = "&" if "?" in location else "?"
    _request(
        "PUT",
        f"{location}{sep}digest={urllib.parse.quote(blob.digest)}",
        data=blob.path.read_bytes(),
        headers={"Content-Type": "application/octet-stream", "Content-Length": str(blob.size)},
    )


def push_image(registry: str, name: str, tag: str, blobs: tuple[Blob, Blob, Blob]) -> str:
    """Push layer, config and manifest as `registry/name:tag`; return the registry's digest."""
    base = f"http://{registry}"
    layer, config, manifest = blobs
    push_blob(base, name, layer)
    push_blob(base, name, config)
    _status, headers = _request(
        "PUT",
        f"{base}/v2/{name}/manifests/{tag}",
        data=manifest.path.read_bytes(),
        headers={"Content-Type": MANIFEST_TYPE},
    )
    served = {k.lower(): v for k, v in headers.items()}.get("docker-content-digest", "")
    if served != manifest.digest:
        raise SystemExit(
            f"seed_image: the registry stored {served or 'no digest'}, expected {manifest.digest}"
        )
    return manifest.digest


def _load_blobs(folder: Path) -> tuple[Blob, Blob, Blob]:
    names = ("layer.tar.gz", "config.json", "manifest.json")
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise SystemExit(f"seed_image: {folder} lacks {', '.join(missing)}; run `build` first")
    layer, config, manifest = (file_blob(folder / n) for n in names)
    return layer, config, manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="normalize ROOTFS in place and write the image files")
    build.add_argument("rootfs", type=Path, help="debootstrap tree (normalized in place)")
    build.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for layer.tar.gz, config.json, manifest.json",
    )
    push = sub.add_parser("push", help="upload the files `build` wrote to a registry")
    push.add_argument("folder", type=Path)
    push.add_argument("--registry", required=True, help="host:port, plain HTTP, no auth")
    push.add_argument("--name", default="library/debian", help="repository (library/debian)")
    push.add_argument("--tag", default="bookworm-slim")
    args = parser.parse_args(argv)
    if args.command == "build":
        args.out.mkdir(parents=True, exist_ok=True)
        normalize(args.rootfs)
        print(build_image(args.rootfs, args.out)[2].digest)
        return 0
    if not re.fullmatch(r"[a-z0-9._/-]+", args.name):
        parser.error(f"bad repository name {args.name!r}")
    print(push_image(args.registry, args.name, args.tag, _load_blobs(args.folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

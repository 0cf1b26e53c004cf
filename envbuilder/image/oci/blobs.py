"""Image documents and blobs, written so that the same content always gives the same bytes.

Stdlib only: `.ci/seed_image.py` (run by the system Python, without envbuilder's dependencies)
writes the CI seed image with these functions, and envbuilder writes the images it builds with
them. Every JSON document is canonical (sorted keys, no spaces), every gzip has mtime 0 and no
file name, every time is an RFC 3339 UTC second.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Docker's image manifest (schema 2), config and gzip'd layer media types.
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
#: Fixed gzip level of the layers envbuilder compresses (part of a blob's identity).
GZIP_LEVEL = 9
_READ = 1 << 20


@dataclass(frozen=True)
class Blob:
    """A content-addressed file: `sha256:<hex>` digest, size in bytes, where it lies."""

    digest: str
    size: int
    path: Path


def digest_bytes(data: bytes) -> str:
    """`sha256:<hex>` of `data`."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def file_blob(path: Path) -> Blob:
    """The Blob of the file at `path` (read in chunks)."""
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_READ), b""):
            sha.update(chunk)
    return Blob(f"sha256:{sha.hexdigest()}", path.stat().st_size, path)


def canonical_json(doc: object) -> bytes:
    """`doc` as canonical JSON bytes: sorted keys, no whitespace, UTF-8 escaped as ASCII."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def gzip_file(src: Path, dest: Path, level: int = GZIP_LEVEL) -> None:
    """gzip `src` into `dest` with mtime 0 and no file name in the header. zlib's output depends
    only on its version and the level."""
    with (
        src.open("rb") as fin,
        dest.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=raw, mtime=0) as fout,
    ):
        shutil.copyfileobj(fin, fout, _READ)


def rfc3339(epoch: int) -> str:
    """`epoch` (seconds) as `YYYY-MM-DDTHH:MM:SSZ`, the form image configs record times in."""
    when = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(
    *,
    created: str,
    config: Mapping[str, Any],
    diff_ids: Sequence[str],
    history: Sequence[Mapping[str, Any]],
    architecture: str = "amd64",
    os: str = "linux",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An image config document (OCI image spec / Docker image v1.2): `created`, the runtime
    `config` (Env, Cmd, User, Labels, ...), the layers by `diff_ids` (sha256 of each
    uncompressed layer tar) and their `history`. `extra` adds keys such as `variant`."""
    doc: dict[str, Any] = {
        "architecture": architecture,
        "os": os,
        "created": created,
        "config": dict(config),
        "history": [dict(h) for h in history],
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }
    doc.update(extra or {})
    return doc


def registry_manifest(config: Blob, layers: Sequence[Blob]) -> dict[str, Any]:
    """The Docker schema-2 manifest naming `config` and the gzip'd `layers`."""
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "size": config.size, "digest": config.digest},
        "layers": [
            {"mediaType": LAYER_TYPE, "size": layer.size, "digest": layer.digest}
            for layer in layers
        ],
    }


def archive_manifest(
    config_name: str, repo_tags: Sequence[str], layer_paths: Sequence[str]
) -> list[dict[str, Any]]:
    """The `manifest.json` of a docker-archive (what `docker load` reads): one image."""
    return [{"Config": config_name, "RepoTags": list(repo_tags), "Layers": list(layer_paths)}]

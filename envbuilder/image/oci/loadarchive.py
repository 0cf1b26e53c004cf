"""The archive envbuilder streams into `docker load`: one image, readable by every engine.

    image_manifest(config, layers) -> bytes      the OCI manifest envbuilder writes
    load_stream(config, manifest, layers)        the archive, as a stream of bytes

The archive is an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/<hex>`) that also
carries a docker-archive `manifest.json` naming the same blobs, as Docker 25+'s own `docker save`
writes it:

* the classic image store (Docker 20.10 to 28, podman) reads `manifest.json`: the image id is
  the config's digest; a layer the engine already has is not read, so the base image's layers
  are named but need not be sent;
* the containerd image store (Docker 29's default, Docker Desktop 4.34+) reads `index.json` and
  keeps envbuilder's manifest as it is: the image id is that manifest's digest. The store keeps
  every blob the manifest names, so there the base layers are sent too.

Every layer is an uncompressed tar (`application/vnd.oci.image.layer.v1.tar`): its digest is its
diff_id, so the manifest is a function of the config and the layers' sizes only, never of a
compressor's version. Both digests are therefore predictable from the lock.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuilder.image.oci.blobs import canonical_json, digest_bytes
from envbuilder.image.oci.saved import SavedImage
from envbuilder.image.tar import CHUNK

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
_LAYOUT = canonical_json({"imageLayoutVersion": "1.0.0"})


@dataclass(frozen=True)
class LayerBlob:
    """One layer of the written image: its diff_id (= its digest: stored uncompressed), its
    size, and its file (None: a base layer not sent, which the engine has)."""

    diff_id: str
    size: int
    path: Path | None


def saved_layers(saved: SavedImage) -> list[LayerBlob]:
    """Every layer of an image read by `read_saved`, with its file where it was kept."""
    diff_ids = list((saved.config.get("rootfs") or {}).get("diff_ids") or [])
    return [LayerBlob(d, saved.sizes[i], saved.layers.get(i)) for i, d in enumerate(diff_ids)]


def image_manifest(config: bytes, layers: Sequence[LayerBlob]) -> bytes:
    """The canonical OCI image manifest of `config` and the uncompressed `layers`."""
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest_bytes(config), "size": len(config)},
        "layers": [
            {"mediaType": OCI_LAYER, "digest": layer.diff_id, "size": layer.size}
            for layer in layers
        ],
    }
    return canonical_json(doc)


def _blob_path(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


def _index(manifest: bytes) -> bytes:
    entry = {"mediaType": OCI_MANIFEST, "digest": digest_bytes(manifest), "size": len(manifest)}
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]})


def _docker_manifest(config: bytes, layers: Sequence[LayerBlob]) -> bytes:
    entry = {
        "Config": _blob_path(digest_bytes(config)),
        "RepoTags": None,
        "Layers": [_blob_path(layer.diff_id) for layer in layers],
    }
    return canonical_json([entry])


def load_stream(config: bytes, manifest: bytes, layers: Sequence[LayerBlob]) -> Iterator[bytes]:
    """The archive as a stream of bytes (POSIX tar): the blobs, then the layout's documents."""
    yield _member(_blob_path(digest_bytes(config)), config)
    sent: set[str] = set()
    for layer in layers:
        if layer.path is None or layer.diff_id in sent:
            continue
        sent.add(layer.diff_id)
        yield from _file_member(_blob_path(layer.diff_id), layer.path)
    yield _member(_blob_path(digest_bytes(manifest)), manifest)
    yield _member("oci-layout", _LAYOUT)
    yield _member("index.json", _index(manifest))
    yield _member("manifest.json", _docker_manifest(config, layers))
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _member(name: str, data: bytes) -> bytes:
    return _header(name, len(data)) + data + _padding(len(data))


def _file_member(name: str, path: Path) -> Iterator[bytes]:
    size = path.stat().st_size
    yield _header(name, size)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk
    yield _padding(size)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)

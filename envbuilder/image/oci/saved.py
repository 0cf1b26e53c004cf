"""Read a `docker save` stream, whichever layout the engine wrote.

    read_saved(stream, keep, workdir) -> SavedImage

Three layouts reach here:

* **docker-archive** (Docker up to 24, podman's compat API): `manifest.json`, the config as
  `<hex>.json`, each layer as `<id>/layer.tar` (a repeated layer as a symlink to the first);
* **OCI layout + manifest.json** (Docker 25 and newer, moby/moby#44598): `oci-layout`,
  `index.json`, every blob under `blobs/sha256/<hex>`, and a `manifest.json` whose paths name
  those blobs; with the classic store the layers are plain tars, with the containerd store they
  are stored as pulled or built (gzip-compressed);
* **OCI layout only** (no `manifest.json`): the image is found through `index.json`, following
  nested indexes (several platforms, attestations) to the manifest of this machine's platform.

Every member that is not a small JSON document is a candidate layer: it is spooled into
`workdir` decompressed (gzip) while its sha256 (the diff_id) is computed, and dropped at once
when `keep` refuses that diff_id (the base image's layers, which the engine already has). A
layer is then matched to the config's `rootfs.diff_ids` by the manifest's paths, and its
diff_id is checked against the config's: a stream that does not hold what its own manifest
says is an EngineError, not a wrong image.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import tarfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envbuilder.core.errors import EngineError
from envbuilder.image.tar import CHUNK

#: Members of a save stream smaller than this are read into memory (configs, manifests,
#: indexes: a few KB; a tiny layer also lands here and is spooled from memory).
SMALL = 4 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
#: The annotation Docker (buildx) puts on an attestation manifest in an index.
_REFERENCE_TYPE = "vnd.docker.reference.type"


@dataclass(frozen=True)
class Spooled:
    """One candidate layer of the stream: its diff_id (sha256 of the uncompressed tar), its
    size uncompressed, and the spooled file (None: `keep` refused it)."""

    diff_id: str
    size: int
    path: Path | None


@dataclass
class SavedImage:
    """What `docker save` gave: the config document, the diff_ids' uncompressed sizes, and
    the kept layer tars by their index in `rootfs.diff_ids`."""

    config: dict[str, Any]
    config_bytes: bytes
    layers: dict[int, Path]
    sizes: list[int]


@dataclass
class _Stream:
    """What one pass over the stream found."""

    small: dict[str, bytes] = field(default_factory=dict)
    spooled: dict[str, Spooled] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        """The member a name leads to through links (a link to a link, as moby writes)."""
        seen: set[str] = set()
        while name in self.links and name not in seen:
            seen.add(name)
            name = self.links[name]
        return name


def read_saved(
    stream: IO[bytes], keep: Callable[[str], bool], workdir: Path, what: str
) -> SavedImage:
    """Read the save stream `stream` (of the image `what`, for messages): the config and, in
    `workdir`, the layers whose diff_id `keep` accepts. EngineError when the stream is not an
    image archive envbuilder can read."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            found = _read_members(tar, keep, workdir)
    except (tarfile.TarError, zlib.error, EOFError) as exc:
        raise EngineError(f"`docker save {what}` gave an unreadable archive: {exc}") from None
    config_name, layer_names = _image_entry(found, what)
    config_bytes = found.small[config_name]
    config = _json(config_bytes, f"`docker save {what}`: the config {config_name}")
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    if len(diff_ids) != len(layer_names):
        raise EngineError(
            f"`docker save {what}`: the manifest names {len(layer_names)} layers, the config "
            f"{len(diff_ids)}"
        )
    layers, sizes = _match_layers(found, layer_names, diff_ids, keep, workdir, what)
    return SavedImage(config, config_bytes, layers, sizes)


def _read_members(tar: tarfile.TarFile, keep: Callable[[str], bool], workdir: Path) -> _Stream:
    found = _Stream()
    first: dict[str, Spooled] = {}  # diff_id -> the first file spooled for it
    for member in tar:
        name = _clean(member.name)
        if member.issym():
            found.links[name] = _clean(f"{name.rsplit('/', 1)[0]}/{member.linkname}")
        elif member.islnk():  # hard links name a path from the archive's root
            found.links[name] = _clean(member.linkname)
        elif member.isfile():
            _read_file(tar, member, name, found, first, keep, workdir)
    return found


def _read_file(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    name: str,
    found: _Stream,
    first: dict[str, Spooled],
    keep: Callable[[str], bool],
    workdir: Path,
) -> None:
    handle = tar.extractfile(member)
    if handle is None:
        return
    if member.size < SMALL:  # a JSON document, or a tiny layer spooled when it is named
        found.small[name] = handle.read()
        return
    found.spooled[name] = _keep_or_drop(_spool(handle, _spool_path(found, workdir)), first, keep)


def _spool_path(found: _Stream, workdir: Path) -> Path:
    return workdir / f"saved-{len(found.spooled)}.tar"


def _keep_or_drop(
    spooled: Spooled, first: dict[str, Spooled], keep: Callable[[str], bool]
) -> Spooled:
    """`spooled`, or its file dropped: refused by `keep`, or the same layer spooled before."""
    if spooled.path is None:
        return spooled
    if not keep(spooled.diff_id) or spooled.diff_id in first:
        spooled.path.unlink()
        return first.get(spooled.diff_id, Spooled(spooled.diff_id, spooled.size, None))
    first[spooled.diff_id] = spooled
    return spooled


def _spool(source: IO[bytes], path: Path) -> Spooled:
    """Copy one layer into `path`, decompressed when it is gzip; its diff_id and size."""
    head = source.read(CHUNK)
    if head.startswith(_ZSTD_MAGIC):
        raise EngineError(
            "the engine saved a zstd-compressed layer, which envbuilder cannot read yet; "
            "rebuild without zstd compression (the default)"
        )
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if head.startswith(_GZIP_MAGIC) else None
    sha = hashlib.sha256()
    size = 0
    with path.open("wb") as out:
        chunk = head
        while chunk:
            data = inflate.decompress(chunk) if inflate is not None else chunk
            sha.update(data)
            size += len(data)
            out.write(data)
            chunk = source.read(CHUNK)
        if inflate is not None:
            tail = inflate.flush()
            sha.update(tail)
            size += len(tail)
            out.write(tail)
    return Spooled(f"sha256:{sha.hexdigest()}", size, path)


def _clean(name: str) -> str:
    parts: list[str] = []
    for part in name.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise EngineError(f"{what} is not JSON") from None


# ----------------------------------------------------------------------------- which image


def _image_entry(found: _Stream, what: str) -> tuple[str, list[str]]:
    """(config member, layer members) of the one image in the stream: from `manifest.json`
    when there is one, else from `index.json`."""
    if "manifest.json" in found.small:
        entries = _json(found.small["manifest.json"], f"`docker save {what}`: manifest.json")
        if not isinstance(entries, list) or len(entries) != 1:
            raise EngineError(f"`docker save {what}` gave no single-image manifest.json")
        entry = entries[0]
        config = _clean(str(entry.get("Config", "")))
        if config not in found.small:
            raise EngineError(f"`docker save {what}` lacks its config {config}")
        return config, [_clean(str(name)) for name in entry.get("Layers") or []]
    if "index.json" in found.small:
        manifest = _manifest_from_index(found, "index.json", what)
        config = _blob_name(manifest.get("config") or {})
        if config not in found.small:
            raise EngineError(f"`docker save {what}` lacks its config {config}")
        return config, [_blob_name(layer) for layer in manifest.get("layers") or []]
    raise EngineError(f"`docker save {what}` gave neither manifest.json nor index.json")


def _blob_name(descriptor: Mapping[str, Any]) -> str:
    algorithm, _, hexdigest = str(descriptor.get("digest", "")).partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _manifest_from_index(found: _Stream, name: str, what: str, depth: int = 0) -> dict[str, Any]:
    """The image manifest an index leads to: this machine's platform (or the only image),
    attestations left out, nested indexes followed."""
    index = _json(found.small.get(name, b"{}"), f"`docker save {what}`: {name}")
    candidates = [d for d in index.get("manifests") or [] if _is_image(d)]
    chosen = _for_this_platform(candidates)
    if chosen is None or depth > 8:
        raise EngineError(f"`docker save {what}`: {name} names no single image for this platform")
    blob = _blob_name(chosen)
    if chosen.get("mediaType") in _INDEX_TYPES:
        return _manifest_from_index(found, blob, what, depth + 1)
    manifest = _json(found.small.get(blob, b"{}"), f"`docker save {what}`: {blob}")
    if not isinstance(manifest, dict) or "config" not in manifest:
        raise EngineError(f"`docker save {what}` lacks the manifest {blob}")
    return manifest


def _is_image(descriptor: Mapping[str, Any]) -> bool:
    annotations = descriptor.get("annotations") or {}
    plat = descriptor.get("platform") or {}
    return (
        descriptor.get("mediaType") in (*_INDEX_TYPES, *_MANIFEST_TYPES)
        and _REFERENCE_TYPE not in annotations
        and plat.get("os") != "unknown"
    )


def _for_this_platform(candidates: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    if len(candidates) == 1:
        return candidates[0]
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    matching = [
        d
        for d in candidates
        if (d.get("platform") or {}).get("os") == "linux"
        and (d.get("platform") or {}).get("architecture") == arch
    ]
    return matching[0] if len(matching) == 1 else None


# ----------------------------------------------------------------------------- the layers


def _match_layers(
    found: _Stream,
    names: Sequence[str],
    diff_ids: Sequence[str],
    keep: Callable[[str], bool],
    workdir: Path,
    what: str,
) -> tuple[dict[int, Path], list[int]]:
    """The kept layers by index, and every layer's uncompressed size (0 when the stream left a
    layer out, as podman and a classic engine may for layers it knows the reader has)."""
    layers: dict[int, Path] = {}
    sizes: list[int] = []
    first = {s.diff_id: s for s in found.spooled.values() if s.path is not None}
    for index, (name, diff_id) in enumerate(zip(names, diff_ids, strict=True)):
        spooled = _named_layer(found, name, first, keep, workdir)
        if spooled is not None and spooled.diff_id != diff_id:
            raise EngineError(
                f"`docker save {what}`: the layer {name} is {spooled.diff_id}, but the config "
                f"says {diff_id}"
            )
        sizes.append(spooled.size if spooled is not None else 0)
        if not keep(diff_id):
            continue
        if spooled is None or spooled.path is None or not spooled.path.exists():
            raise EngineError(f"`docker save {what}` lacks the layer {diff_id}")
        path = spooled.path
        if path in layers.values():  # the same layer twice (empty steps): normalised apart
            path = workdir / f"saved-copy-{index}.tar"
            shutil.copyfile(spooled.path, path)
        layers[index] = path
    return layers, sizes


def _named_layer(
    found: _Stream,
    name: str,
    first: dict[str, Spooled],
    keep: Callable[[str], bool],
    workdir: Path,
) -> Spooled | None:
    """The layer the manifest names `name`: spooled already, or a small member spooled now."""
    member = found.resolve(name)
    if member not in found.spooled and member in found.small:
        spooled = _spool(io.BytesIO(found.small[member]), _spool_path(found, workdir))
        found.spooled[member] = _keep_or_drop(spooled, first, keep)
    return found.spooled.get(member)

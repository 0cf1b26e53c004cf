"""The engine side: turn the image the engine built into the image the lock predicts.

    write_image(client, engine_image, base=..., source_date_epoch=..., workdir=...)

1. `docker save` the engine's image (streamed; each layer tar spooled to `workdir`, the base
   image's layers recognised by their diff_id and not kept);
2. normalise every layer above the base (envbuilder.image.oci.layers) and make the config
   deterministic (envbuilder.image.oci.config);
3. stream a docker-archive (config, manifest, the normalised layers; the base layers are left
   out: the engine has them, since it just built on them) into `docker load`;
4. check that the engine's id of the loaded image is the sha256 of the config written: that id
   is the image's digest, a function of the lock and the base image's digest only.

Nothing here tags anything: the caller moves its tag to the returned id.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envbuilder.core.errors import BuildError, EngineError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image.oci.blobs import archive_manifest, canonical_json, digest_bytes, rfc3339
from envbuilder.image.oci.config import deterministic_config
from envbuilder.image.oci.layers import (
    ReadLayer,
    WrittenLayer,
    keep_pyc_heads,
    read_layer,
    write_layer,
)
from envbuilder.image.tar import CHUNK, IterStream

#: Version of what this package writes: bump it whenever the same engine image would give other
#: bytes (a normalisation rule, the tar layout, the config's keys), so that a recorded digest
#: from an older envbuilder is not mistaken for a prediction of this one.
REPRO_FORMAT = "1"
#: Label of every written image: the REPRO_FORMAT that wrote it.
REPRO_LABEL = "org.envbuilder.repro-format"
#: Members of a `docker save` stream other than layer tars are small JSON files.
_SMALL = 64 << 20


@dataclass(frozen=True)
class LayerSummary:
    """One layer above the base in the written image."""

    index: int  # position in the image's layers (0 = the base's first)
    diff_id: str
    created_by: str  # the Dockerfile step, from the history
    size: int  # bytes of the normalised tar
    entries: int
    dropped: int  # build-noise members left out
    changed: int  # members whose content or header was rewritten


@dataclass(frozen=True)
class WrittenImage:
    """The image envbuilder wrote: its id (= config digest), the config bytes, the layers."""

    image_id: str
    config: bytes
    base_layers: int
    layers: tuple[LayerSummary, ...]

    @property
    def diff_ids(self) -> tuple[str, ...]:
        """diff_ids of the layers above the base, in order."""
        return tuple(layer.diff_id for layer in self.layers)


# ----------------------------------------------------------------------------- docker save


@dataclass
class SavedImage:
    """What `docker save` gave: the config document and the non-base layer tars by index."""

    config: dict[str, Any]
    layers: dict[int, Path]  # index in rootfs.diff_ids -> spooled layer tar


def save_image(
    client: Any,
    image: str,
    keep: Callable[[str], bool],
    workdir: Path,
    progress: ProgressFn = no_progress,
) -> SavedImage:
    """Stream `docker save image`: return its config and, spooled into `workdir`, the layer
    tars whose diff_id `keep` accepts (by their index in the image's layers)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stream = _open_save_stream(client, image, progress)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        found = _read_save_stream(tar, keep, workdir)
    manifest = json.loads(found.small.get("manifest.json", b"[]"))
    if len(manifest) != 1 or manifest[0].get("Config") not in found.small:
        raise EngineError(f"`docker save {image}` gave no single-image manifest.json")
    config = json.loads(found.small[manifest[0]["Config"]])
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    layers = _kept_layers(image, manifest[0]["Layers"], diff_ids, keep, found, workdir)
    return SavedImage(config, layers)


@dataclass
class _SaveStream:
    """What one pass over a `docker save` stream found."""

    #: layer tar member -> spooled file (None: a base layer)
    files: dict[str, Path | None] = field(default_factory=dict)
    #: member name -> member it links to (a repeated layer)
    links: dict[str, str] = field(default_factory=dict)
    small: dict[str, bytes] = field(default_factory=dict)

    def spooled(self, name: str) -> Path | None:
        return self.files.get(self.links.get(name, name))


def _open_save_stream(client: Any, image: str, progress: ProgressFn) -> io.BufferedReader:
    try:
        chunks = client.images.get(image).save(chunk_size=CHUNK)
        total = int(client.images.get(image).attrs.get("Size") or 0) or None
    except Exception as exc:  # docker.errors.* and connection errors alike
        raise EngineError(f"cannot save the image {image} from the engine: {exc}") from None
    return io.BufferedReader(IterStream(chunks, progress, "save", total), buffer_size=CHUNK)


def _read_save_stream(
    tar: tarfile.TarFile, keep: Callable[[str], bool], workdir: Path
) -> _SaveStream:
    """Spool each kept layer tar once (a diff_id seen again reuses the first file); read the
    small JSON members."""
    found = _SaveStream()
    first: dict[str, Path] = {}  # diff_id -> the file spooled for it
    for member in tar:
        name = member.name
        if member.issym() and name.endswith("/layer.tar"):
            found.links[name] = _resolve_link(name, member.linkname)
        elif member.isfile() and name.endswith("/layer.tar"):
            digest, path = _spool_layer(tar, member, workdir, len(found.files))
            if not keep(digest) or digest in first:
                path.unlink()
                found.files[name] = first.get(digest)
            else:
                found.files[name] = first[digest] = path
        elif member.isfile() and member.size < _SMALL:
            handle = tar.extractfile(member)
            found.small[name] = handle.read() if handle else b""
    return found


def _kept_layers(
    image: str,
    names: Sequence[str],
    diff_ids: Sequence[str],
    keep: Callable[[str], bool],
    found: _SaveStream,
    workdir: Path,
) -> dict[int, Path]:
    """The manifest's layers (`names`, with their `diff_ids`) that `keep` accepts, by index."""
    layers: dict[int, Path] = {}
    for index, (name, diff_id) in enumerate(zip(names, diff_ids, strict=True)):
        if not keep(diff_id):
            continue
        spooled = found.spooled(name)
        if spooled is None or not spooled.exists():
            raise EngineError(f"`docker save {image}` lacks the layer {diff_id}")
        if spooled in layers.values():  # the same layer twice (empty steps): normalised apart
            copy = workdir / f"saved-{len(found.files) + index}.tar"
            shutil.copyfile(spooled, copy)
            spooled = copy
        layers[index] = spooled
    return layers


def _resolve_link(name: str, linkname: str) -> str:
    folder = name.rsplit("/", 1)[0]
    parts = [p for p in f"{folder}/{linkname}".split("/") if p not in ("", ".")]
    out: list[str] = []
    for part in parts:
        if part == "..":
            if out:
                out.pop()
        else:
            out.append(part)
    return "/".join(out)


def _spool_layer(
    tar: tarfile.TarFile, member: tarfile.TarInfo, workdir: Path, n: int
) -> tuple[str, Path]:
    """Copy one layer tar of the save stream into `workdir`; return (its diff_id, the file)."""
    source = tar.extractfile(member)
    path = workdir / f"saved-{n}.tar"
    sha = hashlib.sha256()
    with path.open("wb") as out:
        while source is not None and (chunk := source.read(CHUNK)):
            sha.update(chunk)
            out.write(chunk)
    return f"sha256:{sha.hexdigest()}", path


# ----------------------------------------------------------------------------- writing


def _base_facts(client: Any, base: str) -> tuple[list[str], int]:
    """The base image's diff_ids and the number of its history entries (which the engine
    copied into the built image's history)."""
    try:
        attrs = client.images.get(base).attrs
        entries = client.api.history(base)
    except Exception as exc:  # docker.errors.* and connection errors alike
        raise EngineError(f"cannot read the base image {base} from the engine: {exc}") from None
    diff_ids = list((attrs.get("RootFS") or {}).get("Layers") or [])
    return diff_ids, len(entries)


def write_image(
    client: Any,
    engine_image: str,
    *,
    base: str | None,
    source_date_epoch: int,
    workdir: Path,
    labels: Mapping[str, str] | None = None,
    progress: ProgressFn = no_progress,
) -> WrittenImage:
    """Write the deterministic image of `engine_image` (built FROM `base`, an image the engine
    has; None: no base, every layer is normalised) into the engine; return it. Temp files go
    to a folder in `workdir`, removed in every case. Raises BuildError when the result is not
    what was computed, EngineError when the engine refuses."""
    base_ids, base_history = _base_facts(client, base) if base else ([], 0)
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="image-", dir=workdir))
    try:
        below = set(base_ids)
        saved = save_image(client, engine_image, lambda d: d not in below, tmp, progress)
        written = _normalise(saved, tmp, source_date_epoch, progress)
        doc = deterministic_config(
            saved.config,
            base_diff_ids=base_ids,
            base_history=base_history,
            layer_diff_ids=[w.diff_id for _, w in written],
            created=rfc3339(source_date_epoch),
            labels={**(labels or {}), REPRO_LABEL: REPRO_FORMAT},
        )
        config = canonical_json(doc)
        image_id = digest_bytes(config)
        _load(client, config, [w.path for _, w in written], len(base_ids), progress)
        _check_loaded(client, image_id)
        summaries = _summaries(doc["history"][base_history:], written)
        return WrittenImage(image_id, config, len(base_ids), summaries)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _summaries(
    history: list[dict[str, Any]], written: list[tuple[int, WrittenLayer]]
) -> tuple[LayerSummary, ...]:
    """One summary per written layer, with the step of its history entry (those above the
    base's that made a layer)."""
    made = [h for h in history if not h.get("empty_layer")]
    return tuple(
        LayerSummary(
            index,
            w.diff_id,
            str(step.get("created_by", "")),
            w.size,
            w.stats.entries,
            len(w.stats.dropped),
            len(w.stats.changed),
        )
        for (index, w), step in zip(written, _pad(made, len(written)), strict=True)
    )


def _pad(history: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """`n` history entries for `n` layers (an image without history gets empty ones)."""
    return (history + [{}] * n)[:n]


def _normalise(
    saved: SavedImage, tmp: Path, source_date_epoch: int, progress: ProgressFn
) -> list[tuple[int, WrittenLayer]]:
    """Read every non-base layer, then write each normalised (pyc headers need to know which
    sources the normalised layers write)."""
    read: list[tuple[int, ReadLayer, IO[bytes]]] = []
    with contextlib.ExitStack() as stack:
        for index in sorted(saved.layers):
            fh = stack.enter_context(saved.layers[index].open("r+b"))
            progress(f"normalising layer {index}", 0, None)
            read.append((index, read_layer(fh, source_date_epoch), fh))
        sources: set[str] = set()
        for _, layer, _ in read:
            sources |= layer.python_sources()
        out = []
        for index, layer, _ in read:
            keep_pyc_heads(layer, sources)
            written = write_layer(
                layer, tmp / f"layer-{index}.tar", source_date_epoch, progress, f"layer {index}"
            )
            out.append((index, written))
    for path in set(saved.layers.values()):
        path.unlink(missing_ok=True)
    return out


def _archive(config: bytes, layers: list[Path], skipped: int) -> Iterator[bytes]:
    """A docker-archive as a stream of bytes: the config, the normalised layers, manifest.json.
    The `skipped` base layers are named in the manifest but not sent (`docker load` reads a
    layer's file only when the engine lacks that layer)."""
    config_name = f"{digest_bytes(config).split(':', 1)[1]}.json"
    names = [f"base-{i}/layer.tar" for i in range(skipped)]
    names += [f"layer-{i}/layer.tar" for i in range(len(layers))]
    manifest = canonical_json(archive_manifest(config_name, [], names))
    yield _header(config_name, len(config)) + config + _padding(len(config))
    for name, path in zip(names[skipped:], layers, strict=True):
        size = path.stat().st_size
        yield _header(name, size)
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                yield chunk
        yield _padding(size)
    yield _header("manifest.json", len(manifest)) + manifest + _padding(len(manifest))
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _load(
    client: Any, config: bytes, layers: list[Path], skipped: int, progress: ProgressFn
) -> None:
    progress("docker load", 0, None)
    try:
        events = client.api.load_image(_archive(config, layers, skipped))
        for event in events or ():
            if isinstance(event, Mapping) and event.get("error"):
                raise BuildError(
                    f"`docker load` of the written image failed: {str(event['error']).strip()}"
                )
    except BuildError:
        raise
    except Exception as exc:  # docker.errors.APIError and connection errors alike
        raise EngineError(f"`docker load` of the written image failed: {exc}") from None


def _check_loaded(client: Any, image_id: str) -> None:
    try:
        loaded = str(client.images.get(image_id).id)
    except Exception:  # docker.errors.ImageNotFound
        loaded = "nothing"
    if loaded != image_id:
        raise BuildError(
            f"the engine loaded {loaded} for the written image, whose config "
            f"digest is {image_id}: the engine changed the image on load"
        )

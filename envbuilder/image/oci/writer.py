"""The engine side: turn the image the engine built into the image the lock predicts.

    write_image(client, engine_image, base=..., source_date_epoch=..., workdir=...)

1. `docker save` the engine's image (streamed, any layout: envbuilder.image.oci.saved; each
   layer tar spooled to `workdir` uncompressed, the base image's layers recognised by their
   diff_id and kept only where the engine's store needs them sent again);
2. normalise every layer above the base (envbuilder.image.oci.layers) and make the config
   deterministic (envbuilder.image.oci.config);
3. write envbuilder's own OCI manifest (uncompressed layers) and stream an archive that every
   engine reads (envbuilder.image.oci.loadarchive) into `docker load`;
4. check that the engine's id of the loaded image is the one its image store gives it: the
   config's digest (classic store, podman) or the manifest's (containerd store). Both are
   functions of the lock and the base image's digest only.

Nothing here tags anything: the caller moves its tag to the returned id.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envbuilder.core.errors import BuildError, EngineError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image import engine
from envbuilder.image.oci.blobs import canonical_json, digest_bytes, rfc3339
from envbuilder.image.oci.canonical import UNCHANGED, View, add_raw_layer, canonicalise
from envbuilder.image.oci.config import SPLIT_COMMENT, deterministic_config
from envbuilder.image.oci.layers import (
    ReadLayer,
    WrittenLayer,
    keep_pyc_heads,
    read_layer,
    write_layer,
)
from envbuilder.image.oci.loadarchive import LayerBlob, image_manifest, load_stream
from envbuilder.image.oci.packages import LAYER_LIMIT, split_by_package
from envbuilder.image.oci.saved import SavedImage, read_saved
from envbuilder.image.tar import CHUNK, IterStream

if TYPE_CHECKING:
    from envbuilder.image.engine import Client

#: Version of what this package writes: bump it whenever the same engine image would give other
#: bytes (a normalisation rule, the tar layout, the config's keys), so that a recorded digest
#: from an older envbuilder is not mistaken for a prediction of this one. 4: layers are canonical
#: diffs (envbuilder.image.oci.canonical), the history keeps the steps that made a layer only,
#: builder labels are dropped: every engine and store (and podman) gives the same digest.
#: 5: layers by package (envbuilder.image.oci.packages), every file time LAYER_EPOCH.
REPRO_FORMAT = "5"
#: Label of every written image: the REPRO_FORMAT that wrote it.
REPRO_LABEL = "org.envbuilder.repro-format"
#: The time of every file in the layers envbuilder writes (1980-01-01T00:00:00Z, the earliest a
#: zip file can record: Python's zipfile refuses older files). One fixed time, not the lock's
#: SOURCE_DATE_EPOCH (the newest upload among its packages): with that, bumping any package
#: changed the bytes of every layer, and a team pulled the whole image again (issue 31). The
#: image's `created` is still the lock's time.
LAYER_EPOCH = 315532800
#: Members of a `docker save` stream other than layer tars are small JSON files.
_SMALL = 64 << 20


@dataclass(frozen=True)
class LayerSummary:
    """One layer above the base in the written image."""

    index: int  # position in the image's layers (0 = the base's first)
    diff_id: str
    created_by: str  # the Dockerfile step, from the history (and the package, when split)
    size: int  # bytes of the normalised tar
    entries: int
    dropped: int  # build-noise members left out
    changed: int  # members whose content or header was rewritten
    unchanged: int = 0  # members left out as the same as in the layers below


@dataclass(frozen=True)
class WrittenImage:
    """The image envbuilder wrote: its id (= config digest), the config bytes, the layers, and
    the digest of the manifest envbuilder wrote for it (the id in a containerd image store)."""

    image_id: str
    config: bytes
    base_layers: int
    layers: tuple[LayerSummary, ...]
    manifest_digest: str = ""
    engine_id: str = ""  # the engine's id of it: one of the two digests, by its image store

    @property
    def diff_ids(self) -> tuple[str, ...]:
        """diff_ids of the layers above the base, in order."""
        return tuple(layer.diff_id for layer in self.layers)


# ----------------------------------------------------------------------------- docker save


def save_image(
    client: Client,
    image: str,
    keep: Callable[[str], bool],
    workdir: Path,
    progress: ProgressFn = no_progress,
) -> SavedImage:
    """Stream `docker save image` (any layout: envbuilder.image.oci.saved): return its config
    and, spooled into `workdir`, the layer tars whose diff_id `keep` accepts (by their index in
    the image's layers)."""
    stream = open_save_stream(client, image, progress)
    return read_saved(stream, keep, workdir, image)


def open_save_stream(
    client: Client, image: str, progress: ProgressFn = no_progress
) -> io.BufferedReader:
    """The bytes of `docker save image`, as a buffered stream (progress: bytes read)."""
    found = engine.image_info(client, image)
    if found is None:
        raise EngineError(f"cannot save the image {image}: the engine has no such image")
    chunks = engine.save_image_stream(client, image, CHUNK)
    stream = IterStream(chunks, progress, "save", found.size or None)
    return io.BufferedReader(stream, buffer_size=CHUNK)


# ----------------------------------------------------------------------------- writing


def _base_facts(client: Client, base: str) -> tuple[list[str], int]:
    """The base image's diff_ids and the number of its history entries (which the engine
    copied into the built image's history)."""
    found = engine.image_info(client, base)
    if found is None:
        raise EngineError(f"cannot read the base image {base}: the engine has no such image")
    return list(found.diff_ids), len(engine.image_history(client, base))


def image_store(client: Client) -> str:
    """The engine's image store (envbuilder.image.engine_values.EngineInfo.image_store):
    "containerd" (Docker with the containerd snapshotter: image ids are manifest digests),
    "classic" or "podman" (image ids are config digests)."""
    return engine.engine_info(client).image_store


def write_image(
    client: Client,
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
    store = image_store(client)
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="image-", dir=workdir))
    try:
        # Every layer is kept: the base's are the view the layers above are diffed against.
        saved = save_image(client, engine_image, lambda _d: True, tmp, progress)
        base_count = len(base_ids)
        written = _normalise(saved, base_count, tmp, progress)
        doc = deterministic_config(
            saved.config,
            base_diff_ids=base_ids,
            base_history=base_history,
            layer_diff_ids=[w.diff_id for _, w in written],
            created=rfc3339(source_date_epoch),
            labels={**(labels or {}), REPRO_LABEL: REPRO_FORMAT},
            parts=_labels(written),
        )
        config = canonical_json(doc)
        # The containerd store keeps every blob the manifest names: send the base layers too.
        blobs = _layer_blobs(saved, base_ids, written, send_base=store == "containerd")
        manifest = image_manifest(config, blobs)
        _load(client, load_stream(config, manifest, blobs), progress)
        image_id, manifest_digest = digest_bytes(config), digest_bytes(manifest)
        _check_loaded(client, image_id, manifest_digest, store)
        summaries = _summaries(doc["history"][base_history:], written)
        engine_id = expected_id(image_id, manifest_digest, store)
        return WrittenImage(image_id, config, base_count, summaries, manifest_digest, engine_id)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _layer_blobs(
    saved: SavedImage,
    base_ids: list[str],
    written: list[tuple[int, WrittenLayer]],
    *,
    send_base: bool,
) -> list[LayerBlob]:
    """Every layer of the written image: the base's as saved (their files only when
    `send_base`), then the normalised ones."""
    blobs = [
        LayerBlob(diff_id, saved.sizes[i], saved.layers.get(i) if send_base else None)
        for i, diff_id in enumerate(base_ids)
    ]
    blobs += [LayerBlob(w.diff_id, w.size, w.path) for _, w in written]
    return blobs


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
            _step(step),
            w.size,
            w.stats.entries,
            sum(1 for why in w.stats.dropped.values() if why != UNCHANGED),
            len(w.stats.changed),
            sum(1 for why in w.stats.dropped.values() if why == UNCHANGED),
        )
        for (index, w), step in zip(written, _pad(made, len(written)), strict=True)
    )


def _labels(written: list[tuple[int, WrittenLayer]]) -> list[list[str]]:
    """Per engine layer (in order), the labels of the layers it became."""
    out: dict[int, list[str]] = {}
    for index, layer in written:
        out.setdefault(index, []).append(layer.label)
    return [out[i] for i in sorted(out)]


def _pad(history: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """`n` history entries for `n` layers (an image without history gets empty ones)."""
    return (history + [{}] * n)[:n]


def _step(entry: dict[str, Any]) -> str:
    step = str(entry.get("created_by", ""))
    comment = str(entry.get("comment", ""))
    return f"{step} ({comment})" if comment.startswith(SPLIT_COMMENT) else step


def _normalise(
    saved: SavedImage, base_count: int, tmp: Path, progress: ProgressFn
) -> list[tuple[int, WrittenLayer]]:
    """Read every layer above the base, then write each normalised (pyc headers need to know
    which sources the normalised layers write) as its canonical diff against the layers below
    (envbuilder.image.oci.canonical), a layer that installs Python distributions as one layer
    per distribution (envbuilder.image.oci.packages). Every file time is LAYER_EPOCH. Returns
    (engine layer index, written layer) in the image's order."""
    above = sorted(i for i in saved.layers if i >= base_count)
    view: View = {}
    for index in range(base_count):
        progress(f"reading base layer {index}", 0, None)
        add_raw_layer(view, saved.layers[index])
    read: list[tuple[int, ReadLayer, IO[bytes]]] = []
    with contextlib.ExitStack() as stack:
        for index in above:
            fh = stack.enter_context(saved.layers[index].open("r+b"))
            progress(f"normalising layer {index}", 0, None)
            read.append((index, read_layer(fh, LAYER_EPOCH), fh))
        sources: set[str] = set()
        for _, layer, _ in read:
            sources |= layer.python_sources()
        out: list[tuple[int, WrittenLayer]] = []
        for n, (index, layer, _) in enumerate(read):
            keep_pyc_heads(layer, sources)
            canonicalise(layer, view)
            budget = LAYER_LIMIT - base_count - len(out) - (len(read) - n - 1)
            for k, part in enumerate(split_by_package(layer, budget)):
                dest = tmp / f"layer-{index}-{k}.tar"
                written = write_layer(part.layer, dest, LAYER_EPOCH, progress, f"layer {index}")
                out.append((index, replace(written, label=part.label)))
    for path in {saved.layers[i] for i in above} - {saved.layers.get(i) for i in range(base_count)}:
        path.unlink(missing_ok=True)
    return out


def _load(client: Client, archive: Iterator[bytes], progress: ProgressFn) -> None:
    progress("docker load", 0, None)
    engine.load_image_archive(client, archive)


def expected_id(config_digest: str, manifest_digest: str, store: str) -> str:
    """The id an engine with image store `store` gives the written image: the manifest's
    digest in the containerd store, the config's elsewhere."""
    return manifest_digest if store == "containerd" else config_digest


def _check_loaded(client: Client, config_digest: str, manifest_digest: str, store: str) -> None:
    wanted = expected_id(config_digest, manifest_digest, store)
    found = engine.image_info(client, wanted)
    loaded = found.id if found is not None else "nothing"
    if loaded != wanted:
        raise BuildError(
            f"the engine ({store} image store) loaded {loaded} for the written image, whose "
            f"{'manifest' if store == 'containerd' else 'config'} digest is {wanted}: the "
            "engine changed the image on load"
        )

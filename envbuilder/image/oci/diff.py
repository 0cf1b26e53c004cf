"""Name where two images differ: the first differing layer (and its Dockerfile step) and, when
both images are on the engine, the first differing file in it (in the tar order: sorted paths).
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.image import engine
from envbuilder.image.engine import Client
from envbuilder.image.oci.writer import save_image
from envbuilder.image.tar import CHUNK, sort_key


@dataclass(frozen=True)
class Member:
    """What a layer says about one path."""

    type: bytes
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str
    linkname: str
    xattrs: tuple[tuple[str, str], ...]


def layer_members(path: Path) -> dict[str, Member]:
    """Every member of a layer tar by its name."""
    out: dict[str, Member] = {}
    with tarfile.open(path, "r:") as tar:
        for info in tar:
            sha = hashlib.sha256()
            if info.isreg():
                handle = tar.extractfile(info)
                while handle is not None and (chunk := handle.read(CHUNK)):
                    sha.update(chunk)
            xattrs = tuple(
                sorted((k, v) for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr."))
            )
            out[info.name.rstrip("/")] = Member(
                info.type,
                info.mode,
                info.uid,
                info.gid,
                info.size,
                sha.hexdigest(),
                info.linkname,
                xattrs,
            )
    return out


def first_file_difference(predicted: Path, rebuilt: Path) -> str:
    """The first path (in sorted order) where two layer tars differ, and how."""
    old, new = layer_members(predicted), layer_members(rebuilt)
    for name in sorted(set(old) | set(new), key=sort_key):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None:
            return f"/{name} is only in the rebuilt image"
        if b is None:
            return f"/{name} is only in the predicted image"
        return f"/{name}: {_how(a, b)}"
    return "the two layer tars hold the same files (they differ in their tar encoding)"


def _how(a: Member, b: Member) -> str:
    parts = []
    for label, x, y in (
        ("type", a.type, b.type),
        ("mode", oct(a.mode), oct(b.mode)),
        ("owner", f"{a.uid}:{a.gid}", f"{b.uid}:{b.gid}"),
        ("size", a.size, b.size),
        ("content sha256", a.sha256[:16], b.sha256[:16]),
        ("link", a.linkname, b.linkname),
        ("xattrs", a.xattrs, b.xattrs),
    ):
        if x != y:
            parts.append(f"{label} {x!r} predicted, {y!r} rebuilt")
    return "; ".join(parts)


def steps(config: Mapping[str, Any]) -> list[str]:
    """created_by of each history entry that made a layer, bottom layer first."""
    return [
        str(h.get("created_by", ""))
        for h in config.get("history") or []
        if not h.get("empty_layer")
    ]


def _on_engine(client: Client, image: str) -> bool:
    return engine.image_info(client, image) is not None


def _first_layer_difference(expected: Sequence[str], actual: Sequence[str]) -> int | None:
    for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return i
    if len(expected) != len(actual):
        return min(len(expected), len(actual))
    return None


def describe_difference(
    client: Client,
    expected_id: str,
    expected_layers: Sequence[str],
    actual_id: str,
    actual_layers: Sequence[str],
    *,
    base: str | None,
    workdir: Path,
) -> str:
    """A sentence naming the first differing layer (with its Dockerfile step) and, when the
    predicted image is on the engine, the first differing file; or the config difference when
    every layer is the predicted one."""
    base_count = _base_layer_count(client, base)
    index = _first_layer_difference(expected_layers, actual_layers)
    have_expected = _on_engine(client, expected_id)
    if index is None:
        return _config_difference(client, expected_id, actual_id, have_expected)
    position = base_count + index
    wanted = {actual_layers[index]} if index < len(actual_layers) else set()
    rebuilt = save_image(client, actual_id, wanted.__contains__, workdir / "rebuilt")
    head = _layer_head(steps(rebuilt.config), position, index, expected_layers, actual_layers)
    if index >= len(expected_layers) or index >= len(actual_layers):
        return head + "; the two images have a different number of layers"
    if not have_expected:
        return (
            head + "; the predicted image is not on this engine, so no file can be named "
            "(pull it with `envbuilder pull`, or build it where the lock was recorded, "
            "then verify again)"
        )
    predicted = save_image(
        client, expected_id, {expected_layers[index]}.__contains__, workdir / "predicted"
    )
    old, new = predicted.layers.get(position), rebuilt.layers.get(position)
    if old is None or new is None:
        return head
    return f"{head}; first differing file: {first_file_difference(old, new)}"


def _base_layer_count(client: Client, base: str | None) -> int:
    found = engine.image_info(client, base) if base else None
    return len(found.diff_ids) if found is not None else 0


def _layer_head(
    made_by: Sequence[str],
    position: int,
    index: int,
    expected_layers: Sequence[str],
    actual_layers: Sequence[str],
) -> str:
    """Which layer differs first (`position` in the image, `index` above the base), made by
    which step, and the two layers' diff_ids."""
    step = made_by[position] if position < len(made_by) else "(no history)"
    return (
        f"layer {position + 1} of the image ({index + 1} above the base), made by "
        f"`{_short(step)}`, differs first (predicted {_at(expected_layers, index)}, "
        f"rebuilt {_at(actual_layers, index)})"
    )


def _at(layers: Sequence[str], index: int) -> str:
    return layers[index][:19] if index < len(layers) else "none"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _config_difference(
    client: Client, expected_id: str, actual_id: str, have_expected: bool
) -> str:
    if not have_expected:
        return (
            "every layer is the predicted one, the image config differs (labels, "
            "environment, entrypoint or history); the predicted image is not on this "
            "engine to compare the configs"
        )
    old, new = engine.image_info(client, expected_id), engine.image_info(client, actual_id)
    if old is None or new is None:
        return "every layer is the predicted one; one of the two images left the engine"
    for key, a, b in (
        ("Config", old.config, new.config),
        ("Architecture", old.architecture, new.architecture),
        ("Os", old.os, new.os),
        ("Created", old.created, new.created),
    ):
        found = _first_key_difference(a, b, key)
        if found:
            return f"every layer is the predicted one; the image config differs first at {found}"
    return "every layer is the predicted one; the image configs differ in their history"


def _first_key_difference(a: object, b: object, path: str) -> str | None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            found = _first_key_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if a != b:
        return f"{path} ({a!r} predicted, {b!r} rebuilt)"
    return None

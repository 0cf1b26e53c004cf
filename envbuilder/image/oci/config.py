"""The deterministic image config, made from the one the engine wrote.

The engine's config records when each step ran (`created`, every history entry), in which
container (`container`, `container_config`, `config.Hostname`), on which parent image
(`config.Image`, `parent`) and with which engine (`docker_version`). The deterministic config
keeps what the image means at run time (Env, Cmd, User, WorkingDir, Labels, ...), the base
image's history as the base recorded it, and for every step above the base its instruction with
SOURCE_DATE_EPOCH as its time. Its sha256 is the image id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from envbuilder.core.errors import BuildError
from envbuilder.image.oci.blobs import image_config

#: The runtime keys of an image config's `config` that carry meaning (OCI image spec plus the
#: Docker extensions Healthcheck, Shell, OnBuild); the rest (Hostname, Domainname, Image,
#: Attach*, Tty, OpenStdin, StdinOnce) describe the build container.
RUNTIME_KEYS = (
    "User",
    "ExposedPorts",
    "Env",
    "Entrypoint",
    "Cmd",
    "Volumes",
    "WorkingDir",
    "Labels",
    "StopSignal",
    "ArgsEscaped",
    "Healthcheck",
    "Shell",
    "OnBuild",
)
#: Top-level keys kept besides the ones image_config writes.
PLATFORM_KEYS = ("variant", "os.version", "os.features", "author")
#: History keys kept for the steps above the base (their time is replaced).
HISTORY_KEYS = ("created_by", "author", "comment", "empty_layer")
#: The legacy builder names a COPY/ADD source by a hash of the files it copied
#: (`COPY dir:<hex> in /opt/venv`), which it computes from their metadata as the engine's
#: storage driver reports it: Docker 20.10 and Docker 28's containerd store give the same venv
#: different hashes. The layer's diff_id already fixes what was copied; the hash is left out.
_SOURCE_HASH = re.compile(r"(#\(nop\) (?:COPY|ADD) (?:dir|file|multi)):[0-9a-f]{64}")


#: The comment of a history entry for one layer of a step envbuilder split by package.
SPLIT_COMMENT = "envbuilder layer: "

#: Labels a builder adds by itself (podman's buildah: its version), which are not the image's.
BUILDER_LABELS = ("io.buildah.version",)


def step_text(created_by: str) -> str:
    """A history entry's `created_by` without the legacy builder's source hashes, its
    whitespace collapsed (buildah pads a COPY's entry with spaces)."""
    return " ".join(_SOURCE_HASH.sub(r"\1", created_by).split())


def runtime_config(engine_config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """The `config` section: the engine's runtime keys that are set, plus `labels`."""
    out = {
        key: engine_config[key]
        for key in RUNTIME_KEYS
        if engine_config.get(key) not in (None, "", [], {}, False)
    }
    if labels or "Labels" in out:
        kept = {k: v for k, v in dict(out.get("Labels") or {}).items() if k not in BUILDER_LABELS}
        out["Labels"] = {**kept, **labels}
        if not out["Labels"]:
            del out["Labels"]
    return out


def history(
    engine_history: Sequence[Mapping[str, Any]],
    base_history: int,
    created: str,
    parts: Sequence[Sequence[str]] = (),
) -> list[dict[str, Any]]:
    """The base image's `base_history` entries as they are; then, for each step above it that
    made a layer, its entry with only HISTORY_KEYS, timed `created`.

    The steps that made no layer (ARG, ENV, LABEL, USER, ...) are left out: builders word
    them differently (podman's buildah lists ARG names without values, the proxy args among
    them, writes ENV unexpanded and one LABEL step for several labels; Docker one per label),
    and what they set is in the config itself. The steps that made a layer read the same in
    both, but for whitespace, which is collapsed.

    `parts`: for the n-th step that made a layer, the labels of the layers envbuilder split it
    into (envbuilder.image.oci.packages), each an entry of its own with the label as its
    comment; a step without parts (or one part labelled "") keeps one entry."""
    kept = [dict(h) for h in engine_history[:base_history]]
    made = [e for e in engine_history[base_history:] if not e.get("empty_layer")]
    for n, entry in enumerate(made):
        step = {k: entry[k] for k in HISTORY_KEYS if entry.get(k) not in (None, "", False)}
        if isinstance(step.get("created_by"), str):
            step["created_by"] = step_text(step["created_by"])
        labels = parts[n] if n < len(parts) else [""]
        for label in labels:
            comment = {"comment": f"{SPLIT_COMMENT}{label}"} if label else {}
            kept.append({"created": created, **step, **comment})
    return kept


def deterministic_config(
    engine: Mapping[str, Any],
    *,
    base_diff_ids: Sequence[str],
    base_history: int,
    layer_diff_ids: Sequence[str],
    created: str,
    labels: Mapping[str, str],
    parts: Sequence[Sequence[str]] = (),
) -> dict[str, Any]:
    """The config of the written image: the engine's `engine` config with the base's layers
    (`base_diff_ids`, its first `base_history` history entries), the normalised layers above
    them (`layer_diff_ids`, in order; `parts`: the labels of the layers each engine layer
    became, when split, see `history`), every time `created`, and `labels` added. Raises
    BuildError when the engine's image is not built on that base."""
    rootfs = engine.get("rootfs") or {}
    engine_ids = list(rootfs.get("diff_ids") or [])
    if engine_ids[: len(base_diff_ids)] != list(base_diff_ids):
        raise BuildError(
            "the image the engine built does not start with the base image's "
            "layers (the Dockerfile's FROM is not the locked base); render the "
            "env again (`envbuilder render`)"
        )
    above = len(engine_ids) - len(base_diff_ids)
    parts = list(parts) or [[""]] * above
    if above != len(parts) or sum(map(len, parts)) != len(layer_diff_ids):
        raise BuildError(
            f"internal: {above} layers above the base, {len(layer_diff_ids)} normalised"
        )
    steps = history(list(engine.get("history") or []), base_history, created, parts)
    extra = {k: engine[k] for k in PLATFORM_KEYS if engine.get(k)}
    return image_config(
        created=created,
        config=runtime_config(engine.get("config") or {}, labels),
        diff_ids=[*base_diff_ids, *layer_diff_ids],
        history=steps,
        architecture=str(engine.get("architecture") or "amd64"),
        os=str(engine.get("os") or "linux"),
        extra=extra,
    )

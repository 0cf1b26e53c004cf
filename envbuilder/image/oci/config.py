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


def step_text(created_by: str) -> str:
    """A history entry's `created_by` without the legacy builder's source hashes."""
    return _SOURCE_HASH.sub(r"\1", created_by)


def runtime_config(engine_config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """The `config` section: the engine's runtime keys that are set, plus `labels`."""
    out = {
        key: engine_config[key]
        for key in RUNTIME_KEYS
        if engine_config.get(key) not in (None, "", [], {}, False)
    }
    if labels:
        out["Labels"] = {**dict(out.get("Labels") or {}), **labels}
    return out


def history(
    engine_history: Sequence[Mapping[str, Any]], base_history: int, created: str
) -> list[dict[str, Any]]:
    """The base image's `base_history` entries as they are; then each step's entry with only
    HISTORY_KEYS, timed `created`."""
    kept = [dict(h) for h in engine_history[:base_history]]
    for entry in engine_history[base_history:]:
        step = {k: entry[k] for k in HISTORY_KEYS if entry.get(k) not in (None, "", False)}
        if isinstance(step.get("created_by"), str):
            step["created_by"] = step_text(step["created_by"])
        kept.append({"created": created, **step})
    return kept


def deterministic_config(
    engine: Mapping[str, Any],
    *,
    base_diff_ids: Sequence[str],
    base_history: int,
    layer_diff_ids: Sequence[str],
    created: str,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The config of the written image: the engine's `engine` config with the base's layers
    (`base_diff_ids`, its first `base_history` history entries), the normalised layers above
    them (`layer_diff_ids`, in order), every time `created`, and `labels` added. Raises
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
    if above != len(layer_diff_ids):
        raise BuildError(
            f"internal: {above} layers above the base, {len(layer_diff_ids)} normalised"
        )
    steps = history(list(engine.get("history") or []), base_history, created)
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

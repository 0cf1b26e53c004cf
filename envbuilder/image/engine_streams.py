"""The engine's JSON progress streams read (build steps, layer pulls): pure, no engine call."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envbuilder.core.errors import BuildError
from envbuilder.core.progress import ProgressFn

#: How many output lines of the failing build step a BuildError quotes.
TAIL_LINES = 40

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
#: podman's build (buildah) says "STEP 4/6: RUN ..." instead, prefixed by "[1/3] " (the stage of
#: how many) in a multi-stage build, and counts the steps per stage (buildah's
#: imagebuildah/stage_executor.go and executor.go; seen from podman 5.8's compat API).
_PODMAN_STEP = re.compile(r"^(?:\[(\d+)/(\d+)\] )?STEP (\d+)/(\d+): (.*)$")
#: Per-layer statuses worth a line (the rest, "Preparing", "Waiting", ..., is noise).
_FINAL_LAYER_STATUS = (
    "Pushed",
    "Pull complete",
    "Already exists",
    "Layer already exists",
    "Mounted from",
)
#: Terminal colour codes that RUN output carries (apt, pip): dropped from messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class BuildState:
    """What the JSON stream of a legacy build has told us so far."""

    step: int = 0
    steps: int = 0
    stage: str = ""  # podman's multi-stage builds: "stage 1/3, " (steps count per stage)
    instruction: str = ""
    step_output: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    image_id: str | None = None
    partial: str = ""


def on_build_event(event: Mapping[str, Any], state: BuildState, progress: ProgressFn) -> None:
    if "error" in event:
        raise BuildError(_build_failure(event, state))
    if "stream" in event:
        _on_build_text(str(event["stream"]), state, progress)
    elif "status" in event:
        on_pull_status(event, progress)
    aux = event.get("aux")
    if isinstance(aux, Mapping) and isinstance(aux.get("ID"), str):
        state.image_id = aux["ID"]


def _on_build_text(text: str, state: BuildState, progress: ProgressFn) -> None:
    # The stream splits output at arbitrary points: keep the unfinished last line.
    lines = _ANSI.sub("", state.partial + text).split("\n")
    state.partial = lines.pop()
    for line in lines:
        step = _step_of(line)
        if step is not None:
            state.stage, state.step, state.steps, state.instruction = step
            state.step_output.clear()
            progress(
                f"{state.stage}step {state.step}/{state.steps}: {_shorten(state.instruction)}",
                state.step,
                state.steps,
            )
        elif line.strip():
            state.step_output.append(line.rstrip())


def _step_of(line: str) -> tuple[str, int, int, str] | None:
    """(stage prefix, step, steps, instruction) of a line that starts a Dockerfile step, in
    Docker's words ("Step 3/12 : RUN ...") or podman's ("[1/3] STEP 3/6: RUN ...": the prefix
    is then "stage 1/3, "); None for any other line."""
    match = _STEP.match(line)
    if match:
        return "", int(match[1]), int(match[2]), match[3]
    match = _PODMAN_STEP.match(line)
    if match:
        stage = f"stage {match[1]}/{match[2]}, " if match[1] else ""
        return stage, int(match[3]), int(match[4]), match[5]
    return None


def on_pull_status(event: Mapping[str, Any], progress: ProgressFn) -> None:
    detail = event.get("progressDetail") or {}
    layer = event.get("id")
    if layer and isinstance(detail, Mapping) and detail.get("total"):
        progress(f"pull {layer}", int(detail.get("current") or 0), int(detail["total"]))
    elif layer and str(event.get("status", "")).startswith(_FINAL_LAYER_STATUS):
        progress(f"{event['status']} {layer}", 0, None)


def _build_failure(event: Mapping[str, Any], state: BuildState) -> str:
    if state.partial.strip():
        state.step_output.append(state.partial.rstrip())
    where = (
        f"{state.stage}step {state.step}/{state.steps} ({_shorten(state.instruction, 200)})"
        if state.step
        else "before the first step (reading the Dockerfile or the context)"
    )
    message = f"docker build failed at {where}: {str(event['error']).strip()}"
    if state.step_output:
        tail = "\n".join(f"    {line}" for line in state.step_output)
        message += f"\n  last output of that step:\n{tail}"
    return message


def _shorten(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class PullSummary:
    """What a pull fetched, as the engine's progress stream tells it: layers it downloaded and
    their bytes (as sent: compressed when the registry's blob is), layers it had already.
    `bytes_known` is False when some fetched layer's size was not in the stream."""

    fetched: int
    fetched_bytes: int
    present: int
    bytes_known: bool = True


def pull_summary(events: Sequence[Mapping[str, Any]]) -> PullSummary:
    """The PullSummary of a pull's JSON stream: a layer said "Already exists" was present,
    one that was downloading or downloaded was fetched (its size: the largest progress total
    the stream gave for it)."""
    present: set[str] = set()
    fetched: dict[str, int] = {}
    for event in events:
        layer, status = str(event.get("id") or ""), str(event.get("status") or "")
        detail = event.get("progressDetail") or {}
        if not layer or layer == "latest" or ":" in layer:
            continue
        if status.startswith("Already exists"):
            present.add(layer)
        elif status.startswith(("Downloading", "Download complete", "Pull complete")):
            total = int(detail.get("total") or 0) if isinstance(detail, Mapping) else 0
            fetched[layer] = max(fetched.get(layer, 0), total)
    fetched = {k: v for k, v in fetched.items() if k not in present}
    known = all(fetched.values())
    return PullSummary(len(fetched), sum(fetched.values()), len(present), known)

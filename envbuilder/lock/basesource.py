"""Where a base image's pinned digest comes from, and what to make of a pin that cannot be pulled.

`envbuilder lock` records beside each `base_image = "NAME:TAG@sha256:..."` the registry that
served that digest for the tag (`base_source`): for a Docker Hub image, the engine's registry
mirror that served it (asked over the registry HTTP API whether it serves that digest for the
tag), else `docker.io`; for any other image, its registry. So a lock made against one registry
says so, and `build` on an engine that reads another registry can tell

* **not served here**: the pin was read from a registry this engine does not use (this
  project's CI mirror, a company mirror), and this engine's registry serves another image for
  the tag: expected, nothing is wrong with the lock; re-pin (into the committed lock, or into a
  scratch copy of the project: docs/docker.md, "First command");
* **lost or changed**: the registry the pin was read from is one this engine uses, and it does
  not serve that digest: the tag was moved and the old image deleted, or the digest in the lock
  was edited by hand (look at the lock's history before re-pinning).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuilder.core.errors import BuildError, EngineError

if TYPE_CHECKING:
    from envbuilder.image.engine import Client

#: The registry of an image reference without a registry part (`debian:bookworm-slim`).
DOCKER_HUB = "docker.io"
#: Manifest media types a registry may serve for a tag (single image or multi-platform index).
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def split_ref(ref: str) -> tuple[str, str, str]:
    """(registry, repository path, tag) of `NAME:TAG[@sha256:...]`; Docker Hub's official
    images get their `library/` prefix, as the registry API names them."""
    name = ref.split("@", 1)[0]
    head, _, rest = name.partition("/")
    if rest and ("." in head or ":" in head or head == "localhost"):
        registry, path = head, rest
    else:
        registry, path = DOCKER_HUB, name
    path, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "latest")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return registry, path, tag or "latest"


def engine_mirrors(client: Client) -> list[str]:
    """The engine's Docker Hub mirrors as URLs (`http://127.0.0.1:5000`), in its order."""
    from envbuilder.image import engine

    try:
        mirrors = engine.registry_config(client).get("Mirrors") or []
    except EngineError:  # an engine that cannot say has none we could name
        return []
    return [str(m).rstrip("/") for m in mirrors]


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def sources(client: Client, ref: str) -> list[str]:
    """The registries this engine reads `ref` from, in order: for a Docker Hub image its
    mirrors (hosts) then docker.io; otherwise the image's registry."""
    registry, _, _ = split_ref(ref)
    if registry != DOCKER_HUB:
        return [registry]
    return [*(_host(m) for m in engine_mirrors(client)), DOCKER_HUB]


def mirror_digest(mirror_url: str, ref: str, timeout_s: float = 10.0) -> str | None:
    """The digest a registry mirror serves for `ref`'s tag (its `Docker-Content-Digest`), or
    None when it serves none or cannot be asked (a mirror needing a login is not asked)."""
    _, path, tag = split_ref(ref)
    request = urllib.request.Request(
        f"{mirror_url}/v2/{path}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": MANIFEST_TYPES},
    )
    # Directly, as the engine reaches its mirrors (this process's proxy variables are not its).
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            digest = response.headers.get("Docker-Content-Digest")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return str(digest) if digest else None


def source_of(client: Client, ref: str, digest: str) -> str:
    """The registry that served `digest` for `ref` to this engine: the first mirror that serves
    that very digest for the tag, else the image's own registry."""
    registry, _, _ = split_ref(ref)
    if registry == DOCKER_HUB:
        for mirror in engine_mirrors(client):
            if mirror_digest(mirror, ref) == digest:
                return _host(mirror)
    return registry


@dataclass(frozen=True)
class PinDiagnosis:
    """Why a pinned base cannot be pulled here. `kind`: "not-served-here" (the pin came from a
    registry this engine does not read), "lost-or-changed" (it came from one it reads, which
    does not serve it), "unknown" (the lock does not say where the pin came from)."""

    kind: str
    pinned: str  # NAME:TAG@sha256:...
    source: str | None  # the lock's base_source
    here: tuple[str, ...]  # the registries this engine reads the tag from
    served: str | None  # the digest this engine's registry serves for the tag now

    @property
    def tag(self) -> str:
        return self.pinned.split("@", 1)[0]

    def describe(self) -> str:
        """One paragraph for an error message (without the way on)."""
        digest = self.pinned.split("@", 1)[1] if "@" in self.pinned else "?"
        now = (
            f"this engine's registry ({', '.join(self.here)}) serves {self.tag} as {self.served}"
            if self.served
            else f"this engine's registry ({', '.join(self.here)}) does not serve {self.tag}"
        )
        if self.kind == "not-served-here":
            return (
                f"the lock pins {self.tag} at {digest}, which it read from {self.source}, a "
                f"registry this engine does not use; {now}. Nothing is wrong with the lock: "
                "it was made against another registry"
            )
        if self.kind == "lost-or-changed":
            return (
                f"the lock pins {self.tag} at {digest}, read from {self.source}, which this "
                f"engine uses but which does not serve that digest; {now}. Either the tag was "
                "moved and the old image deleted, or the digest in the lock was changed by hand "
                "(look at the lock's history, e.g. `git log -p lockfiles/`, before re-pinning)"
            )
        return (
            f"the lock pins {self.tag} at {digest} and does not say which registry that was read "
            f"from (a lock made before base_source was recorded); {now}"
        )


def diagnose(client: Client, pinned: str, source: str | None) -> PinDiagnosis:
    """The PinDiagnosis of `pinned` (which this engine could not pull) and the lock's
    `base_source`."""
    here = tuple(sources(client, pinned))
    from envbuilder.image import engine

    served: str | None
    try:
        served = engine.registry_digest(client, pinned.split("@", 1)[0])
    except EngineError:  # the registry does not serve the tag at all, or cannot be reached
        served = None
    if source is None:
        kind = "unknown"
    elif source in here:
        kind = "lost-or-changed"
    else:
        kind = "not-served-here"
    return PinDiagnosis(kind, pinned, source, here, served)


class BaseNotServedError(BuildError):
    """The locked base image cannot be pulled by its digest from this engine's registry;
    `diagnosis` says why (envbuilder.commands.build re-pins into a scratch copy of the project
    on `--repin-base-into`, and only for "not-served-here")."""

    def __init__(self, message: str, diagnosis: PinDiagnosis) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis


def not_served_message(env: str, diagnosis: PinDiagnosis) -> str:
    """The error `build` gives for a pin this engine's registry does not serve, with the ways
    on (neither is taken without a command that says so)."""
    commit = (
        f"`envbuilder lock --env {env} --refresh-base && envbuilder render --env {env}` "
        f"(rewrites lockfiles/{env}.lock.toml and the rendered files: commit them if this "
        "registry's image is to be the team's pin)"
    )
    head = (
        f"{env}/docker: the base image {diagnosis.pinned} (from the lock) cannot be pulled: "
        f"this engine's registry does not have that digest; {diagnosis.describe()}"
    )
    if diagnosis.kind != "not-served-here":
        return f"{head}. Re-pin with {commit}, then build again"
    scratch = (
        f"`envbuilder build --target docker --env {env} --repin-base-into build/demo` re-pins "
        "into a scratch copy of the project and builds from there, leaving the committed lock "
        "as it is (`nox -s build-docker` does that)"
    )
    return f"{head}. To build here: {scratch}; or {commit}"

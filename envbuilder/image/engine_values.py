"""What an engine and its images are (EngineInfo, ImageInfo), read from the engine's answers: pure,
no engine call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The product names `EngineInfo.product` takes.
DOCKER = "docker"
PODMAN = "podman"
#: `EngineInfo.image_store`: Docker's containerd image store ("containerd"), Docker's own
#: graph-driver store ("classic"), podman's containers/storage ("podman").
CONTAINERD_STORE = "containerd"
CLASSIC_STORE = "classic"
PODMAN_STORE = "podman"
#: The DriverStatus row by which Docker (24+) says it uses the containerd image store (moby's
#: daemon/containerd: `[["driver-type", "io.containerd.snapshotter.v1"]]`).
_CONTAINERD_DRIVER_TYPE = ("driver-type", "io.containerd.snapshotter.v1")
#: The lowest API version whose engine can run BuildKit builds (Docker 18.09, API 1.39).
_BUILDKIT_MIN_API = (1, 39)


@dataclass(frozen=True)
class EngineInfo:
    """What an engine is: `product` ("docker" or "podman"), `version` (the server's, e.g.
    "28.5.2"), `api_version` (the Docker API version it speaks, e.g. "1.51"), `image_store`
    ("containerd", "classic" or "podman"), `storage_driver` ("overlay2", "overlayfs", ...),
    `builder` (the builder a plain build gets: "buildkit" or "legacy"), `buildkit` (whether the
    engine can run BuildKit builds at all), `rootless`, and the server's `os`/`arch`."""

    product: str
    version: str
    api_version: str
    image_store: str
    storage_driver: str
    builder: str
    buildkit: bool
    rootless: bool
    os: str
    arch: str

    def as_dict(self) -> dict[str, str | bool]:
        """The JSON object `doctor --json` and validation reports carry."""
        return {
            "product": self.product,
            "version": self.version,
            "api_version": self.api_version,
            "image_store": self.image_store,
            "storage_driver": self.storage_driver,
            "builder": self.builder,
            "buildkit": self.buildkit,
            "rootless": self.rootless,
            "os": self.os,
            "arch": self.arch,
        }

    def summary(self) -> str:
        """One line: "docker 28.5.2 (API 1.51), containerd image store (overlayfs), builder
        buildkit, rootful, linux/amd64"."""
        builder = self.builder
        if self.builder != "buildkit" and self.buildkit:
            builder += " (BuildKit available)"
        return (
            f"{self.product} {self.version} (API {self.api_version}), {self.image_store} image "
            f"store ({self.storage_driver or 'unknown driver'}), builder {builder}, "
            f"{'rootless' if self.rootless else 'rootful'}, {self.os}/{self.arch}"
        )


def parse_engine_info(
    version: Mapping[str, Any], info: Mapping[str, Any], ping_headers: Mapping[str, str]
) -> EngineInfo:
    """EngineInfo from the engine's answers to GET /version, GET /info and GET /_ping (its
    headers). Pure: the shapes are those of moby's API (docs.docker.com/reference/api/engine)
    and podman's Docker-compatible API (docs.podman.io/en/latest/_static/api.html)."""
    components = [str(c.get("Name", "")) for c in version.get("Components") or []]
    headers = {key.lower(): value for key, value in ping_headers.items()}
    podman = any(name.startswith("Podman") for name in components) or (
        "libpod-api-version" in headers
    )
    driver_status = [tuple(row) for row in info.get("DriverStatus") or [] if len(row) == 2]
    if podman:
        store = PODMAN_STORE
    elif _CONTAINERD_DRIVER_TYPE in driver_status:
        store = CONTAINERD_STORE
    else:
        store = CLASSIC_STORE
    api = str(version.get("ApiVersion") or headers.get("api-version") or "")
    buildkit = not podman and _api_tuple(api) >= _BUILDKIT_MIN_API
    default_builder = headers.get("builder-version", "1")
    security = [str(option) for option in info.get("SecurityOptions") or []]
    return EngineInfo(
        product=PODMAN if podman else DOCKER,
        version=str(version.get("Version") or info.get("ServerVersion") or ""),
        api_version=api,
        image_store=store,
        storage_driver=str(info.get("Driver") or ""),
        builder="buildkit" if buildkit and default_builder == "2" else "legacy",
        buildkit=buildkit,
        rootless=info.get("Rootless") is True  # podman's own field
        or any("name=rootless" in option.split(",") for option in security),
        os=str(version.get("Os") or info.get("OSType") or ""),
        arch=str(version.get("Arch") or info.get("Architecture") or ""),
    )


def _api_tuple(api: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in api.split("."))
    except ValueError:
        return ()


@dataclass(frozen=True)
class ImageInfo:
    """An image as the engine has it (GET /images/{name}/json). `id`: the engine's image ID
    (the config digest on Docker's classic store and podman; the manifest digest on Docker's
    containerd store); `diff_ids`: RootFS.Layers, bottom first; `config`: the engine's Config
    object (Env, User, Labels, Entrypoint, Cmd, WorkingDir, ...) as given."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    labels: Mapping[str, str]
    diff_ids: tuple[str, ...]
    size: int
    env: tuple[str, ...]
    user: str
    architecture: str
    os: str
    created: str
    config: Mapping[str, Any]

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> ImageInfo:
        """ImageInfo from the engine's image inspect object."""
        config = attrs.get("Config") or {}
        return cls(
            id=str(attrs.get("Id", "")),
            repo_tags=tuple(attrs.get("RepoTags") or ()),
            repo_digests=tuple(attrs.get("RepoDigests") or ()),
            labels=dict(config.get("Labels") or {}),
            diff_ids=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            size=int(attrs.get("Size") or 0),
            env=tuple(config.get("Env") or ()),
            user=str(config.get("User") or ""),
            architecture=str(attrs.get("Architecture") or ""),
            os=str(attrs.get("Os") or ""),
            created=str(attrs.get("Created") or ""),
            config=dict(config),
        )

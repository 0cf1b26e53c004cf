"""A thin layer over the docker SDK: connect, build, run, push, pull. Nothing else talks to Docker
(the SDK's exceptions: `engine_errors`; its ssh:// transport: `engine_ssh`; what the engine's
answers and streams say: `engine_values`, `engine_streams`).

Every function takes the client explicitly and reports through a `progress(what, done, total)`
callback; engine and registry failures become `EngineError`/`RegistryError`/`BuildError` with a
message that says what to do. The engine is whatever `DOCKER_HOST` (and `DOCKER_TLS_VERIFY`,
`DOCKER_CERT_PATH`, `DOCKER_CONFIG`) point at, exactly as the docker CLI would use it, so a team
can build on a remote build server without any envbuilder setting.

Works with the legacy builder (Docker Engine 20.10+ API); BuildKit-only Dockerfile syntax is not
used by envbuilder's templates (the SDK cannot drive BuildKit, docker/docker-py#2230).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import tarfile
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, cast

import docker
import docker.errors
import docker.types
import requests.exceptions

from envbuilder.core.compat import HostKind
from envbuilder.core.errors import BuildError, EngineError, RegistryError, UsageError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image import runflags
from envbuilder.image.container_files import files_tar, owner_of
from envbuilder.image.engine_errors import engine_where, explain, sdk_errors, unreachable_message
from envbuilder.image.engine_ssh import use_tracked_ssh_adapter
from envbuilder.image.engine_streams import (
    BuildState,
    PullSummary,
    on_build_event,
    on_pull_status,
    pull_summary,
)
from envbuilder.image.engine_values import PODMAN, EngineInfo, ImageInfo, parse_engine_info

#: HTTP timeout (s) for one read from the engine. Builds stay silent for minutes (pip installing
#: torch), so the default of 60 s would abort them.
ENGINE_TIMEOUT_S = 3600


#: The client of an engine, as every function here takes it. Callers name the type
#: (`engine.Client`) and pass it on; only this module calls it.
Client: TypeAlias = docker.DockerClient


def connect(timeout_s: int = ENGINE_TIMEOUT_S) -> Client:
    """A client for the engine the environment names (DOCKER_HOST etc., as the docker CLI),
    each read from it waiting at most `timeout_s`.

    Raises EngineError, saying how to start an engine or point at one, when it does not answer.
    """
    where = engine_where()
    client: docker.DockerClient | None = None
    try:
        # ssh:// through the system's ssh client (as the docker CLI does), not paramiko's own
        # ssh: ~/.ssh/config and agents apply as they do for `docker`.
        ssh = os.environ.get("DOCKER_HOST", "").startswith("ssh://")
        client = docker.from_env(timeout=timeout_s, use_ssh_client=ssh)
        if ssh:
            use_tracked_ssh_adapter(client)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        if client is not None:  # its half-open ssh connection would complain at exit
            with contextlib.suppress(Exception):
                client.close()
        raise EngineError(unreachable_message(where, exc)) from None
    _CLIENTS.add(client)
    return client


#: Clients made by `connect()`, closed by `close_all()` (weakly held: no client is kept alive).
_CLIENTS: weakref.WeakSet[docker.DockerClient] = weakref.WeakSet()


def disconnect(client: Client) -> None:
    """Close `client` now (over ssh://: end its ssh processes) rather than at exit."""
    _CLIENTS.discard(client)
    with contextlib.suppress(OSError):
        client.close()


def close_all() -> None:
    """Close every client `connect()` made that is still alive, and with it (over ssh://) every
    `ssh` process its requests started. Runs at exit for the CLI."""
    for client in list(_CLIENTS):
        with contextlib.suppress(OSError):
            client.close()
    _CLIENTS.clear()


atexit.register(close_all)


# ---------------------------------------------------------------------------------------------
# build


def build_image(
    client: docker.DockerClient,
    context_dir: Path,
    tag: str,
    labels: Mapping[str, str],
    buildargs: Mapping[str, str],
    progress: ProgressFn = no_progress,
    *,
    network_mode: str | None = None,
    nocache: bool = False,
) -> str:
    """Build `context_dir`/Dockerfile, tag it `tag`, and return the image id ("sha256:...").

    Progress: one event per Dockerfile step ("step 3/12: RUN ...", 3, 12) and per base-image
    layer pull ("pull <layer>", bytes, total). A failing step raises BuildError quoting that
    step's instruction and the tail of its output; intermediate containers are removed.
    Of the `buildargs`, Docker's predefined proxy args never show in `docker history`; any
    other arg the Dockerfile declares is visible in the history of the RUN steps after it.
    """
    state = BuildState()
    with _build_errors(tag):
        stream = client.api.build(
            path=str(context_dir),
            tag=tag,
            labels=dict(labels),
            buildargs=dict(buildargs),
            rm=True,
            forcerm=True,
            decode=True,
            nocache=nocache,
            network_mode=network_mode,
            timeout=ENGINE_TIMEOUT_S,
        )
        for event in stream:
            on_build_event(event, state, progress)
    image_id = state.image_id or _image_id(client, tag)
    progress(f"built {tag}", state.steps, state.steps or None)
    return image_id


@contextlib.contextmanager
def _build_errors(tag: str) -> Iterator[None]:
    """The engine's refusal of the build of `tag` as a BuildError, no answer as an EngineError."""
    with sdk_errors(f"the Docker engine refused the build of {tag}", refused=BuildError):
        yield


def existing_image(client: docker.DockerClient, ref: str) -> ImageInfo | None:
    """The engine's image `ref`, or None when it has none by that name (`image_info`)."""
    return image_info(client, ref)


def _image_id(client: docker.DockerClient, ref: str) -> str:
    found = image_info(client, ref)
    if found is None:
        raise BuildError(f"the build reported success but no image {ref} exists")
    return found.id


# ---------------------------------------------------------------------------------------------
# run


def host_group_ids(names: Iterable[str]) -> list[int]:
    """The numeric gids of the host's groups `names` (skipping groups the host lacks)
    (envbuilder.image.runflags.host_group_ids)."""
    return runflags.host_group_ids(names)


#: The CDI name of every NVIDIA GPU (what `nvidia-ctk cdi generate` writes; podman's docs:
#: "podman run --device nvidia.com/gpu=all").
NVIDIA_CDI_ALL = "nvidia.com/gpu=all"


def device_run_options(
    host_kind: HostKind, root: Path = Path("/"), *, podman: bool = False
) -> dict[str, Any]:
    """`containers.create` keyword arguments exposing the accelerator of a `host_kind` host
    (`root`: where the host's files are, for the mounts made only when present):
    envbuilder.image.runflags, the one source `envbuilder run` and `shell` use too.

    NVIDIA's "all GPUs" request differs on podman (`podman`): its compat API keeps only the
    DeviceRequests whose Driver is "cdi" (their DeviceIDs become --device values) and drops
    Docker's `capabilities=[["gpu"]]` request without a word (containers/podman
    pkg/api/handlers/compat/containers_create.go, cliOpts), so it gets the CDI device
    nvidia.com/gpu=all instead (the host needs the CDI spec that `nvidia-ctk cdi generate`
    writes, as for `podman run --device nvidia.com/gpu=all`)."""
    options = runflags.sdk_options(runflags.host_run_flags(host_kind, root=root))
    if options.pop("gpu_request", False):
        request = (
            docker.types.DeviceRequest(driver="cdi", device_ids=[NVIDIA_CDI_ALL])
            if podman
            else docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
        )
        options["device_requests"] = [request]
    return options


@dataclass(frozen=True)
class ContainerRun:
    """How run_in_container runs its command: as `user`, with the accelerator flags the
    compatibility data gives `host_kind`, on `network_mode`, with `environment` added to those
    flags' variables, the container labelled `labels`, for at most `timeout_s` (None: no
    limit)."""

    user: str | None = None
    host_kind: HostKind = "cpu"
    network_mode: str | None = None
    environment: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    timeout_s: float | None = None


_PLAIN_RUN = ContainerRun()


def run_in_container(
    client: docker.DockerClient,
    image: str,
    command: list[str],
    how: ContainerRun = _PLAIN_RUN,
    *,
    files_in: Mapping[str, bytes] | None = None,
    files_out: Iterable[str] = (),
    progress: ProgressFn = no_progress,
) -> tuple[int, str, dict[str, bytes]]:
    """Run `command` in a fresh container of `image` (`how`: ContainerRun); return (exit code,
    output, files).

    `files_in` are copied in before the start (absolute paths; new folders under /tmp belong
    to `how.user` when it is numeric); `files_out` are copied out after the exit, those missing
    are left out of the returned dict. Each output line is reported as progress. The container
    is removed in every case: success, failure, timeout (EngineError) and Ctrl-C.
    """
    container = _create_container(client, image, command, how)
    try:
        if files_in:
            container.put_archive("/", files_tar(files_in, owner_of(how.user)))
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise EngineError(f"a container of {image} could not start: {explain(exc)}") from None
        _follow(container, progress)
        code = _wait(container, how.timeout_s)
        # The followed stream may miss an unterminated last line: read the whole log again.
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return code, output, _copy_out(container, files_out)
    finally:
        _remove(container)


def _create_container(
    client: docker.DockerClient, image: str, command: list[str], how: ContainerRun
) -> Any:
    # Only a GPU request is spelt otherwise on podman: ask the engine what it is only then.
    podman = runflags.host_run_flags(how.host_kind).gpu_request and (
        engine_info(client).product == PODMAN
    )
    options = device_run_options(how.host_kind, podman=podman)
    env = {**options.pop("environment", {}), **(how.environment or {})}
    try:
        return client.containers.create(
            image,
            command,
            user=how.user,
            environment=env,
            network_mode=how.network_mode,
            labels=dict(how.labels or {}),
            detach=True,
            **options,
        )
    except docker.errors.ImageNotFound:
        raise EngineError(
            f"image {image} does not exist on the engine at {engine_where()}"
        ) from None
    except docker.errors.APIError as exc:
        raise EngineError(
            f"the engine refused to create a container of {image}: {explain(exc)}"
        ) from None


def _follow(container: Any, progress: ProgressFn) -> None:
    """Report each output line as it comes (progress only; the caller reads the full log)."""
    count = 0
    partial = ""
    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
        parts = (partial + chunk.decode("utf-8", "replace")).split("\n")
        partial = parts.pop()
        for line in parts:
            count += 1
            progress(line, count, None)
    if partial:
        progress(partial, count + 1, None)


def _wait(container: Any, timeout_s: float | None) -> int:
    try:
        result = container.wait(timeout=timeout_s)
    except requests.exceptions.ConnectionError:  # read timeout surfaces as ConnectionError
        raise EngineError(f"the container did not finish within {timeout_s} s") from None
    return int(result.get("StatusCode", 1))


def _copy_out(container: Any, paths: Iterable[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in paths:
        try:
            chunks, _stat = container.get_archive(path)
        except docker.errors.NotFound:
            continue
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None else None
            if handle is not None:
                found[path] = handle.read()
    return found


def _remove(container: Any) -> None:
    """Remove `container` (gone already is fine); EngineError when the engine refuses."""
    with sdk_errors("cannot remove a container"), contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True)


# ---------------------------------------------------------------------------------------------
# push / pull


#: A repository name in the Docker reference grammar: [HOST[:PORT]/]path/components, the path
#: in lower case ([a-z0-9] runs joined by ".", "_", "__" or dashes).
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"(?:{_DOMAIN}(?::[0-9]+)?/)?{_PATH}(?:/{_PATH})*")


def registry_repository(registry: str, name: str) -> str:
    """ "`registry`/`name`", the repository an image is pushed to. UsageError naming --registry
    when `registry` is not HOST[:PORT]/PATH (a scheme, a digest, spaces, upper case in the path)."""
    if "://" in registry or "@" in registry:
        raise UsageError(f"--registry {registry}: give HOST[:PORT]/PATH, without a scheme")
    repository = f"{registry.rstrip('/')}/{name}"
    if not _REPOSITORY.fullmatch(repository):
        raise UsageError(
            f"--registry {registry!r} is not a valid registry path; give HOST[:PORT]/PATH with "
            "the path in lower case (letters, digits, '.', '_', '-'), e.g. "
            "registry.example.com/ml or 127.0.0.1:5000/envbuilder"
        )
    return repository


def split_reference(ref: str) -> tuple[str, str | None]:
    """("repo", "tag") of "repo:tag"; the colon of a registry's port is not a tag separator."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, None
    return name, tag


def registry_of(repository: str) -> str:
    """The registry host of a repository name ("docker.io" when it names none)."""
    first, sep, _rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _login_hint(repository: str) -> str:
    config = os.environ.get("DOCKER_CONFIG") or "~/.docker"
    return (
        f"log in first (`docker login {registry_of(repository)}`); envbuilder uses the "
        f"credentials of the Docker config in {config}/config.json, credential helpers included"
    )


def _stream_registry(
    events: Iterator[Mapping[str, Any]], action: str, ref: str, progress: ProgressFn
) -> list[Mapping[str, Any]]:
    """Consume a push/pull JSON stream, turning errors into RegistryError."""
    seen: list[Mapping[str, Any]] = []
    for event in events:
        if "error" in event:
            error = str(event["error"]).strip()
            hint = ""
            lowered = error.lower()
            if any(w in lowered for w in ("auth", "denied", "unauthorized", "credentials")):
                hint = f"\n{_login_hint(split_reference(ref)[0])}"
            raise RegistryError(f"{action} of {ref} was refused: {error}{hint}")
        on_pull_status(event, progress)
        seen.append(event)
    return seen


def push_image(
    client: docker.DockerClient,
    image: str,
    repository: str,
    tag: str,
    progress: ProgressFn = no_progress,
) -> str:
    """Tag `image` as repository:tag, push it, and return the repo digest "repository@sha256:...".

    Credentials come from the Docker config (as `docker push`); a refusal raises RegistryError
    saying how to log in.
    """
    ref = f"{repository}:{tag}"
    if image_info(client, image) is None:
        raise EngineError(f"no image {image} on the engine at {engine_where()}")
    with sdk_errors(f"cannot tag {image} as {ref}", refused=RegistryError):
        client.api.tag(image, repository, tag=tag)
    try:
        events = client.api.push(repository, tag=tag, stream=True, decode=True)
        seen = _stream_registry(events, "push", ref, progress)
    except docker.errors.APIError as exc:
        _untag(client, ref)
        raise RegistryError(f"push of {ref} was refused: {explain(exc)}") from None
    except RegistryError:
        _untag(client, ref)  # leave no tag behind that names an image the registry lacks
        raise
    for event in seen:
        aux = event.get("aux")
        if isinstance(aux, Mapping) and isinstance(aux.get("Digest"), str):
            return f"{repository}@{aux['Digest']}"
    raise RegistryError(f"push of {ref} finished without reporting a digest")


def _untag(client: docker.DockerClient, ref: str) -> None:
    with contextlib.suppress(EngineError):
        remove_image(client, ref, noprune=True)


def pull_image(client: docker.DockerClient, ref: str, progress: ProgressFn = no_progress) -> str:
    """Pull `ref` ("repo@sha256:..." or "repo:tag") and return the local image id."""
    return pull_image_counted(client, ref, progress)[0]


def pull_image_counted(
    client: docker.DockerClient, ref: str, progress: ProgressFn = no_progress
) -> tuple[str, PullSummary]:
    """Pull `ref` ("repo@sha256:..." or "repo:tag"); return the local image id and what the
    pull fetched (PullSummary)."""
    repository, tag = split_reference(ref) if "@" not in ref else (ref, None)
    try:
        events = client.api.pull(repository, tag=tag, stream=True, decode=True)
        seen = _stream_registry(events, "pull", ref, progress)
    except docker.errors.APIError as exc:
        error = explain(exc)
        hint = f"\n{_login_hint(repository)}" if "auth" in error.lower() else ""
        raise RegistryError(f"pull of {ref} was refused: {error}{hint}") from None
    except requests.exceptions.ConnectionError as exc:
        raise EngineError(unreachable_message(engine_where(), exc)) from None
    pulled = image_info(client, ref)
    if pulled is None:
        raise RegistryError(f"pull of {ref} finished but the image is not on the engine")
    return pulled.id, pull_summary(seen)


def repo_digests(client: docker.DockerClient, image: str) -> list[str]:
    """The "repository@sha256:..." names the engine knows for `image` (empty if never pushed)."""
    found = image_info(client, image)
    return list(found.repo_digests) if found is not None else []


# ---------------------------------------------------------------------------------------------
# typed values and image operations (issue 29: one typed engine interface)


def engine_info(client: docker.DockerClient) -> EngineInfo:
    """Which engine `client` talks to (product, versions, image store, builder, rootless), from
    its /version, /info and /_ping. EngineError when it does not answer."""
    with sdk_errors("cannot ask the engine what it is"):
        version = client.version()
        info = client.info()
        ping = client.api.get(client.api.base_url + "/_ping")
        ping.raise_for_status()
    return parse_engine_info(version, info, dict(ping.headers))


def image_info(client: docker.DockerClient, ref: str) -> ImageInfo | None:
    """The engine's image `ref` (name, ID or repo digest), or None when it has none by that
    name. EngineError when the engine does not answer or refuses."""
    with sdk_errors(f"cannot inspect the image {ref}"):
        try:
            attrs = client.images.get(ref).attrs
        except docker.errors.NotFound:  # podman's "image not known" is not an ImageNotFound
            return None
    return ImageInfo.from_inspect(attrs)


def image_history(client: docker.DockerClient, ref: str) -> list[dict[str, Any]]:
    """The engine's history of image `ref` (GET /images/{name}/history: Id, Created, CreatedBy,
    Size, ... per entry, newest first). EngineError when the engine lacks it or refuses."""
    with sdk_errors(f"cannot read the history of the image {ref}"):
        entries = client.api.history(ref)  # type: ignore[no-untyped-call]  # (stubs)
    return [dict(entry) for entry in entries]


def save_image_stream(client: docker.DockerClient, ref: str, chunk_size: int) -> Iterator[bytes]:
    """The bytes of `docker save ref` (a tar: Docker <25's layout or, from Docker 25, an OCI
    image layout), in chunks of about `chunk_size` bytes. EngineError when the engine lacks
    the image, refuses or stops answering, also while the stream is read."""
    with sdk_errors(f"cannot save the image {ref} from the engine"):
        chunks = client.api.get_image(ref, chunk_size=chunk_size)
    return _guarded_stream(chunks, f"saving the image {ref} from the engine failed")


def _guarded_stream(chunks: Iterable[bytes], what: str) -> Iterator[bytes]:
    with sdk_errors(what):
        yield from chunks


def load_image_archive(client: docker.DockerClient, chunks: Iterable[bytes]) -> list[str]:
    """Feed a tar stream (`docker save`'s layout) to `docker load`; return the engine's
    messages ("Loaded image ID: sha256:...", "Loaded image: name:tag"). BuildError when the
    engine reports an error loading it, EngineError when it does not answer."""
    messages: list[str] = []
    with sdk_errors("`docker load` failed", refused=BuildError):
        # A generator: requests sends it with chunked transfer encoding, never all in memory.
        events = client.api.load_image(  # type: ignore[no-untyped-call]  # (stubs)
            chunk for chunk in chunks
        )
        for event in events or ():
            if not isinstance(event, Mapping):
                continue
            if event.get("error"):
                raise BuildError(f"`docker load` failed: {str(event['error']).strip()}")
            text = str(event.get("stream") or event.get("status") or "").strip()
            if text:
                messages.append(text)
    return messages


def tag_image(client: docker.DockerClient, ref: str, repository: str, tag: str) -> None:
    """Tag image `ref` as `repository`:`tag` (`docker tag`). EngineError when the engine lacks
    `ref`, refuses or does not answer."""
    with sdk_errors(f"cannot tag the image {ref} as {repository}:{tag}"):
        if not client.api.tag(ref, repository, tag=tag):
            raise EngineError(f"the engine did not tag the image {ref} as {repository}:{tag}")


def remove_image(
    client: docker.DockerClient, ref: str, *, force: bool = False, noprune: bool = False
) -> None:
    """Remove image `ref` (`docker rmi`; `noprune`: keep its untagged parents); an image the
    engine lacks is fine. EngineError when the engine refuses (e.g. a container uses it)."""
    with sdk_errors(f"cannot remove the image {ref}"), contextlib.suppress(docker.errors.NotFound):
        client.api.remove_image(ref, force=force, noprune=noprune)


def list_images(client: docker.DockerClient, repository: str) -> list[ImageInfo]:
    """The engine's images tagged in `repository` (`docker images REPOSITORY`)."""
    with sdk_errors(f"cannot list the images of {repository}"):
        images = client.images.list(name=repository)
    return [ImageInfo.from_inspect(image.attrs) for image in images]


def import_image_file(client: docker.DockerClient, path: Path, repository: str, tag: str) -> str:
    """`docker import` the root filesystem tar at `path` as `repository`:`tag` (streamed from
    the file); return the new image's ID. EngineError when the engine refuses it."""
    ref = f"{repository}:{tag}"
    with sdk_errors(f"docker import of {path} failed"):
        client.api.import_image_from_file(str(path), repository=repository, tag=tag)
    found = image_info(client, ref)
    if found is None:
        raise EngineError(f"docker import of {path} finished but no image {ref} exists")
    return found.id


@contextlib.contextmanager
def exported_filesystem(
    client: docker.DockerClient, image: str, chunk_size: int
) -> Iterator[Iterator[bytes]]:
    """The `docker export` tar of a created (never started) container of `image`, in chunks of
    about `chunk_size` bytes; the container is removed when the block ends, in every case."""
    with sdk_errors(f"cannot create a container of {image}"):
        container = client.containers.create(image, command=["/bin/sh"])
    try:
        with sdk_errors(f"cannot export a container of {image}"):
            chunks = cast(Iterator[bytes], container.export(chunk_size=chunk_size))  # (stubs: str)
        yield _guarded_stream(chunks, f"exporting a container of {image} failed")
    finally:
        _remove(container)


def image_files(client: docker.DockerClient, image: str, paths: Iterable[str]) -> dict[str, bytes]:
    """The files at `paths` (absolute, regular files) in `image`, copied out of a created (never
    started) container; those missing are left out. The container is removed in every case."""
    with sdk_errors(f"cannot create a container of {image}"):
        container = client.containers.create(image, command=["/bin/sh"])
    try:
        with sdk_errors(f"cannot copy files out of a container of {image}"):
            return _copy_out(container, paths)
    finally:
        _remove(container)


def run_and_commit(
    client: docker.DockerClient,
    image: str,
    command: list[str],
    ref: str,
    how: ContainerRun = _PLAIN_RUN,
) -> tuple[int, str]:
    """Run `command` in a fresh container of `image` as `how.user`, on `how.network_mode`, for
    at most `how.timeout_s` (no accelerator flags), and when it exits 0 commit the container
    as `ref` ("repository:tag"); return (exit code, output). The container is removed in every
    case; EngineError when the engine refuses or the command runs out of time."""
    repository, tag = split_reference(ref)
    with sdk_errors(f"cannot create a container of {image}"):
        container = client.containers.create(
            image, command, user=how.user, network_mode=how.network_mode, detach=True
        )
    try:
        with sdk_errors(f"running {command} in a container of {image} failed"):
            container.start()
            code = _wait(container, how.timeout_s)
            output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            if code == 0:
                container.commit(repository=repository, tag=tag)
    finally:
        _remove(container)
    return code, output


def registry_config(client: docker.DockerClient) -> dict[str, Any]:
    """The engine's registry settings (`RegistryConfig` of GET /info: Mirrors,
    InsecureRegistryCIDRs, IndexConfigs). EngineError when it does not answer."""
    with sdk_errors("cannot ask the engine for its registry settings"):
        config = client.info().get("RegistryConfig") or {}
    return dict(config)


def registry_digest(client: docker.DockerClient, ref: str) -> str:
    """The digest ("sha256:...") the registry serves for `ref`, asked through the engine (GET
    /distribution/{name}/json), so the engine's mirrors and credentials apply. RegistryError
    when the registry refuses or lacks it, EngineError when the engine does not answer."""
    with sdk_errors(f"the engine could not ask the registry for {ref}", refused=RegistryError):
        return str(client.images.get_registry_data(ref).id)


def registry_credentials(host: str) -> tuple[str, str] | None:
    """(user, password) the Docker config (DOCKER_CONFIG, ~/.docker/config.json, credential
    helpers) holds for registry `host`, as `docker push` would use them; None without any."""
    import docker.auth

    auth = docker.auth.resolve_authconfig(docker.auth.load_config(), host) or {}
    user, password = auth.get("username"), auth.get("password")
    return (str(user), str(password)) if user and password else None

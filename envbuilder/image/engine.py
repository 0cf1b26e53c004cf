"""A thin layer over the docker SDK: connect, build, run, push, pull. Nothing else talks to Docker.

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
import socket
import subprocess
import tarfile
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeAlias, cast

import docker
import docker.errors
import docker.types
import requests.exceptions
from docker.transport import sshconn

from envbuilder.core.compat import HostKind
from envbuilder.core.errors import BuildError, EngineError, RegistryError, UsageError
from envbuilder.core.progress import ProgressFn, no_progress
from envbuilder.image import runflags

#: HTTP timeout (s) for one read from the engine. Builds stay silent for minutes (pip installing
#: torch), so the default of 60 s would abort them.
ENGINE_TIMEOUT_S = 3600
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


def _engine_where() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock (the default)"


#: The client of an engine, as every function here takes it. Callers name the type
#: (`engine.Client`) and pass it on; only this module calls it.
Client: TypeAlias = docker.DockerClient


def connect(timeout_s: int = ENGINE_TIMEOUT_S) -> Client:
    """A client for the engine the environment names (DOCKER_HOST etc., as the docker CLI),
    each read from it waiting at most `timeout_s`.

    Raises EngineError, saying how to start an engine or point at one, when it does not answer.
    """
    where = _engine_where()
    client: docker.DockerClient | None = None
    try:
        # ssh:// through the system's ssh client (as the docker CLI does), not paramiko's own
        # ssh: ~/.ssh/config and agents apply as they do for `docker`.
        ssh = os.environ.get("DOCKER_HOST", "").startswith("ssh://")
        client = docker.from_env(timeout=timeout_s, use_ssh_client=ssh)
        if ssh:
            _use_tracked_ssh_adapter(client)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        if client is not None:  # its half-open ssh connection would complain at exit
            with contextlib.suppress(Exception):
                client.close()
        raise EngineError(_unreachable_message(where, exc)) from None
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


# --- ssh:// connections --------------------------------------------------------------------------
# Over ssh:// every connection is an `ssh HOST docker system dial-stdio` process. The docker SDK's
# shell-out adapter makes a new, untracked connection pool per request, so `client.close()`
# closed none of them: urllib3's garbage-collection finalizers did, at interpreter exit at the
# latest, and the SDK's SSHSocket.close() writes to ssh's stdin first. By then the far side may
# have ended the connection (here one idle for 5 minutes was: reproduced with a process that
# slept 320 s; a remote host may also go away), ssh has exited, and the write printed a
# BrokenPipeError traceback at exit. The
# classes below are the SDK's with two changes: the adapter knows its sockets (close() ends
# them all), and ending an ssh process never writes to it.

#: How long a terminated `ssh` may take to exit before it is killed.
_SSH_EXIT_TIMEOUT_S = 5.0


def _end_ssh(proc: subprocess.Popen[bytes]) -> None:
    """End one `ssh ... dial-stdio` process, running or not, and reap it; never raises for a
    process that already exited. Closing stdin sends EOF to the far side's dial-stdio."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a failed earlier write may still be buffered
                pipe.close()
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=_SSH_EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _SshProcessSocket(sshconn.SSHSocket):
    """The SDK's socket over an ssh process, known to its adapter while open. Its process is
    ended by close(), or when the socket is garbage-collected or the interpreter exits
    (weakref.finalize), whichever comes first, and only once."""

    def __init__(self, host: str, registry: weakref.WeakSet[_SshProcessSocket]) -> None:
        super().__init__(host)
        self._registry = registry
        self._end: weakref.finalize[[subprocess.Popen[bytes]], _SshProcessSocket] | None = None

    def connect(self, **kwargs: Any) -> None:  # type: ignore[override]  # as the SDK's
        super().connect(**kwargs)
        if self.proc is not None:
            self._end = weakref.finalize(self, _end_ssh, self.proc)
            self._registry.add(self)

    def close(self) -> None:
        self._registry.discard(self)
        if self._end is not None:
            self._end()  # runs _end_ssh once; later calls do nothing
        # The SDK's close() leaves the placeholder socket (never connected) open.
        socket.socket.close(self)


class _SshConnection(sshconn.SSHConnection):
    def __init__(
        self, registry: weakref.WeakSet[_SshProcessSocket], timeout: int, host: str
    ) -> None:
        super().__init__(None, timeout, host)
        self._registry = registry
        self._host = host
        self._timeout_s = timeout

    def connect(self) -> None:
        sock = _SshProcessSocket(self._host, self._registry)
        sock.settimeout(self._timeout_s)
        sock.connect()
        self.sock = sock


class _SshConnectionPool(sshconn.SSHConnectionPool):
    def __init__(
        self, registry: weakref.WeakSet[_SshProcessSocket], timeout: int, maxsize: int, host: str
    ) -> None:
        super().__init__(None, timeout, maxsize, host)
        self._registry = registry
        self._host = host
        self._timeout_s = timeout

    # (the SDK's stub types `sock` narrower than urllib3's connection protocol: same class at run
    # time as the SDK's own pool returns)
    def _new_conn(self) -> _SshConnection:  # type: ignore[override]
        return _SshConnection(self._registry, self._timeout_s, self._host)


class _SshAdapter(sshconn.SSHHTTPAdapter):
    """The SDK's shell-out ssh adapter (a fresh pool per request, as there) whose close() ends
    every ssh process its requests started and that is still open."""

    def __init__(self, ssh_host: str, timeout: int, max_pool_size: int) -> None:
        super().__init__(f"ssh://{ssh_host}", timeout, max_pool_size=max_pool_size, shell_out=True)
        self._sockets: weakref.WeakSet[_SshProcessSocket] = weakref.WeakSet()

    def get_connection(self, url: str | bytes, proxies: Any = None) -> _SshConnectionPool:
        return _SshConnectionPool(self._sockets, self.timeout, self.max_pool_size, self.ssh_host)

    def close(self) -> None:
        super().close()
        for sock in list(self._sockets):
            sock.close()


def _use_tracked_ssh_adapter(client: docker.DockerClient) -> None:
    """Replace the SDK's ssh adapter of `client` (not used yet) by `_SshAdapter`."""
    api = client.api
    sdk = api.get_adapter(api.base_url)
    if not isinstance(sdk, sshconn.SSHHTTPAdapter) or sdk.ssh_client is not None:
        return  # not the shell-out adapter this replaces
    adapter = _SshAdapter(sdk.ssh_host, sdk.timeout, sdk.max_pool_size)
    # Every request URL starts with base_url, so this mount serves them all (the SDK's fallback
    # to its own adapter is for URLs no mount matches).
    api.mount(api.base_url, adapter)
    sdk.close()


def _unreachable_message(where: str, exc: BaseException) -> str:
    text = str(exc)
    hint = (
        "Start Docker Engine (Linux: `sudo systemctl start docker`; in this repository's CI: "
        '`eval "$(.ci/services.sh)"`; Docker Desktop: start the app), or point DOCKER_HOST at a '
        "running engine (e.g. DOCKER_HOST=ssh://user@buildhost)."
    )
    if "Permission denied" in text or "PermissionError" in text:
        hint = (
            "Your user may not use the Docker socket: add it to the `docker` group "
            "(`sudo usermod -aG docker $USER`, then log in again) or use a rootless engine."
        )
    return f"cannot reach the Docker engine at {where}: {text}\n{hint}"


# ---------------------------------------------------------------------------------------------
# build


@dataclass
class _BuildState:
    """What the JSON stream of a legacy build has told us so far."""

    step: int = 0
    steps: int = 0
    stage: str = ""  # podman's multi-stage builds: "stage 1/3, " (steps count per stage)
    instruction: str = ""
    step_output: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    image_id: str | None = None
    partial: str = ""


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
    state = _BuildState()
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
            _on_build_event(event, state, progress)
    image_id = state.image_id or _image_id(client, tag)
    progress(f"built {tag}", state.steps, state.steps or None)
    return image_id


@contextlib.contextmanager
def _build_errors(tag: str) -> Iterator[None]:
    """The engine's refusal of the build of `tag` as a BuildError, no answer as an EngineError."""
    with _sdk_errors(f"the Docker engine refused the build of {tag}", refused=BuildError):
        yield


def _on_build_event(event: Mapping[str, Any], state: _BuildState, progress: ProgressFn) -> None:
    if "error" in event:
        raise BuildError(_build_failure(event, state))
    if "stream" in event:
        _on_build_text(str(event["stream"]), state, progress)
    elif "status" in event:
        _on_pull_status(event, progress)
    aux = event.get("aux")
    if isinstance(aux, Mapping) and isinstance(aux.get("ID"), str):
        state.image_id = aux["ID"]


def _on_build_text(text: str, state: _BuildState, progress: ProgressFn) -> None:
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


def _on_pull_status(event: Mapping[str, Any], progress: ProgressFn) -> None:
    detail = event.get("progressDetail") or {}
    layer = event.get("id")
    if layer and isinstance(detail, Mapping) and detail.get("total"):
        progress(f"pull {layer}", int(detail.get("current") or 0), int(detail["total"]))
    elif layer and str(event.get("status", "")).startswith(_FINAL_LAYER_STATUS):
        progress(f"{event['status']} {layer}", 0, None)


def _build_failure(event: Mapping[str, Any], state: _BuildState) -> str:
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


def existing_image(client: docker.DockerClient, ref: str) -> ImageInfo | None:
    """The engine's image `ref`, or None when it has none by that name (`image_info`)."""
    return image_info(client, ref)


def _image_id(client: docker.DockerClient, ref: str) -> str:
    found = image_info(client, ref)
    if found is None:
        raise BuildError(f"the build reported success but no image {ref} exists")
    return found.id


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


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


def _owner(user: str | None) -> tuple[int, int]:
    """uid/gid for the files we copy in, when `user` is numeric ("1000" or "1000:1000")."""
    if user and re.fullmatch(r"\d+(:\d+)?", user):
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid)
    return 0, 0


def files_tar(files: Mapping[str, bytes], owner: tuple[int, int] = (0, 0)) -> bytes:
    """A tar of `files` (absolute container path -> content) and their parent folders.

    Folders we create belong to `owner`, so a non-root probe can write its report beside them.
    """
    buf = io.BytesIO()
    dirs: set[PurePosixPath] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(files):
            pure = PurePosixPath(path)
            if not pure.is_absolute():
                raise ValueError(f"container path must be absolute: {path}")
            for parent in reversed(pure.parents[:-1]):
                if parent not in dirs and str(parent).startswith("/tmp/"):
                    dirs.add(parent)
                    tar.addfile(_tarinfo(parent, owner, tarfile.DIRTYPE, 0o755))
            info = _tarinfo(pure, owner, tarfile.REGTYPE, 0o644)
            info.size = len(files[path])
            tar.addfile(info, io.BytesIO(files[path]))
    return buf.getvalue()


def _tarinfo(
    path: PurePosixPath, owner: tuple[int, int], kind: bytes, mode: int
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(path).lstrip("/"))
    info.type = kind
    info.mode = mode
    info.uid, info.gid = owner
    return info


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
            container.put_archive("/", files_tar(files_in, _owner(how.user)))
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise EngineError(f"a container of {image} could not start: {_explain(exc)}") from None
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
            f"image {image} does not exist on the engine at {_engine_where()}"
        ) from None
    except docker.errors.APIError as exc:
        raise EngineError(
            f"the engine refused to create a container of {image}: {_explain(exc)}"
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
    with _sdk_errors("cannot remove a container"), contextlib.suppress(docker.errors.NotFound):
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
        _on_pull_status(event, progress)
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
        raise EngineError(f"no image {image} on the engine at {_engine_where()}")
    with _sdk_errors(f"cannot tag {image} as {ref}", refused=RegistryError):
        client.api.tag(image, repository, tag=tag)
    try:
        events = client.api.push(repository, tag=tag, stream=True, decode=True)
        seen = _stream_registry(events, "push", ref, progress)
    except docker.errors.APIError as exc:
        _untag(client, ref)
        raise RegistryError(f"push of {ref} was refused: {_explain(exc)}") from None
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
        error = _explain(exc)
        hint = f"\n{_login_hint(repository)}" if "auth" in error.lower() else ""
        raise RegistryError(f"pull of {ref} was refused: {error}{hint}") from None
    except requests.exceptions.ConnectionError as exc:
        raise EngineError(_unreachable_message(_engine_where(), exc)) from None
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


def engine_info(client: docker.DockerClient) -> EngineInfo:
    """Which engine `client` talks to (product, versions, image store, builder, rootless), from
    its /version, /info and /_ping. EngineError when it does not answer."""
    with _sdk_errors("cannot ask the engine what it is"):
        version = client.version()
        info = client.info()
        ping = client.api.get(client.api.base_url + "/_ping")
        ping.raise_for_status()
    return parse_engine_info(version, info, dict(ping.headers))


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


@contextlib.contextmanager
def _sdk_errors(
    what: str, *, refused: type[EngineError] | type[BuildError] = EngineError
) -> Iterator[None]:
    """The one place the SDK's exceptions become envbuilder's: an engine that does not answer
    is an EngineError saying how to reach one; a refusal (docker.errors.APIError, including
    NotFound) is `refused` ("`what`: the engine's explanation"); any other SDK error is an
    EngineError."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise refused(f"{what}: {_explain(exc)}") from None
    except (requests.exceptions.ConnectionError, ConnectionError) as exc:
        raise EngineError(_unreachable_message(_engine_where(), exc)) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(f"{what}: {exc}") from None


def image_info(client: docker.DockerClient, ref: str) -> ImageInfo | None:
    """The engine's image `ref` (name, ID or repo digest), or None when it has none by that
    name. EngineError when the engine does not answer or refuses."""
    with _sdk_errors(f"cannot inspect the image {ref}"):
        try:
            attrs = client.images.get(ref).attrs
        except docker.errors.NotFound:  # podman's "image not known" is not an ImageNotFound
            return None
    return ImageInfo.from_inspect(attrs)


def image_history(client: docker.DockerClient, ref: str) -> list[dict[str, Any]]:
    """The engine's history of image `ref` (GET /images/{name}/history: Id, Created, CreatedBy,
    Size, ... per entry, newest first). EngineError when the engine lacks it or refuses."""
    with _sdk_errors(f"cannot read the history of the image {ref}"):
        entries = client.api.history(ref)  # type: ignore[no-untyped-call]  # (stubs)
    return [dict(entry) for entry in entries]


def save_image_stream(client: docker.DockerClient, ref: str, chunk_size: int) -> Iterator[bytes]:
    """The bytes of `docker save ref` (a tar: Docker <25's layout or, from Docker 25, an OCI
    image layout), in chunks of about `chunk_size` bytes. EngineError when the engine lacks
    the image, refuses or stops answering, also while the stream is read."""
    with _sdk_errors(f"cannot save the image {ref} from the engine"):
        chunks = client.api.get_image(ref, chunk_size=chunk_size)
    return _guarded_stream(chunks, f"saving the image {ref} from the engine failed")


def _guarded_stream(chunks: Iterable[bytes], what: str) -> Iterator[bytes]:
    with _sdk_errors(what):
        yield from chunks


def load_image_archive(client: docker.DockerClient, chunks: Iterable[bytes]) -> list[str]:
    """Feed a tar stream (`docker save`'s layout) to `docker load`; return the engine's
    messages ("Loaded image ID: sha256:...", "Loaded image: name:tag"). BuildError when the
    engine reports an error loading it, EngineError when it does not answer."""
    messages: list[str] = []
    with _sdk_errors("`docker load` failed", refused=BuildError):
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
    with _sdk_errors(f"cannot tag the image {ref} as {repository}:{tag}"):
        if not client.api.tag(ref, repository, tag=tag):
            raise EngineError(f"the engine did not tag the image {ref} as {repository}:{tag}")


def remove_image(
    client: docker.DockerClient, ref: str, *, force: bool = False, noprune: bool = False
) -> None:
    """Remove image `ref` (`docker rmi`; `noprune`: keep its untagged parents); an image the
    engine lacks is fine. EngineError when the engine refuses (e.g. a container uses it)."""
    with _sdk_errors(f"cannot remove the image {ref}"), contextlib.suppress(docker.errors.NotFound):
        client.api.remove_image(ref, force=force, noprune=noprune)


def list_images(client: docker.DockerClient, repository: str) -> list[ImageInfo]:
    """The engine's images tagged in `repository` (`docker images REPOSITORY`)."""
    with _sdk_errors(f"cannot list the images of {repository}"):
        images = client.images.list(name=repository)
    return [ImageInfo.from_inspect(image.attrs) for image in images]


def import_image_file(client: docker.DockerClient, path: Path, repository: str, tag: str) -> str:
    """`docker import` the root filesystem tar at `path` as `repository`:`tag` (streamed from
    the file); return the new image's ID. EngineError when the engine refuses it."""
    ref = f"{repository}:{tag}"
    with _sdk_errors(f"docker import of {path} failed"):
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
    with _sdk_errors(f"cannot create a container of {image}"):
        container = client.containers.create(image, command=["/bin/sh"])
    try:
        with _sdk_errors(f"cannot export a container of {image}"):
            chunks = cast(Iterator[bytes], container.export(chunk_size=chunk_size))  # (stubs: str)
        yield _guarded_stream(chunks, f"exporting a container of {image} failed")
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
    with _sdk_errors(f"cannot create a container of {image}"):
        container = client.containers.create(
            image, command, user=how.user, network_mode=how.network_mode, detach=True
        )
    try:
        with _sdk_errors(f"running {command} in a container of {image} failed"):
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
    with _sdk_errors("cannot ask the engine for its registry settings"):
        config = client.info().get("RegistryConfig") or {}
    return dict(config)


def registry_digest(client: docker.DockerClient, ref: str) -> str:
    """The digest ("sha256:...") the registry serves for `ref`, asked through the engine (GET
    /distribution/{name}/json), so the engine's mirrors and credentials apply. RegistryError
    when the registry refuses or lacks it, EngineError when the engine does not answer."""
    with _sdk_errors(f"the engine could not ask the registry for {ref}", refused=RegistryError):
        return str(client.images.get_registry_data(ref).id)


def registry_credentials(host: str) -> tuple[str, str] | None:
    """(user, password) the Docker config (DOCKER_CONFIG, ~/.docker/config.json, credential
    helpers) holds for registry `host`, as `docker push` would use them; None without any."""
    import docker.auth

    auth = docker.auth.resolve_authconfig(docker.auth.load_config(), host) or {}
    user, password = auth.get("username"), auth.get("password")
    return (str(user), str(password)) if user and password else None

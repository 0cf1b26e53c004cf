"""The one place the docker SDK's exceptions become envbuilder's (the engine layer,
envbuilder.image.engine): an engine that does not answer is an EngineError saying how to reach
one; a refusal is the error the operation names."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import docker
import docker.errors
import requests.exceptions

from envbuilder.core.errors import BuildError, EngineError


def engine_where() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock (the default)"


def unreachable_message(where: str, exc: BaseException) -> str:
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


def explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


@contextlib.contextmanager
def sdk_errors(
    what: str, *, refused: type[EngineError] | type[BuildError] = EngineError
) -> Iterator[None]:
    """The one place the SDK's exceptions become envbuilder's: an engine that does not answer
    is an EngineError saying how to reach one; a refusal (docker.errors.APIError, including
    NotFound) is `refused` ("`what`: the engine's explanation"); any other SDK error is an
    EngineError."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise refused(f"{what}: {explain(exc)}") from None
    except (requests.exceptions.ConnectionError, ConnectionError) as exc:
        raise EngineError(unreachable_message(engine_where(), exc)) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(f"{what}: {exc}") from None

"""The contract between rendered image definitions and the code that builds and runs them:
where the venv lives, the user's uid, image labels and build args. One home, so the templates'
plan (envbuilder.core.plan), the build context and the image targets cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

#: Where the venv lives in images and WSL rootfs.
VENV = "/opt/venv"
VENV_PYTHON = f"{VENV}/bin/python"
#: uid of the non-root user (Microsoft's WSL rule; also the docker image's user).
UID = 1000
RUN_USER = str(UID)
#: Where the build context's `envbuilder/` folder is copied in the build stage.
CONTEXT_DIR = "/tmp/envbuilder"

#: Build arg carrying the pylock's sha256, so the Dockerfile does not change per build; the
#: rendered Dockerfile turns it into LOCK_LABEL.
LOCK_SHA_ARG = "ENVBUILDER_LOCK_SHA256"
LOCK_LABEL = "org.envbuilder.lock-sha256"
ENV_LABEL = "org.envbuilder.env"
TARGET_LABEL = "org.envbuilder.target"
ROLE_LABEL = "org.envbuilder.role"
#: Label carrying the build context's digest: an image whose label matches needs no rebuild.
CONTEXT_LABEL = "org.envbuilder.context-sha256"

#: Docker's predefined build args: usable in RUN, never recorded in the image or its history.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")


#: A machine's setting: the HTTP proxy apt goes through in builds and lock containers (an
#: apt-cacher-ng, or the tests' replica of the snapshot archive: envbuilder.lock.aptsnapshot).
APT_PROXY_VAR = "ENVBUILDER_APT_PROXY"


def proxy_build_args(environ: Mapping[str, str]) -> dict[str, str]:
    """The proxy settings of `environ` as predefined build args (both spellings Docker knows).
    ENVBUILDER_APT_PROXY, when set, is the http:// proxy (apt reads its archives over http);
    predefined args stay out of the image and its history, so the image does not change."""
    args: dict[str, str] = {}
    for name in PROXY_VARIABLES:
        value = environ.get(name) or environ.get(name.lower())
        if value:
            args[name] = value
            args[name.lower()] = value
    if environ.get(APT_PROXY_VAR):
        args["HTTP_PROXY"] = args["http_proxy"] = environ[APT_PROXY_VAR]
    return args


def needs_host_network(build_args: Mapping[str, str]) -> bool:
    """True when a proxy listens on the host's loopback, which a bridged build cannot reach."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        value = build_args.get(name)
        if value:
            host = urlsplit(value if "://" in value else f"http://{value}").hostname or ""
            if host == "localhost" or host.startswith("127.") or host == "::1":
                return True
    return False

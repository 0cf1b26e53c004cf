"""A small OCI distribution client: put blobs and manifests, read manifests, with the Docker
config's credentials. The docker SDK pushes images only; this attaches other things to them.

    attach_sbom(client, image_ref, sbom) -> str     push `sbom` as an OCI artifact whose
                                                    `subject` is the pushed image; its reference

The artifact (OCI image spec 1.1, "artifacts" guidance): an image manifest with
`artifactType: application/vnd.cyclonedx+json`, the empty config
(`application/vnd.oci.empty.v1+json`, `{}`), one layer holding the SBOM's bytes, and `subject` =
the image's manifest descriptor.
A registry with the referrers API lists it under the image (`GET /v2/<name>/referrers/<digest>`);
for one without (Debian's docker-registry 2.8 here) it is also tagged `sha256-<hex>.sbom`, the
tag cosign and other tools look up for an image `@sha256:<hex>`.

Credentials: the Docker config's (`docker login`; $DOCKER_CONFIG, credential helpers), as the
engine uses them for the image itself; a 401 is answered with Basic auth or a Bearer token from
the realm the registry names. http for the registries the engine treats as insecure (its
`--insecure-registry` list and CIDRs), https otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import requests

from envbuilder.core.errors import EngineError, RegistryError
from envbuilder.core.fsutil import printable
from envbuilder.core.redact import redact

if TYPE_CHECKING:
    from envbuilder.image.engine import Client

SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_TYPES = (
    OCI_MANIFEST,
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
EMPTY = b"{}"
#: Registry names whose API is served elsewhere (Docker Hub's).
DOCKER_HUB_API = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}
TIMEOUT_S = 120


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}


def artifact_manifest(subject: Mapping[str, Any], sbom: bytes) -> bytes:
    """The OCI manifest of an SBOM attached to `subject` (canonical JSON: sorted, compact)."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SBOM_MEDIA_TYPE,
        "config": descriptor(EMPTY_MEDIA_TYPE, EMPTY),
        "layers": [descriptor(SBOM_MEDIA_TYPE, sbom)],
        "subject": dict(subject),
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def referrer_tag(digest: str) -> str:
    """The tag an SBOM of image `sha256:<hex>` goes by (`sha256-<hex>.sbom`)."""
    return digest.replace(":", "-") + ".sbom"


@dataclass
class Registry:
    """One registry host, with the credentials and scheme to use."""

    host: str
    scheme: str = "https"
    credentials: tuple[str, str] | None = None
    session: requests.Session = field(default_factory=requests.Session)
    _auth: str | None = None

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.host}{path}"

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One request; a 401 is retried once with the credentials the challenge asks for."""
        response = self._send(method, url, **kwargs)
        if response.status_code == 401 and self._authenticate(response):
            response = self._send(method, url, **kwargs)
        return response

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}))
        if self._auth:
            headers["Authorization"] = self._auth
        try:
            response = self.session.request(
                method, url, headers=headers, timeout=TIMEOUT_S, stream=True, **kwargs
            )
            _bounded(response)
        except requests.RequestException as exc:
            raise RegistryError(f"cannot reach the registry {self.host}: {exc}") from None
        return response

    def _authenticate(self, response: requests.Response) -> bool:
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme, _, params = challenge.partition(" ")
        if self.credentials is None and scheme.lower() != "bearer":
            return False
        if scheme.lower() == "basic":
            user, password = self.credentials or ("", "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._auth = f"Basic {token}"
            return True
        if scheme.lower() == "bearer":
            return self._bearer(dict(re.findall(r'(\w+)="([^"]*)"', params)))
        return False

    def _bearer(self, params: Mapping[str, str]) -> bool:
        realm = params.get("realm")
        if not realm:
            return False
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        try:
            got = self.session.get(realm, params=query, auth=self.credentials, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise RegistryError(f"cannot get a token from {realm}: {exc}") from None
        if got.status_code != 200:
            return False
        try:
            body = got.json()
        except ValueError:  # a malformed answer is the registry's fault, said as such
            raise RegistryError(
                f"the token service {server_text(realm)} answered with something that is not "
                f"JSON: {server_text(got.text, 120)!r}"
            ) from None
        if not isinstance(body, dict):
            raise RegistryError(f"the token service {server_text(realm)} sent no token object")
        token = body.get("token") or body.get("access_token")
        if token is not None and not isinstance(token, str):
            raise RegistryError(f"the token service {server_text(realm)} sent a token of no text")
        self._auth = f"Bearer {token}" if token else None
        return bool(token)

    # --- the distribution API ------------------------------------------------------------------

    def manifest(self, name: str, reference: str) -> tuple[str, bytes]:
        """(media type, bytes) of a manifest."""
        response = self.request(
            "GET",
            self.url(f"/v2/{name}/manifests/{reference}"),
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        _ok(response, f"reading the manifest {name}@{reference}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return media_type, response.content

    def put_blob(self, name: str, data: bytes) -> None:
        """Upload `data` unless the repository has it (`_upload`)."""
        digest = sha256_digest(data)
        if not self.has_blob(name, digest):
            self._upload(name, digest, data, len(data))

    def has_blob(self, name: str, digest: str) -> bool:
        """Whether the repository `name` has the blob `digest` (HEAD; also authenticates)."""
        return self.request("HEAD", self.url(f"/v2/{name}/blobs/{digest}")).status_code == 200

    def put_blob_file(self, name: str, digest: str, path: Path) -> bool:
        """Upload the file at `path`, whose sha256 is `digest`, streamed, unless the repository
        has it; True when it was uploaded."""
        if self.has_blob(name, digest):
            return False
        with path.open("rb") as body:
            self._upload(name, digest, body, path.stat().st_size)
        return True

    def _upload(self, name: str, digest: str, body: bytes | IO[bytes], size: int) -> None:
        """One monolithic upload: POST, then PUT of `body` with its digest."""
        started = self.request("POST", self.url(f"/v2/{name}/blobs/uploads/"))
        _ok(started, f"starting an upload to {name}")
        location = started.headers.get("Location", "")
        if location.startswith("/"):
            location = self.url(location)
        joiner = "&" if "?" in location else "?"
        done = self.request(
            "PUT",
            f"{location}{joiner}digest={digest}",
            data=body,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        _ok(done, f"uploading {digest} to {name}")

    def put_manifest(self, name: str, reference: str, data: bytes, media_type: str) -> None:
        response = self.request(
            "PUT",
            self.url(f"/v2/{name}/manifests/{reference}"),
            data=data,
            headers={"Content-Type": media_type},
        )
        _ok(response, f"writing the manifest {name}:{reference}")


#: The most bytes envbuilder reads of any registry answer: manifests, indexes, tokens and error
#: texts are kilobytes; a registry that sends more is refused, not read into memory whole.
BODY_LIMIT = 4 << 20


def _bounded(response: requests.Response) -> None:
    """Read `response`'s body (streamed) into it, refusing one over BODY_LIMIT bytes."""
    data = response.raw.read(BODY_LIMIT + 1, decode_content=True)
    response.close()
    if len(data) > BODY_LIMIT:
        raise RegistryError(
            f"{urllib.parse.urlsplit(response.url).netloc} sent more than {BODY_LIMIT} bytes "
            f"for {urllib.parse.urlsplit(response.url).path}; a registry answer is never that "
            "large: refused"
        )
    response._content = data


def server_text(text: str, limit: int = 300) -> str:
    """Text a registry sent, fit to print: at most `limit` characters, control characters
    (terminal escapes included) as '?', credentials in URLs redacted."""
    return redact(printable(text.strip()[:limit]))


def _ok(response: requests.Response, what: str) -> None:
    if response.status_code >= 300:
        detail = server_text(response.text)
        host = urllib.parse.urlsplit(response.url).netloc
        hint = (
            f"; log in first (`docker login {host}`)" if response.status_code in (401, 403) else ""
        )
        raise RegistryError(f"{what} failed: HTTP {response.status_code} {detail}{hint}")


def registry_for(client: Client, host: str) -> Registry:
    """A Registry for `host` with the engine's idea of its security and the Docker config's
    credentials for it."""
    from envbuilder.image import engine

    credentials = engine.registry_credentials(host)
    return Registry(host, "http" if _insecure(client, host) else "https", credentials)


def _insecure(client: Client, host: str) -> bool:
    """Whether the engine talks http to `host` (its insecure registries, as `docker info`)."""
    from envbuilder.image import engine

    try:
        config = engine.registry_config(client)
    except EngineError:  # an engine that does not answer: the safe choice
        return False
    index = (config.get("IndexConfigs") or {}).get(host)
    if isinstance(index, Mapping) and "Secure" in index:
        return not index["Secure"]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(c) for c in config.get("InsecureRegistryCIDRs", []))


def attach_sbom(client: Client, image_ref: str, sbom: bytes) -> str:
    """Push `sbom` as an OCI artifact whose subject is `image_ref` ("HOST/NAME@sha256:...", as
    `push` returns it), tagged `sha256-<hex>.sbom`; return "HOST/NAME@sha256:<artifact>".
    RegistryError when the registry refuses it."""
    repository, _, digest = image_ref.partition("@")
    host, _, name = repository.partition("/")
    registry = registry_for(client, DOCKER_HUB_API.get(host, host))
    media_type, data = registry.manifest(name, digest)
    subject = {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}
    if subject["digest"] != digest:
        raise RegistryError(f"{host} served {subject['digest']} for {image_ref}")
    registry.put_blob(name, EMPTY)
    registry.put_blob(name, sbom)
    manifest = artifact_manifest(subject, sbom)
    registry.put_manifest(name, referrer_tag(digest), manifest, OCI_MANIFEST)
    return f"{repository}@{sha256_digest(manifest)}"

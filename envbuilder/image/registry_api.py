"""A small OCI distribution client: put blobs and manifests, read manifests, with the Docker
config's credentials. The docker SDK pushes images only; this attaches other things to them.

    attach_sbom(client, image_ref, sbom) -> str     push `sbom` as an OCI artifact whose
                                                    `subject` is the pushed image; its reference

The artifact (OCI image spec 1.1, "artifacts" guidance): an image manifest with
`artifactType: application/vnd.cyclonedx+json`, the empty config
(`application/vnd.oci.empty.v1+json`, `{}`), one layer holding the SBOM's bytes, and `subject` =
the image's manifest descriptor.
A registry with the referrers API lists it under the image (`GET /v2/<name>/referrers/<digest>`)
and says so with an `OCI-Subject` header on the manifest PUT. For one without (Debian's
docker-registry 2.8 here) envbuilder follows the distribution spec 1.1's "Pushing Manifests with
Subject" steps: it pulls the image index tagged `sha256-<hex>` (the referrers tag schema; a 404
starts an empty index), adds the artifact's descriptor unless it is listed already (with its
`artifactType` and annotations) and pushes the index back under that tag, with `If-Match` when
the registry gave an ETag. The artifact is also tagged `sha256-<hex>.sbom`, the tag cosign's
tools look up.

    referrers(registry, name, digest) -> list[dict]   the referrers of a manifest as a client
                                                      finds them: the API, else the tag schema

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
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
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
    """The tag an SBOM of image `sha256:<hex>` goes by (`sha256-<hex>.sbom`, cosign's)."""
    return digest.replace(":", "-") + ".sbom"


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag of a subject `<alg>:<ref>`: `<alg>-<ref>`, the ref cut to
    64 characters (OCI distribution spec 1.1, "Referrers Tag Schema")."""
    alg, _, ref = digest.partition(":")
    return f"{alg}-{ref[:64]}"


def referrer_descriptor(manifest: bytes) -> dict[str, Any]:
    """The descriptor of a pushed manifest in a referrers list: its media type, digest and size,
    `artifactType` (the manifest's, else its config's media type) and all its annotations."""
    doc = json.loads(manifest)
    out = {
        "mediaType": doc.get("mediaType") or OCI_MANIFEST,
        "digest": sha256_digest(manifest),
        "size": len(manifest),
    }
    artifact_type = doc.get("artifactType") or (doc.get("config") or {}).get("mediaType")
    if artifact_type:
        out["artifactType"] = artifact_type
    if doc.get("annotations"):
        out["annotations"] = dict(doc["annotations"])
    return out


def is_index(media_type: str, data: bytes) -> bool:
    """Whether a manifest the registry served is an OCI image index (by its type, or by its
    body's `mediaType` when the registry sends none) with a `manifests` list."""
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
        return False
    return (media_type or doc.get("mediaType")) == OCI_INDEX


def referrers_index(existing: bytes | None, manifest: bytes) -> bytes | None:
    """The referrers list with `manifest`'s descriptor appended (canonical JSON), starting from
    an empty image index when there is none; None when it is listed already (the spec: no
    duplicate entries). `existing` must be an image index (is_index)."""
    index: dict[str, Any] = (
        json.loads(existing)
        if existing is not None
        else {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    )
    entry = referrer_descriptor(manifest)
    if any(isinstance(m, dict) and m.get("digest") == entry["digest"] for m in index["manifests"]):
        return None
    index["manifests"] = [*index["manifests"], entry]
    index.setdefault("mediaType", OCI_INDEX)
    return json.dumps(index, sort_keys=True, separators=(",", ":")).encode()


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

    def put_manifest(
        self,
        name: str,
        reference: str,
        data: bytes,
        media_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """PUT a manifest; the response (its `OCI-Subject` header tells a registry with the
        referrers API)."""
        response = self.request(
            "PUT",
            self.url(f"/v2/{name}/manifests/{reference}"),
            data=data,
            headers={"Content-Type": media_type, **(headers or {})},
        )
        _ok(response, f"writing the manifest {name}:{reference}")
        return response

    def find_manifest(
        self, name: str, reference: str, accept: str = ", ".join(MANIFEST_TYPES)
    ) -> tuple[str, bytes, str | None] | None:
        """(media type, bytes, ETag) of a manifest, or None when the registry answers 404."""
        response = self.request(
            "GET", self.url(f"/v2/{name}/manifests/{reference}"), headers={"Accept": accept}
        )
        if response.status_code == 404:
            return None
        _ok(response, f"reading the manifest {name}:{reference}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return media_type, response.content, response.headers.get("ETag")


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
    `push` returns it), tagged `sha256-<hex>.sbom` and listed in the referrers tag schema's
    index when the registry has no referrers API; return "HOST/NAME@sha256:<artifact>".
    RegistryError when the registry refuses it."""
    repository, _, digest = image_ref.partition("@")
    host, _, name = repository.partition("/")
    registry = registry_for(client, DOCKER_HUB_API.get(host, host))
    return f"{repository}@{attach_sbom_to(registry, name, digest, sbom, host)}"


#: How often the referrers index is pulled and pushed again when a conditional PUT finds it
#: changed by another client (412).
INDEX_ATTEMPTS = 3


def attach_sbom_to(registry: Registry, name: str, digest: str, sbom: bytes, host: str = "") -> str:
    """attach_sbom on a Registry: the artifact manifest's digest."""
    media_type, data = registry.manifest(name, digest)
    subject = {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}
    if subject["digest"] != digest:
        raise RegistryError(f"{host or registry.host} served {subject['digest']} for {digest}")
    registry.put_blob(name, EMPTY)
    registry.put_blob(name, sbom)
    manifest = artifact_manifest(subject, sbom)
    put = registry.put_manifest(name, referrer_tag(digest), manifest, OCI_MANIFEST)
    if not put.headers.get("OCI-Subject"):  # no referrers API: the spec's client steps
        update_referrers_tag(registry, name, digest, manifest)
    return sha256_digest(manifest)


def update_referrers_tag(registry: Registry, name: str, subject: str, manifest: bytes) -> None:
    """List `manifest` in the image index tagged by the referrers tag schema for `subject`
    (distribution spec 1.1, "Pushing Manifests with Subject"): pull it (404: an empty index),
    refuse a tag that holds something else, add the descriptor unless it is there, push it back
    (If-Match the ETag the registry gave, again from the pull on 412)."""
    tag = referrers_tag(subject)
    for _ in range(INDEX_ATTEMPTS):
        found = registry.find_manifest(name, tag, OCI_INDEX)
        existing, etag = None, None
        if found is not None:
            media_type, existing, etag = found
            if not is_index(media_type, existing):
                raise RegistryError(
                    f"{name}:{tag} holds a {server_text(media_type or 'manifest', 80)}, not the "
                    "referrers image index the OCI distribution spec names that tag for; the "
                    "SBOM was pushed (tag " + referrer_tag(subject) + ") but is not listed there"
                )
        updated = referrers_index(existing, manifest)
        if updated is None:
            return
        conditional = {"If-Match": etag} if etag else {}
        response = registry.request(
            "PUT",
            registry.url(f"/v2/{name}/manifests/{tag}"),
            data=updated,
            headers={"Content-Type": OCI_INDEX, **conditional},
        )
        if response.status_code == 412:  # changed since the pull: pull it again
            continue
        _ok(response, f"writing the referrers index {name}:{tag}")
        return
    raise RegistryError(
        f"{name}:{tag} kept changing while envbuilder added the SBOM to it ({INDEX_ATTEMPTS} "
        "tries); another client is writing it: push again"
    )


def referrers(registry: Registry, name: str, digest: str) -> list[dict[str, Any]]:
    """The referrers of `digest` as the spec tells a client to find them: the referrers API
    (`GET /v2/<name>/referrers/<digest>`), else, on its 404, the image index tagged by the
    referrers tag schema (none when that is not a valid image index)."""
    response = registry.request(
        "GET",
        registry.url(f"/v2/{name}/referrers/{digest}"),
        headers={"Accept": OCI_INDEX},
    )
    if response.status_code == 404:
        found = registry.find_manifest(name, referrers_tag(digest), OCI_INDEX)
        if found is None or not is_index(found[0], found[1]):
            return []
        data = found[1]
    else:
        _ok(response, f"listing the referrers of {name}@{digest}")
        data = response.content
    try:
        manifests = json.loads(data).get("manifests")
    except (ValueError, AttributeError):
        raise RegistryError(
            f"the referrers of {name}@{digest} are not an image index: "
            f"{server_text(data.decode('utf-8', 'replace'), 120)!r}"
        ) from None
    return [m for m in manifests or [] if isinstance(m, dict)]

"""The OCI distribution spec 1.1's referrers fallback (issue 34): `push` attaches the SBOM with
`subject` = the image; a registry with the referrers API says so (`OCI-Subject`) and lists it;
for one without, envbuilder keeps the image index tagged `sha256-<hex>` (the referrers tag
schema) listing it. A fake registry on 127.0.0.1 (in memory, one per test) serves both kinds;
`referrers()` finds the SBOM the way the spec tells a client to. No real registry is run here
(docs/sbom.md)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from envbuilder.core.errors import RegistryError
from envbuilder.image.registry_api import (
    OCI_INDEX,
    OCI_MANIFEST,
    SBOM_MEDIA_TYPE,
    Registry,
    attach_sbom_to,
    referrer_descriptor,
    referrer_tag,
    referrers,
    referrers_index,
    referrers_tag,
)

NAME = "team/cpu"
SBOM = b'{"bomFormat":"CycloneDX","specVersion":"1.6"}\n'


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class FakeRegistry:
    """Blobs, manifests (by digest and by tag) and the requests seen; `referrers_api` serves
    `/v2/<name>/referrers/<digest>` and answers a PUT with `subject` with `OCI-Subject`."""

    referrers_api: bool
    etags: bool = False
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    conflicts: int = 0  # answer this many conditional PUTs with 412

    def handle(self, r: http.server.BaseHTTPRequestHandler, method: str) -> None:
        path = r.path.split("?")[0]
        self.seen.append((method, r.path, dict(r.headers)))
        body = r.rfile.read(int(r.headers.get("Content-Length") or 0))
        parts = path.split("/")
        if "/blobs/uploads/" in path:
            if method == "POST":
                return self._answer(r, 202, b"", Location=f"/v2/{NAME}/blobs/uploads/u1")
            digest = r.path.split("digest=")[1]
            self.blobs[digest] = body
            return self._answer(r, 201, b"")
        if "/blobs/" in path:
            found = self.blobs.get(parts[-1])
            return self._answer(r, 200 if found is not None else 404, found or b"")
        if "/referrers/" in path:
            return self._referrers(r, parts[-1])
        reference = parts[-1]
        if method == "PUT":
            return self._put_manifest(r, reference, body)
        found_manifest = self.manifests.get(reference)
        if found_manifest is None:
            return self._answer(r, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
        media_type, data = found_manifest
        extra = {"ETag": _etag(data)} if self.etags else {}
        return self._answer(r, 200, data, Content_Type=media_type, **extra)

    def _referrers(self, r: http.server.BaseHTTPRequestHandler, subject: str) -> None:
        if not self.referrers_api:
            return self._answer(r, 404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}')
        listed = [
            referrer_descriptor(data)
            for _, data in set(self.manifests.values())
            if json.loads(data).get("subject", {}).get("digest") == subject
        ]
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed}
        return self._answer(r, 200, json.dumps(index).encode(), Content_Type=OCI_INDEX)

    def _put_manifest(
        self, r: http.server.BaseHTTPRequestHandler, reference: str, body: bytes
    ) -> None:
        current = self.manifests.get(reference)
        if "If-Match" in r.headers and self.conflicts:
            self.conflicts -= 1
            return self._answer(r, 412, b"changed")
        if current and "If-Match" in r.headers and r.headers["If-Match"] != _etag(current[1]):
            return self._answer(r, 412, b"changed")
        media_type = r.headers["Content-Type"]
        self.manifests[reference] = self.manifests[_digest(body)] = (media_type, body)
        headers = {"Docker-Content-Digest": _digest(body)}
        subject = json.loads(body).get("subject")
        if self.referrers_api and subject:
            headers["OCI-Subject"] = subject["digest"]
        return self._answer(r, 201, b"", **headers)

    @staticmethod
    def _answer(r: http.server.BaseHTTPRequestHandler, status: int, body: bytes, **h: str) -> None:
        r.send_response(status)
        for key, value in h.items():
            r.send_header(key.replace("_", "-"), value)
        r.send_header("Content-Length", str(len(body)))
        r.end_headers()
        r.wfile.write(body)


def _etag(data: bytes) -> str:
    return f'"{_digest(data)}"'


def _serve(fake: FakeRegistry) -> Iterator[Registry]:
    class _Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.handle(self, self.command)

        do_HEAD = do_POST = do_PUT = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Registry(f"127.0.0.1:{server.server_address[1]}", "http")
    finally:
        server.shutdown()
        server.server_close()


def _with_image(fake: FakeRegistry) -> str:
    image = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
    fake.manifests["latest"] = fake.manifests[_digest(image)] = (OCI_MANIFEST, image)
    return _digest(image)


@pytest.fixture
def plain() -> Iterator[tuple[FakeRegistry, Registry]]:
    """A registry without the referrers API (docker-registry 2.8's kind)."""
    fake = FakeRegistry(referrers_api=False)
    for registry in _serve(fake):
        yield fake, registry


@pytest.fixture
def modern() -> Iterator[tuple[FakeRegistry, Registry]]:
    """A registry with the referrers API."""
    fake = FakeRegistry(referrers_api=True)
    for registry in _serve(fake):
        yield fake, registry


def test_referrers_tag_is_alg_dash_ref_cut_to_64() -> None:
    assert referrers_tag("sha256:" + "a" * 64) == "sha256-" + "a" * 64
    assert referrers_tag("sha512:" + "b" * 128) == "sha512-" + "b" * 64
    assert referrer_tag("sha256:" + "a" * 64) == "sha256-" + "a" * 64 + ".sbom"


def test_referrers_index_starts_empty_appends_once_and_keeps_other_entries() -> None:
    manifest = json.dumps(
        {
            "mediaType": OCI_MANIFEST,
            "artifactType": SBOM_MEDIA_TYPE,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json"},
            "annotations": {"org.example": "x"},
        }
    ).encode()
    first = referrers_index(None, manifest)
    assert first is not None
    doc = json.loads(first)
    assert (doc["schemaVersion"], doc["mediaType"]) == (2, OCI_INDEX)
    assert doc["manifests"] == [
        {
            "mediaType": OCI_MANIFEST,
            "digest": _digest(manifest),
            "size": len(manifest),
            "artifactType": SBOM_MEDIA_TYPE,
            "annotations": {"org.example": "x"},
        }
    ]
    assert referrers_index(first, manifest) is None  # no duplicate entry
    signature = json.dumps({"config": {"mediaType": "application/vnd.example.sig"}}).encode()
    both = json.loads(referrers_index(first, signature) or b"")
    assert [m["artifactType"] for m in both["manifests"]] == [
        SBOM_MEDIA_TYPE,
        "application/vnd.example.sig",  # no artifactType: the config's media type
    ]


def test_without_the_referrers_api_the_sbom_is_listed_in_the_tag_schema_index(
    plain: tuple[FakeRegistry, Registry],
) -> None:
    fake, registry = plain
    image = _with_image(fake)
    artifact = attach_sbom_to(registry, NAME, image, SBOM)
    media_type, data = fake.manifests[referrers_tag(image)]
    assert media_type == OCI_INDEX
    index = json.loads(data)
    (entry,) = index["manifests"]
    assert (entry["digest"], entry["artifactType"]) == (artifact, SBOM_MEDIA_TYPE)
    assert fake.manifests[referrer_tag(image)][1] == fake.manifests[artifact][1]  # cosign's tag
    # a client following the spec: the referrers API answers 404, the tag schema lists it
    (found,) = referrers(registry, NAME, image)
    assert found == entry
    manifest = json.loads(fake.manifests[found["digest"]][1])
    assert manifest["subject"]["digest"] == image
    assert fake.blobs[manifest["layers"][0]["digest"]] == SBOM
    # pushing the same SBOM again adds no second entry; a new one is appended
    assert attach_sbom_to(registry, NAME, image, SBOM) == artifact
    assert json.loads(fake.manifests[referrers_tag(image)][1]) == index
    other = attach_sbom_to(registry, NAME, image, SBOM + b" ")
    assert [m["digest"] for m in referrers(registry, NAME, image)] == [artifact, other]


def test_with_the_referrers_api_no_tag_schema_index_is_written(
    modern: tuple[FakeRegistry, Registry],
) -> None:
    fake, registry = modern
    image = _with_image(fake)
    artifact = attach_sbom_to(registry, NAME, image, SBOM)
    assert referrers_tag(image) not in fake.manifests
    assert not any(m == "GET" and referrers_tag(image) in p for m, p, _ in fake.seen)
    (found,) = referrers(registry, NAME, image)
    assert (found["digest"], found["artifactType"]) == (artifact, SBOM_MEDIA_TYPE)


def test_a_tag_schema_tag_that_is_not_an_index_is_reported_not_overwritten(
    plain: tuple[FakeRegistry, Registry],
) -> None:
    fake, registry = plain
    image = _with_image(fake)
    squatter = fake.manifests["latest"]
    fake.manifests[referrers_tag(image)] = squatter
    with pytest.raises(RegistryError, match="not the referrers image index"):
        attach_sbom_to(registry, NAME, image, SBOM)
    assert fake.manifests[referrers_tag(image)] == squatter
    assert referrers(registry, NAME, image) == []  # the spec: assume no referrers


def test_the_index_is_pushed_if_match_its_etag_and_pulled_again_on_412(
    plain: tuple[FakeRegistry, Registry],
) -> None:
    fake, registry = plain
    fake.etags = True
    image = _with_image(fake)
    attach_sbom_to(registry, NAME, image, SBOM)  # first: nothing to match
    fake.conflicts = 1
    second = attach_sbom_to(registry, NAME, image, SBOM + b" ")
    puts = [h for m, p, h in fake.seen if m == "PUT" and p.endswith("/" + referrers_tag(image))]
    assert "If-Match" not in puts[0] and all("If-Match" in h for h in puts[1:])
    assert len(puts) == 3  # the 412, then the one that succeeded
    assert second in [m["digest"] for m in referrers(registry, NAME, image)]
    fake.conflicts = 5
    with pytest.raises(RegistryError, match="kept changing"):
        attach_sbom_to(registry, NAME, image, SBOM + b"  ")

"""The SBOM `envbuilder build` writes per artifact (issue 23): CycloneDX JSON made with the
CycloneDX Python library, valid against the CycloneDX schema, listing every pylock package with
the sha256 of the file installed, the apt pins and the base image, the same bytes for the same
lock. The acceptance case builds the shipped cpu env's image on the real engine."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from shipped import copy_shipped

from envbuilder.commands._cli import main
from envbuilder.core.project import Project
from envbuilder.lock import lockfile
from envbuilder.lock.sbom import sbom_bytes, sbom_path
from envbuilder.lock.wheelcache import locked_files
from envbuilder.targets.base import Artifact

ENV = "cpu"


def _pylock_hashes(pylock: Path) -> dict[str, set[str]]:
    """Every package of a pylock -> the sha256 of each file it lists (wheels and sdist)."""
    doc = tomllib.loads(pylock.read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for pkg in doc["packages"]:
        files = [*pkg.get("wheels", []), *([pkg["sdist"]] if "sdist" in pkg else [])]
        out[pkg["name"]] = {f["hashes"]["sha256"] for f in files}
    return out


def _by_purl_type(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["components"] if c.get("purl", "").startswith(f"pkg:{kind}/")}


def _assert_lists_the_lock(doc: dict[str, Any], project: Project, target: str) -> None:
    lock = lockfile.load_env_lock(project, ENV)
    assert lock is not None
    t = lock.targets[target]
    pypi = _by_purl_type(doc, "pypi")
    hashes = _pylock_hashes(project.lockfiles / t.pylock)
    assert set(pypi) == set(hashes)  # every pylock package, nothing else
    installed = {
        f.name: f.sha256 for f in locked_files(project.lockfiles / t.pylock, t.platform, t.python)
    }
    for name, component in pypi.items():
        (sha,) = [h["content"] for h in component["hashes"] if h["alg"] == "SHA-256"]
        assert sha == installed[name] and sha in hashes[name]
        assert component["purl"].startswith(f"pkg:pypi/{name}@")
    deb = _by_purl_type(doc, "deb")
    pins = {n: v for stage in t.apt.values() for n, v in stage.items()}
    assert {n: c["version"] for n, c in deb.items()} == pins
    assert all(c["purl"].startswith("pkg:deb/debian/") for c in deb.values())
    base = [c for c in doc["components"] if c["type"] == "container"]
    assert t.base_image is not None
    assert [f"{c['name']}@{c['version']}" for c in base] == [t.base_image]


def test_sbom_of_every_shipped_cpu_target_validates_and_lists_the_lock() -> None:
    root = Path(__file__).resolve().parents[2]
    project = Project.from_spec(root / "environments.toml")
    for target, digest in (("docker", "sha256:" + "1" * 64), ("wsl2", "2" * 64), ("native", None)):
        artifact = Artifact(target, ENV, "ref", digest)
        data = sbom_bytes(project, ENV, target, artifact)
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
        doc = json.loads(data)
        if target != "native":
            _assert_lists_the_lock(doc, project, target)
        assert doc["metadata"]["component"]["name"] == "envbuilder/cpu"
        assert sbom_bytes(project, ENV, target, artifact) == data  # same lock, same bytes


@pytest.mark.slow
def test_build_writes_the_cpu_images_sbom(docker_client: Any, tmp_path: Path) -> None:
    """Acceptance: the cpu image's SBOM, written by `envbuilder build --target docker`,
    validates against the CycloneDX schema and lists every pylock package with its sha256."""
    spec = copy_shipped(tmp_path) / "environments.toml"
    assert main(["-q", "build", "--target", "docker", "--env", ENV, "--spec", str(spec)]) == 0
    project = Project.from_spec(spec)
    path = sbom_path(project, ENV, "docker")
    text = path.read_text(encoding="utf-8")
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.6")
    _assert_lists_the_lock(doc, project, "docker")
    image = docker_client.images.get(doc["metadata"]["component"]["description"].split(": ")[-1])
    (root_hash,) = doc["metadata"]["component"]["hashes"]
    assert f"sha256:{root_hash['content']}" == image.id  # the image the lock predicts
    # `arch` is each package's own, from the image's dpkg status: `all` for media-types; a
    # package of the build stage only (ca-certificates) is not in the image: the lock's arch
    arch = {
        n: c["purl"].split("arch=")[1].split("&")[0] for n, c in _by_purl_type(doc, "deb").items()
    }
    assert (arch["media-types"], arch["readline-common"], arch["python3"]) == (
        "all",
        "all",
        "amd64",
    )
    assert arch["ca-certificates"] == "amd64"
    before = path.read_bytes()
    assert main(["-q", "build", "--target", "docker", "--env", ENV, "--spec", str(spec)]) == 0
    assert path.read_bytes() == before  # up to date: the same bytes again


# --- push attaches it to the image in the registry ----------------------------------------------


def _pushed_tiny(tmp_path: Path, registry: str, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A tiny image (the lock label, no RUN step) built, then pushed to `registry`."""
    from test_cli_json import TINY_DOCKERFILE
    from test_docker_target import make_project

    project = make_project(tmp_path / "demo", dockerfile=TINY_DOCKERFILE)
    spec = str(project.spec_path)
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    assert main(["-q", "build", "--target", "docker", "--env", "demo", "--spec", spec]) == 0
    repository = f"{registry}/envbuilder-i23-sbom"
    assert main(["-q", "push", "--env", "demo", "--registry", repository, "--spec", spec]) == 0
    return project


def _referrer(registry: str, name: str, digest: str, auth: tuple[str, str] | None) -> Any:
    import requests

    from envbuilder.image.registry_api import OCI_MANIFEST, referrer_tag

    url = f"http://{registry}/v2/{name}/manifests/{referrer_tag(digest)}"
    got = requests.get(url, headers={"Accept": OCI_MANIFEST}, auth=auth, timeout=60)
    assert got.status_code == 200, got.text
    return got.json()


def _check_attached(project: Project, registry: str, auth: tuple[str, str] | None) -> None:
    import requests

    lock = lockfile.load_env_lock(project, "demo")
    assert lock is not None
    recorded = lock.artifacts["docker"]
    repository, _, image_digest = recorded["repo_digest"].partition("@")
    name = repository.split("/", 1)[1]
    manifest = _referrer(registry, name, image_digest, auth)
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert manifest["subject"]["digest"] == image_digest  # it refers to the pushed image
    (layer,) = manifest["layers"]
    sbom = sbom_path(project, "demo", "docker").read_bytes()  # what build wrote
    assert layer["mediaType"] == "application/vnd.cyclonedx+json"
    blob = requests.get(
        f"http://{registry}/v2/{name}/blobs/{layer['digest']}", auth=auth, timeout=60
    )
    assert blob.content == sbom
    assert recorded["sbom"].startswith(f"{repository}@sha256:")
    # found as the OCI distribution spec tells a client: the referrers API, else (docker-registry
    # 2.8 has none) the image index tagged `sha256-<hex>` (the referrers tag schema)
    from envbuilder.image.registry_api import Registry, referrers

    listed = referrers(Registry(registry, "http", auth), name, image_digest)
    assert recorded["sbom"].partition("@")[2] in [m["digest"] for m in listed]
    import contextlib

    import docker

    with contextlib.suppress(docker.errors.ImageNotFound):  # push's local tag of the image
        docker.from_env().images.remove(f"{repository}:{lock.targets['docker'].pylock_sha256[:12]}")


def test_push_attaches_the_sbom_as_an_oci_referrer_of_the_image(
    tmp_path: Path, docker_client: Any, registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text("{}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    _check_attached(_pushed_tiny(tmp_path, registry, monkeypatch), registry, None)


def test_push_to_a_registry_with_auth_uses_the_docker_configs_credentials(
    tmp_path: Path,
    docker_client: Any,
    auth_registry: str,
    auth_registry_credentials: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import base64

    config = tmp_path / "docker-config"
    config.mkdir()
    token = base64.b64encode(":".join(auth_registry_credentials).encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {auth_registry: {"auth": token}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    project = _pushed_tiny(tmp_path, auth_registry, monkeypatch)
    _check_attached(project, auth_registry, auth_registry_credentials)

"""envbuilder.image.oci.saved: every `docker save` layout gives the same config and layers.

The archives here are made the way each engine writes them (file names, links, compression,
nested indexes), so a reader that knew only Docker 24's `<id>/layer.tar` (the fault of issue 29)
fails these; tests/image/test_engines.py runs the same reader against the real engines.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envbuilder.core.errors import EngineError
from envbuilder.image.oci.loadarchive import LayerBlob, image_manifest, load_stream
from envbuilder.image.oci.saved import SavedImage, read_saved


def _layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


BASE = _layer({"etc/os-release": b"debian\n"})
TOP = _layer({"opt/venv/bin/python": b"#!python\n"})
TOP2 = _layer({"opt/venv/lib/torch.py": b"x = 1\n" * 1000})


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _config(layers: list[bytes]) -> bytes:
    doc = {
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [_sha(x) for x in layers]},
    }
    return json.dumps(doc).encode()


def _tar(members: list[tuple[str, bytes | str]]) -> io.BytesIO:
    """A tar of (name, bytes) files and (name, "->target") symlinks, in the order given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if isinstance(data, str):
                info.type = tarfile.SYMTYPE
                info.linkname = data.removeprefix("->")
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def docker_archive(layers: list[bytes]) -> io.BytesIO:
    """Docker <= 24: <id>/layer.tar, a repeated layer as a symlink, <hex>.json config."""
    config = _config(layers)
    names: list[str] = []
    members: list[tuple[str, bytes | str]] = []
    seen: dict[bytes, str] = {}
    for i, layer in enumerate(layers):
        name = f"{i:064x}/layer.tar"
        if layer in seen:
            members.append((name, f"->../{seen[layer]}"))
        else:
            seen[layer] = name
            members.append((name, layer))
        members.append((f"{i:064x}/VERSION", b"1.0"))
        names.append(name)
    cfg = f"{_sha(config)[7:]}.json"
    manifest = [{"Config": cfg, "RepoTags": ["x:y"], "Layers": names}]
    return _tar([*members, (cfg, config), ("manifest.json", json.dumps(manifest).encode())])


def _oci_blobs(
    layers: list[bytes], compress: bool
) -> tuple[list[tuple[str, bytes | str]], dict[str, Any]]:
    config = _config(layers)
    stored = [gzip.compress(x, mtime=0) if compress else x for x in layers]
    layer_type = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "x", "digest": _sha(config), "size": len(config)},
        "layers": [{"mediaType": layer_type, "digest": _sha(s), "size": len(s)} for s in stored],
    }
    mbytes = json.dumps(manifest).encode()
    blobs: list[tuple[str, bytes | str]] = [
        (f"blobs/sha256/{_sha(b)[7:]}", b) for b in [config, *stored, mbytes]
    ]
    descriptor = {
        "mediaType": manifest["mediaType"],
        "digest": _sha(mbytes),
        "size": len(mbytes),
        "platform": {"os": "linux", "architecture": "amd64"},
    }
    return blobs, {"config": config, "stored": stored, "descriptor": descriptor}


def oci_with_manifest_json(layers: list[bytes], compress: bool) -> io.BytesIO:
    """Docker 25+: the OCI layout, plus manifest.json naming blobs (gzip'd: containerd store)."""
    blobs, parts = _oci_blobs(layers, compress)
    docker_manifest = [
        {
            "Config": f"blobs/sha256/{_sha(parts['config'])[7:]}",
            "RepoTags": None,
            "Layers": [f"blobs/sha256/{_sha(s)[7:]}" for s in parts["stored"]],
        }
    ]
    index = {"schemaVersion": 2, "manifests": [parts["descriptor"]]}
    return _tar(
        [
            *blobs,
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", json.dumps(index).encode()),
            ("manifest.json", json.dumps(docker_manifest).encode()),
        ]
    )


def oci_nested_index(layers: list[bytes]) -> io.BytesIO:
    """No manifest.json: index.json -> an image index (linux/amd64, linux/arm64, an
    attestation) -> the manifest."""
    blobs, parts = _oci_blobs(layers, compress=True)
    other = dict(parts["descriptor"], platform={"os": "linux", "architecture": "arm64"})
    other["digest"] = "sha256:" + "1" * 64
    attestation = dict(
        parts["descriptor"],
        platform={"os": "unknown", "architecture": "unknown"},
        annotations={"vnd.docker.reference.type": "attestation-manifest"},
    )
    inner = json.dumps(
        {"schemaVersion": 2, "manifests": [other, parts["descriptor"], attestation]}
    ).encode()
    inner_type = "application/vnd.oci.image.index.v1+json"
    outer = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": inner_type, "digest": _sha(inner), "size": len(inner)}],
    }
    return _tar(
        [
            *blobs,
            (f"blobs/sha256/{_sha(inner)[7:]}", inner),
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", json.dumps(outer).encode()),
        ]
    )


LAYOUTS: dict[str, Callable[[list[bytes]], io.BytesIO]] = {
    "docker-archive": docker_archive,
    "oci+manifest.json, plain layers (classic store)": lambda x: oci_with_manifest_json(x, False),
    "oci+manifest.json, gzip layers (containerd store)": lambda x: oci_with_manifest_json(x, True),
    "oci index only, nested, attestation": oci_nested_index,
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_gives_the_config_and_the_kept_layers(layout: str, tmp_path: Path) -> None:
    layers = [BASE, TOP, TOP2]
    saved = read_saved(LAYOUTS[layout](layers), lambda d: d != _sha(BASE), tmp_path, "img")
    assert saved.config_bytes == _config(layers)
    assert sorted(saved.layers) == [1, 2]  # the base layer is not kept
    assert saved.layers[1].read_bytes() == TOP  # uncompressed, whatever the stream held
    assert saved.layers[2].read_bytes() == TOP2
    assert saved.sizes == [len(BASE), len(TOP), len(TOP2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in saved.layers.values()
    )


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_repeated_layer_is_kept_twice(layout: str, tmp_path: Path) -> None:
    saved = read_saved(LAYOUTS[layout]([BASE, TOP, TOP]), lambda d: True, tmp_path, "img")
    assert saved.layers[1] != saved.layers[2]
    assert saved.layers[1].read_bytes() == saved.layers[2].read_bytes() == TOP


def test_a_layer_that_is_not_what_the_config_says_is_refused(tmp_path: Path) -> None:
    stream = docker_archive([BASE, TOP])
    data = stream.getvalue().replace(b"#!python", b"#!pythoX")
    with pytest.raises(EngineError, match="but the config says"):
        read_saved(io.BytesIO(data), lambda d: True, tmp_path, "img")


def test_a_stream_without_a_manifest_or_index_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"neither manifest\.json nor index\.json"):
        read_saved(_tar([("x", b"y")]), lambda d: True, tmp_path, "img")


def test_a_truncated_stream_is_an_engine_error(tmp_path: Path) -> None:
    data = oci_with_manifest_json([BASE, TOP], True).getvalue()
    with pytest.raises(EngineError):
        read_saved(io.BytesIO(data[: len(data) // 2]), lambda d: True, tmp_path, "img")


def test_the_load_archive_reads_back_as_the_same_image(tmp_path: Path) -> None:
    """What envbuilder loads is itself a layout it can read: config, layers, sizes."""
    config = _config([BASE, TOP])
    files = []
    for name, data in (("base", BASE), ("top", TOP)):
        (tmp_path / name).write_bytes(data)
        files.append(LayerBlob(_sha(data), len(data), tmp_path / name))
    manifest = image_manifest(config, files)
    archive = io.BytesIO(b"".join(load_stream(config, manifest, files)))
    saved: SavedImage = read_saved(archive, lambda d: True, tmp_path / "out", "img")
    assert saved.config_bytes == config
    assert saved.layers[1].read_bytes() == TOP
    # The manifest is a function of the config and the layers' uncompressed sizes only.
    doc = json.loads(manifest)
    assert [x["digest"] for x in doc["layers"]] == [_sha(BASE), _sha(TOP)]
    assert doc["config"]["digest"] == _sha(config)

"""envbuilder.image.oci without an engine: the layer normaliser on real tar files, the
deterministic config, the image documents; and envbuilder.image.tar's shared rules."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envbuilder.core.errors import BuildError
from envbuilder.image import repro
from envbuilder.image.oci import blobs
from envbuilder.image.oci.config import deterministic_config
from envbuilder.image.oci.diff import first_file_difference
from envbuilder.image.oci.layers import (
    ReadLayer,
    WrittenLayer,
    keep_pyc_heads,
    read_layer,
    write_layer,
)

SDE = 1_795_456_873
DAY = SDE // 86400


@dataclass
class M:
    """A member of a test layer."""

    name: str
    data: bytes | None = b""  # None: a directory
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime: int = 1_800_000_000
    link: str = ""
    kind: bytes = tarfile.REGTYPE
    pax: dict[str, str] = field(default_factory=dict)


def layer_tar(path: Path, members: Iterable[M], uname: str = "") -> Path:
    """Write a layer tar the way an engine would (any order, build-time mtimes, names)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.mode, info.uid, info.gid, info.mtime = m.mode, m.uid, m.gid, m.mtime
            info.uname = info.gname = uname
            info.pax_headers = dict(m.pax)
            if m.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif m.kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.type, info.linkname = m.kind, m.link
                tar.addfile(info)
            else:
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
    return path


def normalise(
    tmp_path: Path,
    members: list[M],
    name: str = "layer",
    sources: set[str] | None = None,
    sde: int = SDE,
) -> WrittenLayer:
    raw = layer_tar(tmp_path / f"{name}.raw.tar", members)
    with raw.open("r+b") as fh:
        layer: ReadLayer = read_layer(fh, sde)
        keep_pyc_heads(layer, layer.python_sources() if sources is None else sources)
        return write_layer(layer, tmp_path / f"{name}.tar", sde)


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def content(path: Path, name: str) -> bytes:
    with tarfile.open(path) as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


APT_LAYER = [
    M("usr", None, 0o755),
    M("usr/bin", None, 0o755),
    M("usr/bin/python3", b"\x7fELF python", 0o755),
    M("var", None, 0o755),
    M("var/log", None, 0o755),
    M("var/log/apt", None, 0o755),
    M("var/log/apt/history.log", b"Start-Date: 2026-12-03  07:13:01\n"),
    M("var/log/dpkg.log", b"2026-12-03 07:13:01 install python3\n"),
    M("var/cache", None, 0o755),
    M("var/cache/ldconfig", None, 0o700),
    M("var/cache/ldconfig/aux-cache", b"inode 1234 ctime 99"),
    M("var/cache/debconf", None, 0o755),
    M("var/cache/debconf/config.dat", b"Name: x\n"),
    M("var/cache/debconf/config.dat-old", b"Name: old\n"),
    M("var/lib", None, 0o755),
    M("var/lib/dpkg", None, 0o755),
    M("var/lib/dpkg/status", b"Package: python3\n"),
    M("var/lib/dpkg/status-old", b"Package: old\n"),
    M("etc", None, 0o755),
    M("etc/machine-id", b"0123456789abcdef0123456789abcdef\n", 0o444),
]


def test_same_content_gives_the_same_layer_whatever_order_mtimes_and_names(tmp_path: Path) -> None:
    first = normalise(tmp_path, APT_LAYER, "a")
    later = [M(m.name, m.data, m.mode, m.uid, m.gid, m.mtime + 3600 * 24) for m in APT_LAYER]
    again = layer_tar(tmp_path / "b.raw.tar", list(reversed(later)), uname="root")
    with again.open("r+b") as fh:
        second = write_layer(read_layer(fh, SDE), tmp_path / "b.tar", SDE)
    assert first.diff_id == second.diff_id
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert first.diff_id == blobs.file_blob(tmp_path / "a.tar").digest


def test_entries_sorted_one_mtime_numeric_owners(tmp_path: Path) -> None:
    out = normalise(tmp_path, APT_LAYER)
    infos = members(out.path)
    names = list(infos)
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert {i.mtime for i in infos.values()} == {SDE}
    assert {(i.uname, i.gname) for i in infos.values()} == {("", "")}


def test_build_noise_dropped_directories_kept(tmp_path: Path) -> None:
    out = normalise(tmp_path, APT_LAYER)
    names = set(members(out.path))
    for gone in (
        "var/log/apt/history.log",
        "var/log/dpkg.log",
        "var/cache/ldconfig/aux-cache",
        "var/cache/debconf/config.dat-old",
        "var/lib/dpkg/status-old",
    ):
        assert gone not in names
        assert gone in out.stats.dropped
    # The directories the engine recorded stay (their mode overrides the layer below's).
    assert {"var/log", "var/log/apt", "var/cache/ldconfig"} <= names
    assert {"usr/bin/python3", "var/lib/dpkg/status", "var/cache/debconf/config.dat"} <= names


def test_machine_id_emptied(tmp_path: Path) -> None:
    out = normalise(tmp_path, APT_LAYER)
    assert content(out.path, "etc/machine-id") == b""
    assert members(out.path)["etc/machine-id"].mode == 0o444


def test_whiteouts_kept_even_under_noise_paths(tmp_path: Path) -> None:
    layer = [
        M("var", None, 0o755),
        M("var/log", None, 0o755),
        M("var/log/.wh.bootstrap.log", b"", 0),
        M("tmp", None, 0o1777),
        M("tmp/.wh..wh..opq", b"", 0),
        M("tmp/scratch", b"x"),
    ]
    names = set(members(normalise(tmp_path, layer).path))
    assert "var/log/.wh.bootstrap.log" in names  # deleting a base file is content
    assert "tmp/.wh..wh..opq" in names
    assert "tmp/scratch" not in names


def test_no_parent_directories_added(tmp_path: Path) -> None:
    """A layer's directory entry overrides the one below: only recorded ones are written."""
    names = set(members(normalise(tmp_path, [M("opt/venv/bin/python", b"x")]).path))
    assert names == {"opt/venv/bin/python"}


def test_shadow_days_clamped_passwords_kept(tmp_path: Path) -> None:
    shadow = (
        b"root:*:19000:0:99999:7:::\n"
        b"envbuilder:$6$salt$hash:" + str(DAY + 10).encode() + b":0:99999:7:::\n"
    )
    out = normalise(tmp_path, [M("etc", None, 0o755), M("etc/shadow", shadow, 0o640, 0, 42)])
    text = content(out.path, "etc/shadow").decode()
    assert f"envbuilder:$6$salt$hash:{DAY}:" in text  # the build day became SDE's day
    assert "root:*:19000:" in text  # earlier days are left alone
    assert members(out.path)["etc/shadow"].gid == 42


def _pyc(flags: int, mtime: int) -> bytes:
    return (
        b"\xa7\r\r\n"
        + flags.to_bytes(4, "little")
        + mtime.to_bytes(4, "little")
        + (10).to_bytes(4, "little")
        + b"code"
    )


def test_timestamp_pyc_gets_sde_when_its_source_is_normalised(tmp_path: Path) -> None:
    layer = [
        M("app", None, 0o755),
        M("app/m.py", b"x = 1\n"),
        M("app/__pycache__", None, 0o755),
        M("app/__pycache__/m.cpython-311.pyc", _pyc(0, 1_800_000_123)),
        M("app/__pycache__/base.cpython-311.pyc", _pyc(0, 1_700_000_000)),
        M("app/__pycache__/h.cpython-311.pyc", _pyc(3, 77)),
    ]
    out = normalise(tmp_path, layer)
    fixed = content(out.path, "app/__pycache__/m.cpython-311.pyc")
    assert int.from_bytes(fixed[8:12], "little") == SDE
    # base.py is not in a normalised layer: its pyc keeps the base file's mtime.
    kept = content(out.path, "app/__pycache__/base.cpython-311.pyc")
    assert int.from_bytes(kept[8:12], "little") == 1_700_000_000
    # hash-based pycs do not depend on mtimes and are left alone.
    assert content(out.path, "app/__pycache__/h.cpython-311.pyc") == _pyc(3, 77)


def test_pyc_of_a_source_in_another_normalised_layer_is_fixed(tmp_path: Path) -> None:
    layer = [M("app/__pycache__/m.cpython-311.pyc", _pyc(0, 1_800_000_123))]
    out = normalise(tmp_path, layer, sources={"app/m.py"})
    assert int.from_bytes(content(out.path, layer[0].name)[8:12], "little") == SDE


def test_hard_links_point_at_the_first_member_in_order(tmp_path: Path) -> None:
    layer = [
        M("usr/bin/zz", b"binary", 0o755),
        M("usr/bin/aa", kind=tarfile.LNKTYPE, link="usr/bin/zz"),
    ]
    infos = members(normalise(tmp_path, layer).path)
    assert infos["usr/bin/aa"].isreg() and infos["usr/bin/aa"].size == 6
    assert infos["usr/bin/zz"].islnk() and infos["usr/bin/zz"].linkname == "usr/bin/aa"


def test_xattrs_kept_other_pax_records_dropped(tmp_path: Path) -> None:
    cap = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "atime": "1.5", "ctime": "1.5"}
    info = members(normalise(tmp_path, [M("bin/ping", b"x", 0o755, pax=cap)]).path)["bin/ping"]
    assert info.pax_headers == {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}


def test_other_source_date_epoch_other_layer(tmp_path: Path) -> None:
    one = normalise(tmp_path, APT_LAYER, "one")
    two = normalise(tmp_path, APT_LAYER, "two", sde=SDE + 86400)
    assert one.diff_id != two.diff_id


def test_member_outside_root_is_refused(tmp_path: Path) -> None:
    raw = layer_tar(tmp_path / "bad.tar", [M("../etc/passwd", b"x")])
    with raw.open("r+b") as fh, pytest.raises(BuildError, match="outside its root"):
        read_layer(fh, SDE)


def test_not_a_tar_is_a_build_error(tmp_path: Path) -> None:
    raw = tmp_path / "junk.tar"
    raw.write_bytes(b"this is not a tar" * 100)
    with raw.open("r+b") as fh, pytest.raises(BuildError, match="not a readable tar"):
        read_layer(fh, SDE)


def test_first_file_difference_names_the_file_and_how(tmp_path: Path) -> None:
    base = [M("etc", None, 0o755), M("etc/a", b"same"), M("etc/b", b"one")]
    changed = [M("etc", None, 0o755), M("etc/a", b"same"), M("etc/b", b"two", 0o600)]
    old = normalise(tmp_path, base, "old")
    new = normalise(tmp_path, changed, "new")
    found = first_file_difference(old.path, new.path)
    assert found.startswith("/etc/b: ")
    assert "mode '0o644' predicted, '0o600' rebuilt" in found and "content sha256" in found
    extra = normalise(tmp_path, [*base, M("etc/c", b"new")], "extra")
    assert first_file_difference(old.path, extra.path) == "/etc/c is only in the rebuilt image"


# ----------------------------------------------------------------------------- the config


ENGINE_CONFIG = {
    "architecture": "amd64",
    "os": "linux",
    "created": "2026-12-03T07:13:05.123Z",
    "container": "a1b2c3",
    "docker_version": "20.10.24+dfsg1",
    "container_config": {"Hostname": "a1b2c3", "Cmd": ["/bin/sh", "-c", "#(nop) USER 1000"]},
    "config": {
        "Hostname": "a1b2c3",
        "Domainname": "",
        "User": "1000",
        "AttachStdin": False,
        "Tty": False,
        "Env": ["PATH=/opt/venv/bin:/usr/bin"],
        "Cmd": ["bash"],
        "Image": "sha256:parent",
        "Volumes": None,
        "WorkingDir": "/home/envbuilder",
        "Entrypoint": None,
        "OnBuild": None,
        "Labels": {"org.envbuilder.env": "cpu", "io.buildah.version": "1.43.2"},
    },
    "history": [
        {"created": "2025-01-01T00:00:00Z", "created_by": "debootstrap"},
        {
            "created": "2026-12-03T07:12:00Z",
            "created_by": "/bin/sh -c #(nop) ARG X",
            "empty_layer": True,
        },
        {"created": "2026-12-03T07:13:00Z", "created_by": "RUN apt-get install python3"},
    ],
    "rootfs": {"type": "layers", "diff_ids": ["sha256:base", "sha256:engine-apt"]},
}


def test_config_keeps_what_runs_fixes_every_time_drops_the_build_container() -> None:
    doc = deterministic_config(
        ENGINE_CONFIG,
        base_diff_ids=["sha256:base"],
        base_history=1,
        layer_diff_ids=["sha256:normalised"],
        created="CREATED",
        labels={"org.envbuilder.repro-format": "1"},
    )
    assert doc["created"] == "CREATED"
    assert doc["rootfs"] == {"type": "layers", "diff_ids": ["sha256:base", "sha256:normalised"]}
    assert doc["config"] == {
        "User": "1000",
        "Env": ["PATH=/opt/venv/bin:/usr/bin"],
        "Cmd": ["bash"],
        "WorkingDir": "/home/envbuilder",
        "Labels": {"org.envbuilder.env": "cpu", "org.envbuilder.repro-format": "1"},
    }
    assert doc["history"] == [
        {"created": "2025-01-01T00:00:00Z", "created_by": "debootstrap"},  # the base's, as is
        # the ARG step made no layer: left out (podman words it otherwise)
        {"created": "CREATED", "created_by": "RUN apt-get install python3"},
    ]
    text = json.dumps(doc)
    for leak in ("a1b2c3", "20.10.24", "sha256:parent", "2026-12-03", "buildah"):
        assert leak not in text


def test_config_refuses_an_image_not_built_on_the_base() -> None:
    with pytest.raises(BuildError, match="does not start with the base image's layers"):
        deterministic_config(
            ENGINE_CONFIG,
            base_diff_ids=["sha256:other"],
            base_history=1,
            layer_diff_ids=["sha256:x"],
            created="C",
            labels={},
        )


# ----------------------------------------------------------------------------- blobs


def test_canonical_json_and_rfc3339() -> None:
    assert (
        blobs.canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]})
        == b'{"a":[1,{"c":3,"d":2}],"b":1}'
    )
    assert blobs.rfc3339(1735689600) == "2025-01-01T00:00:00Z"


def test_gzip_has_mtime_zero_and_no_name(tmp_path: Path) -> None:
    src = tmp_path / "layer.tar"
    src.write_bytes(b"data" * 1000)
    blobs.gzip_file(src, tmp_path / "a.gz")
    blobs.gzip_file(src, tmp_path / "b.gz")
    head = (tmp_path / "a.gz").read_bytes()[:10]
    assert head[3] == 0 and head[4:8] == b"\0\0\0\0"  # no FNAME flag, mtime 0
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()
    assert gzip.decompress((tmp_path / "a.gz").read_bytes()) == src.read_bytes()


def test_registry_manifest_names_config_and_layers(tmp_path: Path) -> None:
    (tmp_path / "c").write_bytes(b"{}")
    (tmp_path / "l").write_bytes(b"layer")
    config, layer = blobs.file_blob(tmp_path / "c"), blobs.file_blob(tmp_path / "l")
    doc = blobs.registry_manifest(config, [layer])
    assert doc["config"] == {
        "mediaType": blobs.CONFIG_TYPE,
        "size": 2,
        "digest": blobs.digest_bytes(b"{}"),
    }
    assert doc["layers"][0]["digest"] == blobs.digest_bytes(b"layer")


def test_build_context_modes_do_not_follow_the_umask(tmp_path: Path) -> None:
    """A COPY keeps the context file's mode: the context is made 0644/0755 before the build,
    except the wheels (hard links into the wheel cache, only read by pip)."""
    context = tmp_path / "ctx"
    (context / "envbuilder" / "wheels").mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM x\n")
    (context / "envbuilder" / "wsl.conf").write_text("[boot]\n")
    (context / "envbuilder" / "wheels" / "a.whl").write_bytes(b"wheel")
    for path in (
        context / "Dockerfile",
        context / "envbuilder" / "wsl.conf",
        context / "envbuilder" / "wheels" / "a.whl",
    ):
        path.chmod(0o600)
    (context / "envbuilder").chmod(0o700)
    repro.normalize_context_modes(context)
    assert (context / "Dockerfile").stat().st_mode & 0o777 == 0o644
    assert (context / "envbuilder" / "wsl.conf").stat().st_mode & 0o777 == 0o644
    assert (context / "envbuilder").stat().st_mode & 0o777 == 0o755
    assert (context / "envbuilder" / "wheels" / "a.whl").stat().st_mode & 0o777 == 0o600


def test_engine_tag_and_predictions_in_the_lock() -> None:
    assert (
        repro.engine_tag("envbuilder/cpu:19b9ed8ad845")
        == "envbuilder-engine/envbuilder-cpu:19b9ed8ad845"
    )
    assert (
        repro.engine_tag("127.0.0.1:5000/x/cpu") == "envbuilder-engine/127.0.0.1-5000-x-cpu:latest"
    )
    image = repro.Prediction("sha256:" + "a" * 64, ("sha256:" + "b" * 64, "sha256:" + "c" * 64))
    assert repro.Prediction.from_artifacts(image.artifacts()) == image
    # A lock written before images were reproducible records an id, not a prediction.
    assert repro.Prediction.from_artifacts({"image_id": image.image_id}) is None
    with pytest.raises(BuildError, match="records no image digest for cpu/docker"):
        repro.require_prediction({}, "docker", "cpu", "lockfiles/cpu.lock.toml")
    old = {**image.artifacts(), "repro_format": "0"}
    with pytest.raises(BuildError, match="repro format 0"):
        repro.require_prediction({"docker": old}, "docker", "cpu", "lockfiles/cpu.lock.toml")

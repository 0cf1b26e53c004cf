"""The lock model and the pieces of locking that need no network: strict reading, canonical
writing, artifacts, `--check`, mirrors, uv output post-processing, base image pinning."""

from __future__ import annotations

import dataclasses
import functools
import http.server
import os
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_lock_support import FAKE_INDEX_URL, make_wheel

from envbuilder.commands._cli import main
from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import sha256_bytes
from envbuilder.core.model import Index
from envbuilder.core.project import Project
from envbuilder.lock.check import check_lock_file
from envbuilder.lock.indexes import index_source, mirror_env_var
from envbuilder.lock.lockfile import (
    LOCK_VERSION,
    EnvLock,
    TargetLock,
    dump_env_lock,
    load_env_lock,
    read_env_lock,
    write_env_lock,
)
from envbuilder.lock.record import record_artifact
from envbuilder.lock.resolve import pin_base, source_date_epoch
from envbuilder.lock.uv import (
    ResolveRequest,
    make_request,
    postprocess,
    preferences_for_uv,
    pylock_header,
    pyproject_for,
)

DATA = Path(__file__).parents[1] / "data" / "lock"


def _lock(**changes: object) -> EnvLock:
    lock = EnvLock(
        version=LOCK_VERSION,
        env="cpu",
        spec_hash="ab" * 32,
        envbuilder_version="0.1.0",
        source_date_epoch=1700000000,
        targets={
            "native": TargetLock(
                "x86_64-manylinux_2_28", "3.11", "pylock.cpu-native.toml", "cd" * 32
            ),
            "docker": TargetLock(
                "x86_64-manylinux_2_28",
                "3.11",
                "pylock.cpu-docker.toml",
                "ef" * 32,
                "debian:bookworm-slim@sha256:" + "12" * 32,
            ),
        },
        artifacts={"docker": {"image_id": "sha256:" + "34" * 32}},
    )
    return dataclasses.replace(lock, **changes)  # type: ignore[arg-type]


#: The smallest pylock PEP 751 (packaging.pylock) accepts.
MINIMAL_PYLOCK = 'lock-version = "1.0"\ncreated-by = "test"\npackages = []\n'


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "environments.toml").write_text("", encoding="utf-8")
    return Project.from_spec(tmp_path / "environments.toml", cache=tmp_path / "cache")


def test_dump_is_canonical_and_reads_back(tmp_path: Path) -> None:
    lock = _lock()
    data = dump_env_lock(lock)
    # Targets in TARGETS order whatever the mapping order, so equal locks give equal bytes.
    assert data.index(b"[targets.docker]") < data.index(b"[targets.native]")
    assert dump_env_lock(_lock(targets=dict(reversed(list(lock.targets.items()))))) == data
    path = tmp_path / "cpu.lock.toml"
    path.write_bytes(data)
    assert read_env_lock(path) == lock


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace("version = 1\n", 'version = 1\ncolour = "blue"\n'),
            "unknown key 'colour'",
        ),
        (lambda t: t.replace("version = 1", "version = 2"), "newer than this envbuilder"),
        (lambda t: t.replace("version = 1", "version = 0"), "not supported"),
        (
            lambda t: t.replace("source_date_epoch = 1700000000", 'source_date_epoch = "x"'),
            "source_date_epoch must be an integer",
        ),
        (lambda t: t.replace("[targets.native]", "[targets.mac]"), "unknown target 'mac'"),
        (lambda t: t.replace('python = "3.11"\n', "", 1), "missing key 'python'"),
        (
            lambda t: t.replace("[artifacts.docker]", "[artifacts.docker]\nlayers = 3"),
            r"artifacts.docker.layers must be a string, not 3; run `envbuilder lock`",
        ),
        # recorded digests in the wrong form: refused when read, not after a build (issue: a
        # non-hex image_id passed lock --check and build --verify only failed after building)
        (
            lambda t: t.replace('"sha256:' + "34" * 32, '"sha256:' + "zz" * 32),
            "artifacts.docker.image_id = 'sha256:zz.*' is not 'sha256:' and 64 lower-case hex",
        ),
        (
            lambda t: t.replace('"sha256:' + "34" * 32, '"' + "34" * 32),
            "artifacts.docker.image_id = '3434.*' is not 'sha256:'",
        ),
        (
            lambda t: t.replace("[artifacts.docker]", '[artifacts.docker]\nlayers = "md5:ab"'),
            "artifacts.docker.layers = 'md5:ab' is not layer digests",
        ),
        (
            lambda t: t.replace("[artifacts.docker]", '[artifacts.docker]\nrepro_format = "x"'),
            "artifacts.docker.repro_format = 'x' is not a format number",
        ),
        (
            lambda t: t.replace(
                "[artifacts.docker]",
                '[artifacts.docker]\nrepo_digest = "r/x\\"; touch y; \\"@sha256:' + "a" * 64 + '"',
            ),
            "artifacts.docker.repo_digest = .* is not an image reference pinned by digest",
        ),
        (
            lambda t: t.replace("[artifacts.docker]", '[artifacts.docker]\nsha256 = "ABC"'),
            "artifacts.docker.sha256 = 'ABC' is not 64 lower-case hex digits",
        ),
        (
            lambda t: t.replace("@sha256:", "@sha256:zz", 1),
            r"targets.docker.base_image = 'debian:bookworm-slim@sha256:zz.*' is not an image ref",
        ),
        (lambda t: t + "[[", "not valid TOML"),
    ],
)
def test_read_is_strict_and_says_what_to_do(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cpu.lock.toml"
    path.write_text(edit(dump_env_lock(_lock()).decode()), encoding="utf-8")
    with pytest.raises(LockError, match=message) as info:
        read_env_lock(path)
    assert str(path) in str(info.value)
    assert "envbuilder" in str(info.value)  # says what to run (lock again / upgrade)


def test_load_env_lock_none_when_never_locked(project: Project) -> None:
    assert load_env_lock(project, "cpu") is None


def test_record_artifact_merges_and_keeps_spec_hash(project: Project) -> None:
    write_env_lock(project, _lock())
    before = project.env_lock("cpu").read_bytes()
    record_artifact(project, "cpu", "docker", repo_digest="r@sha256:" + "56" * 32)
    record_artifact(project, "cpu", "docker", tag="envbuilder/cpu:1")
    lock = read_env_lock(project.env_lock("cpu"))
    assert lock.artifacts == {
        "docker": {
            "image_id": "sha256:" + "34" * 32,
            "repo_digest": "r@sha256:" + "56" * 32,
            "tag": "envbuilder/cpu:1",
        },
    }
    assert lock.spec_hash == _lock().spec_hash and lock.targets == _lock().targets
    assert project.env_lock("cpu").read_bytes() != before
    with pytest.raises(LockError, match="not locked"):
        record_artifact(project, "cpu", "windows", x="y")
    # what the reader would refuse is never written: a target without artifacts, a key or a
    # value out of its form
    for target, values in [
        ("native", {"tag": "x"}),
        ("docker", {"venv": "/opt/venv"}),
        ("docker", {"layers": "md5:ab"}),
    ]:
        with pytest.raises(LockError):
            record_artifact(project, "cpu", target, **values)
    assert read_env_lock(project.env_lock("cpu")) == lock
    with pytest.raises(LockError, match="not locked"):
        record_artifact(project, "rocm64", "docker", x="y")


def _locked_project(project: Project) -> EnvLock:
    """Write real pylock files and a lock that matches them."""
    targets = {}
    for target in ("native", "docker"):
        data = f"# pylock of {target}\n{MINIMAL_PYLOCK}".encode()
        (project.lockfiles / f"pylock.cpu-{target}.toml").parent.mkdir(exist_ok=True)
        (project.lockfiles / f"pylock.cpu-{target}.toml").write_bytes(data)
        targets[target] = TargetLock(
            "x86_64-manylinux_2_28", "3.11", f"pylock.cpu-{target}.toml", sha256_bytes(data)
        )
    lock = _lock(targets=targets)
    write_env_lock(project, lock)
    return lock


def test_check_current_stale_and_never_locked(project: Project) -> None:
    lock = _locked_project(project)
    ok = check_lock_file(project, "cpu", lock.spec_hash, ["native", "docker"])
    assert ok.stale == () and ok.notes == ()
    assert "spec hash" in check_lock_file(project, "cpu", "00" * 32, ["native"]).stale[0]
    never = check_lock_file(project, "rocm64", "00" * 32, ["docker"])
    assert never.stale == () and "not locked" in never.notes[0]
    # A target the spec added, and one it dropped.
    added = check_lock_file(project, "cpu", lock.spec_hash, ["native", "docker", "wsl2"])
    assert added.stale == ("cpu/wsl2: target not locked",)
    dropped = check_lock_file(project, "cpu", lock.spec_hash, ["native"])
    assert "no longer has this target" in dropped.stale[0]


def test_check_names_hand_edits_and_missing_pylocks(project: Project) -> None:
    lock = _locked_project(project)
    with (project.lockfiles / "pylock.cpu-native.toml").open("ab") as fh:
        fh.write(b"# edited\n")
    (project.lockfiles / "pylock.cpu-docker.toml").unlink()
    stale = check_lock_file(project, "cpu", lock.spec_hash, ["native", "docker"]).stale
    assert stale == (
        "cpu/native: lockfiles/pylock.cpu-native.toml was changed by hand (sha256 differs from "
        "the lock); run `envbuilder lock` to re-resolve it",
        "cpu/docker: lockfiles/pylock.cpu-docker.toml is missing",
    )


def test_check_reports_a_malformed_lock_as_stale(project: Project) -> None:
    project.lockfiles.mkdir()
    project.env_lock("cpu").write_text("version = 9\n", encoding="utf-8")
    assert "newer than this envbuilder" in check_lock_file(project, "cpu", "x", ["native"]).stale[0]


# --- mirrors ------------------------------------------------------------------------------------


def test_mirror_env_var_name() -> None:
    assert mirror_env_var("pytorch-cpu") == "ENVBUILDER_MIRROR_PYTORCH_CPU"
    assert mirror_env_var("rocm.6.4") == "ENVBUILDER_MIRROR_ROCM_6_4"


def test_index_source_mirror_override_and_fallback(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    index = Index("pytorch-cpu", "https://download.pytorch.org/whl/cpu", str(folder))
    src, warning = index_source(index, tmp_path, {})
    assert (src.location, src.flat, src.mirrored, warning) == (str(folder), True, True, None)
    # The machine's environment variable wins; empty switches the mirror off.
    url = "https://mirror.example.invalid/simple"
    assert index_source(index, tmp_path, {"ENVBUILDER_MIRROR_PYTORCH_CPU": url})[0].location == url
    off, warning = index_source(index, tmp_path, {"ENVBUILDER_MIRROR_PYTORCH_CPU": ""})
    assert (off.location, off.mirrored, warning) == (index.url, False, None)
    # A relative folder is relative to the project root.
    rel = index_source(index, tmp_path, {"ENVBUILDER_MIRROR_PYTORCH_CPU": "wheels"})[0]
    assert rel.location == str(folder)
    # A missing folder falls back to the canonical URL, with a warning naming both.
    gone, warning = index_source(
        dataclasses.replace(index, mirror=str(tmp_path / "nope")), tmp_path, {}
    )
    assert (gone.location, gone.mirrored) == (index.url, False)
    assert warning and "does not exist" in warning and index.url in warning
    assert src.artifact_url("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == (
        "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-"
        "manylinux_2_28_x86_64.whl"
    )


def _request(tmp_path: Path) -> ResolveRequest:
    index = Index("fake", FAKE_INDEX_URL, str(tmp_path))
    request, warnings = make_request(
        "x86_64-manylinux_2_28",
        "3.11",
        ("tinytorch==1.0", "six"),
        {"TinyTorch": "fake"},
        {"fake": index},
        tmp_path,
        {},
    )
    assert warnings == []
    return request


def test_pyproject_pins_packages_to_explicit_indexes(tmp_path: Path) -> None:
    text = pyproject_for(_request(tmp_path))
    assert 'dependencies = [\n    "tinytorch==1.0",\n    "six",\n]' in text
    assert f'url = "{tmp_path}"\nexplicit = true\nformat = "flat"' in text
    assert '"tinytorch" = { index = "fake" }' in text


def test_make_request_rejects_an_undefined_index(tmp_path: Path) -> None:
    with pytest.raises(LockError, match=r"index 'nope'.*\[indexes.nope\]"):
        make_request("x86_64-manylinux_2_28", "3.11", ("a",), {"a": "nope"}, {}, tmp_path, {})


def test_postprocess_records_canonical_urls_and_nothing_machine_specific(tmp_path: Path) -> None:
    raw = (DATA / "uv-output.toml").read_bytes()
    out = postprocess(raw, _request(tmp_path), pylock_header("cpu", "native")).decode()
    assert out.startswith("# Generated by `envbuilder lock` for env 'cpu', target 'native'")
    assert "file://" not in out and str(tmp_path) not in out
    assert (
        f'url = "{FAKE_INDEX_URL}/tinytorch-1.0%2Bcpu-py3-none-any.whl", hashes = '
        '{ sha256 = "' + "a1" * 32 + '" }'
    ) in out
    assert 'requires-python = "==3.11.*"' in out
    assert "environments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]" in out
    # Packages sorted by name, uv's own fields for default-index packages kept.
    assert out.index('name = "six"') < out.index('name = "tinytorch"')
    assert "upload-time = 2021-05-05T14:18:17Z" in out
    assert postprocess(raw, _request(tmp_path), pylock_header("cpu", "native")).decode() == out


def test_postprocess_records_the_canonical_index_of_pinned_packages(tmp_path: Path) -> None:
    """PEP 751 `packages.index`: a package of a named index names that index's canonical URL
    (never the mirror uv read it from), before its artifacts; default-index packages name none."""
    raw = (DATA / "uv-output.toml").read_bytes()
    doc = tomllib.loads(postprocess(raw, _request(tmp_path), "").decode())
    by_name = {p["name"]: p for p in doc["packages"]}
    assert by_name["tinytorch"]["index"] == FAKE_INDEX_URL
    assert "index" not in by_name["six"]
    assert list(by_name["tinytorch"]) == ["name", "version", "index", "wheels"]


def test_preferences_for_uv_name_the_index_uv_resolves_from(tmp_path: Path) -> None:
    """The earlier pylock handed to uv: pinned packages name the index as uv spells it here (a
    mirror folder as a file:// URL, `+` and `@` kept, a space encoded); others name none."""
    folder = tmp_path / "a b+c@d"
    folder.mkdir()
    index = Index("fake", FAKE_INDEX_URL, str(folder))
    request, _ = make_request(
        "x86_64-manylinux_2_28",
        "3.11",
        ("tinytorch", "six"),
        {"tinytorch": "fake"},
        {"fake": index},
        tmp_path,
        {},
    )
    committed = postprocess((DATA / "uv-output.toml").read_bytes(), request, "")
    stray = committed.replace(b'name = "six"\n', b'name = "six"\nindex = "https://x.invalid/"\n')
    doc = tomllib.loads(preferences_for_uv(stray, request).decode())
    by_name = {p["name"]: p for p in doc["packages"]}
    assert (
        by_name["tinytorch"]["index"]
        == "file://" + str(tmp_path).replace(" ", "%20") + "/a%20b+c@d"
    )
    assert "index" not in by_name["six"]
    # A URL mirror (or the canonical URL) is named exactly as the pyproject gives it to uv.
    url = "http://127.0.0.1:9/simple/"
    mirrored, _ = make_request(
        "x86_64-manylinux_2_28",
        "3.11",
        ("tinytorch",),
        {"tinytorch": "fake"},
        {"fake": index},
        tmp_path,
        {"ENVBUILDER_MIRROR_FAKE": url},
    )
    assert f'index = "{url}"' in preferences_for_uv(committed, mirrored).decode()


def test_postprocess_refuses_a_local_file_of_an_unpinned_package(tmp_path: Path) -> None:
    raw = (DATA / "uv-output.toml").read_bytes()
    request = dataclasses.replace(_request(tmp_path), index_pins=())
    with pytest.raises(LockError, match="tinytorch resolved to a local file"):
        postprocess(raw, request, "")


def test_source_date_epoch_is_the_newest_upload_time(tmp_path: Path) -> None:
    raw = (DATA / "uv-output.toml").read_bytes()
    # Mirror-dependent fields (tinytorch's upload time) are gone after post-processing.
    locked = postprocess(raw, _request(tmp_path), "")
    assert source_date_epoch([locked]) == 1620224298  # 2021-05-05T14:18:18Z, six's sdist
    assert source_date_epoch([b'lock-version = "1.0"\n']) == 315532800


def test_pin_base_reuses_a_known_digest_and_asks_the_registry_otherwise() -> None:
    asked: list[str] = []

    def lookup(ref: str) -> str:
        asked.append(ref)
        return "sha256:" + "9" * 64

    known = "debian:bookworm-slim@sha256:" + "1" * 64
    kw = {"base_digest": True, "lookup": lookup}
    assert pin_base("debian:bookworm-slim", known, refresh=False, **kw) == known  # type: ignore[arg-type]
    assert asked == []
    assert pin_base("debian:bookworm-slim", known, refresh=True, **kw).endswith("9" * 64)  # type: ignore[arg-type,union-attr]
    assert pin_base("debian:trixie-slim", known, refresh=False, **kw) == (  # type: ignore[arg-type]
        "debian:trixie-slim@sha256:" + "9" * 64
    )
    assert asked == ["debian:bookworm-slim", "debian:trixie-slim"]
    assert pin_base(None, None, refresh=True, **kw) is None  # type: ignore[arg-type]
    assert pin_base("x:1", None, refresh=False, base_digest=False, lookup=lookup) == "x:1"


def test_written_files_are_readable_by_all(project: Project) -> None:
    write_env_lock(project, _lock())
    mode = project.env_lock("cpu").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


# --- the JSON schema and the committed locks ---------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_json_schema_file_matches_the_model() -> None:
    import json

    from envbuilder.lock.schema import json_schema

    shipped = (ROOT / "envbuilder" / "data" / "schemas" / "lock.schema.json").read_text(
        encoding="utf-8"
    )
    assert shipped == json.dumps(json_schema(), indent=2) + "\n", (
        "lock.schema.json drifted from envbuilder.lock.lockfile: regenerate it with "
        "python -c 'import json; from envbuilder.lock.schema import json_schema; "
        "print(json.dumps(json_schema(), indent=2))' > envbuilder/data/schemas/lock.schema.json"
    )


def test_json_schema_accepts_a_lock_and_refuses_unknown_keys() -> None:
    import tomllib

    import jsonschema

    from envbuilder.lock.schema import json_schema

    data = tomllib.loads(dump_env_lock(_lock()).decode())
    jsonschema.validate(data, json_schema())
    data["targets"]["native"]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json_schema())


def test_committed_locks_match_the_shipped_spec(capsys: pytest.CaptureFixture[str]) -> None:
    """What CI's `nox -s lock -- --check` asserts: lockfiles/ is current for environments.toml
    (envs never locked, the ROCm ones here, are notes)."""
    from envbuilder.commands._cli import main

    if not (ROOT / "lockfiles").is_dir():
        pytest.fail("lockfiles/ is missing: run `envbuilder lock --env cpu` and commit it")
    assert main(["lock", "--check", "--spec", str(ROOT / "environments.toml")]) == 0, (
        capsys.readouterr().out
    )


def test_record_artifact_loses_no_update_between_concurrent_writers(project: Project) -> None:
    import threading

    write_env_lock(project, _lock())

    forms: dict[str, Callable[[int], str]] = {
        "image_id": lambda i: f"sha256:{i:064x}",
        "layers": lambda i: f"sha256:{i:064x} sha256:{i + 1:064x}",
        "tag": lambda i: f"envbuilder/cpu:{i}",
        "repo_digest": lambda i: f"r/cpu@sha256:{i:064x}",
    }

    def record(key: str) -> None:
        for i in range(15):
            record_artifact(project, "cpu", "docker", **{key: forms[key](i)})

    threads = [threading.Thread(target=record, args=(key,)) for key in forms]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    artifacts = read_env_lock(project.env_lock("cpu")).artifacts
    # every writer's last update is there: none was lost to another's read-modify-write
    assert artifacts == {"docker": {key: form(14) for key, form in forms.items()}}


# --- relocking keeps the pins of packages of named indexes (uv reads `index`) -------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server on 127.0.0.1 serving a folder (a directory listing per folder is a
    simple-index page uv reads): (base URL, folder)."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def _two_pinned(packages: str, description: str = "two pinned packages") -> str:
    return f"""
[indexes.fake]
url = "{FAKE_INDEX_URL}"

[env.pair]
description = "{description}"
accelerator = "cpu"
python = "3.11"
packages = [{packages}]
index_pins = {{ tinytorch = "fake", tinyextra = "fake" }}
targets = ["native"]
"""


@pytest.mark.parametrize("mirror_kind", ["folder", "simple index URL"])
def test_relock_keeps_the_pinned_versions_of_a_named_index(
    mirror_kind: str, tmp_path: Path, served: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both packages come from the named index `fake` (a mirror folder, or a simple index served
    on 127.0.0.1); then 1.1 of each is published. `--upgrade-package tinyextra` moves tinyextra
    only, a relock after a spec change moves nothing, `--upgrade-package tinytorch` moves
    tinytorch. (Without `index` in the pylock handed back to uv, uv dropped every earlier pin of
    a package of a named index: tinytorch moved to 1.1 each time.) uv needs no network here:
    every package is pinned to the mirrored index."""
    base, root = served
    if mirror_kind == "folder":

        def publish(name: str, version: str) -> None:
            make_wheel(tmp_path / "mirror", name, version)

        mirror = str(tmp_path / "mirror")
    else:

        def publish(name: str, version: str) -> None:
            make_wheel(root / "simple" / name, name, version)

        mirror = f"{base}/simple"
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", mirror)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_OFFLINE", "1" if mirror_kind == "folder" else "0")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for name in ("tinytorch", "tinyextra"):
        publish(name, "1.0")
    spec = tmp_path / "proj" / "environments.toml"
    spec.parent.mkdir()
    spec.write_text(_two_pinned('"tinytorch>=1.0", "tinyextra>=1.0"'), encoding="utf-8")
    project = Project.from_spec(spec, cache=tmp_path / "cache")

    def lock(*args: str) -> dict[str, str]:
        assert main(["-q", "lock", "--spec", str(spec), *args]) == 0
        doc = tomllib.loads(project.pylock("pair", "native").read_text(encoding="utf-8"))
        assert {p["index"] for p in doc["packages"]} == {FAKE_INDEX_URL}
        return {p["name"]: p["version"] for p in doc["packages"]}

    assert lock() == {"tinyextra": "1.0", "tinytorch": "1.0"}
    for name in ("tinytorch", "tinyextra"):
        publish(name, "1.1")
    assert lock("--upgrade-package", "tinyextra") == {"tinyextra": "1.1", "tinytorch": "1.0"}
    spec.write_text(_two_pinned('"tinytorch>=1.0", "tinyextra>=1.0"', "changed"), encoding="utf-8")
    assert lock() == {"tinyextra": "1.1", "tinytorch": "1.0"}
    assert lock("--upgrade-package", "tinytorch") == {"tinyextra": "1.1", "tinytorch": "1.1"}

"""The host-side wheel cache: which wheel a target installs, fetching by sha256 from a mirror
folder, a mirror URL or the canonical URL (real HTTP servers on 127.0.0.1), refusing a file whose
hash differs, reuse, and the build context's wheelhouse installing offline with pip."""

from __future__ import annotations

import functools
import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_lock_support import FAKE_INDEX_URL, make_wheel, small_spec, write_spec

from envbuilder.core.errors import LockError
from envbuilder.core.fsutil import sha256_bytes, sha256_file
from envbuilder.core.model import Index
from envbuilder.core.project import Project
from envbuilder.lock.lockfile import LOCK_VERSION, EnvLock, TargetLock, write_env_lock
from envbuilder.lock.wheelcache import (
    cache_path,
    downloaded_bytes,
    fetch_locked,
    locked_files,
    write_wheelhouse,
)
from envbuilder.spec.load import load_spec

LINUX = "x86_64-manylinux_2_28"
WINDOWS = "x86_64-pc-windows-msvc"


def _pylock(packages: list[tuple[str, str, list[tuple[str, str]], str | None]]) -> str:
    """A pylock text: (name, version, [(url, sha256)], marker) per package."""
    out = ['lock-version = "1.0"', 'created-by = "test"', ""]
    for name, version, wheels, marker in packages:
        out += ["[[packages]]", f'name = "{name}"', f'version = "{version}"']
        if marker:
            out.append(f'marker = "{marker}"')
        items = ", ".join(f'{{ url = "{u}", hashes = {{ sha256 = "{h}" }} }}' for u, h in wheels)
        out += [f"wheels = [{items}]", ""]
    return "\n".join(out)


def test_locked_files_pick_the_targets_best_wheel(tmp_path: Path) -> None:
    base = "https://files.example.invalid/"
    text = _pylock(
        [
            (
                "numpy",
                "2.0",
                [
                    (base + "numpy-2.0-cp311-cp311-win_amd64.whl", "1" * 64),
                    (
                        base + "numpy-2.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_"
                        "x86_64.whl",
                        "2" * 64,
                    ),
                    (base + "numpy-2.0-cp312-cp312-manylinux_2_28_x86_64.whl", "3" * 64),
                ],
                None,
            ),
            ("six", "1.0", [(base + "six-1.0-py2.py3-none-any.whl", "4" * 64)], None),
            (
                "colorama",
                "0.4",
                [(base + "colorama-0.4-py3-none-any.whl", "5" * 64)],
                "sys_platform == 'win32'",
            ),
        ]
    )
    pylock = tmp_path / "pylock.t.toml"
    pylock.write_text(text, encoding="utf-8")
    linux = {f.name: f.sha256 for f in locked_files(pylock, LINUX, "3.11")}
    assert linux == {"numpy": "2" * 64, "six": "4" * 64}  # no colorama: its marker is false
    windows = {f.name: f.sha256 for f in locked_files(pylock, WINDOWS, "3.11")}
    assert windows == {"colorama": "5" * 64, "numpy": "1" * 64, "six": "4" * 64}
    # packaging.pylock's selection says which package has nothing for the target.
    with pytest.raises(LockError, match=r"nothing to install for .* Python 3\.10: .*'numpy'"):
        locked_files(pylock, LINUX, "3.10")


def test_locked_files_take_a_direct_url_wheel(tmp_path: Path) -> None:
    url = "https://repo.example.invalid/torch-2.8.0a0%2Bgit-cp312-cp312-win_amd64.whl"
    pylock = tmp_path / "pylock.t.toml"
    pylock.write_text(
        'lock-version = "1.0"\ncreated-by = "uv"\n\n[[packages]]\n'
        'name = "torch"\nversion = "2.8.0a0+git"\n'
        f'archive = {{ url = "{url}", hashes = {{ sha256 = "{"6" * 64}" }} }}\n',
        encoding="utf-8",
    )
    (got,) = locked_files(pylock, WINDOWS, "3.12")
    assert (got.filename, got.url, got.sha256) == (
        "torch-2.8.0a0+git-cp312-cp312-win_amd64.whl",
        url,
        "6" * 64,
    )


def _lock_tinytorch(
    project: Project,
    wheel: Path,
    url: str | None = None,
    targets: tuple[str, ...] = ("native",),
    index: str | None = None,
) -> None:
    """Write a pylock naming `wheel` by its canonical URL (or `url`), with PEP 751 `index` when
    given, and the env lock."""
    url = url or f"{FAKE_INDEX_URL}/{wheel.name.replace('+', '%2B')}"
    text = _pylock([("tinytorch", "1.0+cpu", [(url, sha256_file(wheel))], None)]).encode()
    if index is not None:
        text = text.replace(
            b'version = "1.0+cpu"\n', f'version = "1.0+cpu"\nindex = "{index}"\n'.encode()
        )
    project.lockfiles.mkdir(parents=True, exist_ok=True)
    locks = {}
    for target in targets:
        (project.lockfiles / f"pylock.small-{target}.toml").write_bytes(text)
        locks[target] = TargetLock(LINUX, "3.11", f"pylock.small-{target}.toml", sha256_bytes(text))
    write_env_lock(project, EnvLock(LOCK_VERSION, "small", "0" * 64, "0", 0, locks, {}))


def _indexes(project: Project) -> dict[str, Index]:
    """The named indexes of the project's env `small`, as the targets hand them to the cache."""
    return dict(load_spec(project.spec_path).env("small").indexes)


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    return tmp_path / "mirror"


@pytest.fixture
def project(tmp_path: Path, mirror: Path) -> Project:
    return write_spec(tmp_path / "proj", small_spec(mirror))


def test_fetch_from_a_mirror_folder_once(
    project: Project, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVBUILDER_MIRROR_FAKE", raising=False)
    wheel = make_wheel(mirror, "tinytorch", "1.0+cpu")
    _lock_tinytorch(project, wheel, targets=("native", "docker"))
    events: list[tuple[str, int, int | None]] = []
    first = fetch_locked(
        project, "small", "native", lambda *e: events.append(e), indexes=_indexes(project)
    )
    assert [(a.filename, a.source) for a in first] == [(wheel.name, "mirror")]
    assert downloaded_bytes(first) == wheel.stat().st_size
    assert first[0].path == cache_path(project, sha256_file(wheel), wheel.name)
    assert first[0].path.read_bytes() == wheel.read_bytes()
    assert events[-1] == (wheel.name, wheel.stat().st_size, wheel.stat().st_size)
    # Another target (or env) locking the same file downloads nothing.
    again = fetch_locked(project, "small", "docker", indexes=_indexes(project))
    assert [(a.source, a.downloaded_bytes) for a in again] == [("cache", 0)]


def test_fetch_uses_the_indexes_it_is_given_not_the_spec_file(
    project: Project, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wheel cache never reads environments.toml itself: a spec file broken after the spec
    was loaded (or missing) changes nothing; the mirror of the indexes handed in is used. (It
    used to re-read the file and, when that failed, silently drop every mirror.)"""
    monkeypatch.delenv("ENVBUILDER_MIRROR_FAKE", raising=False)
    wheel = make_wheel(mirror, "tinytorch", "1.0+cpu")
    _lock_tinytorch(project, wheel)
    indexes = _indexes(project)
    project.spec_path.write_text("[env.small\nbroken = ", encoding="utf-8")
    got = fetch_locked(project, "small", "native", indexes=indexes)
    assert [(a.filename, a.source) for a in got] == [(wheel.name, "mirror")]


def test_a_mirror_file_with_another_hash_is_refused(
    project: Project, mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVBUILDER_MIRROR_FAKE", raising=False)
    locked = make_wheel(tmp_path / "elsewhere", "tinytorch", "1.0+cpu")
    make_wheel(mirror, "tinytorch", "1.0+cpu", requires=("six",))  # same name, other bytes
    _lock_tinytorch(project, locked)
    with pytest.raises(LockError, match="does not match the lock") as info:
        fetch_locked(project, "small", "native", indexes=_indexes(project))
    assert "wheels.example.invalid" in str(info.value)  # then the canonical URL was tried
    assert not list(project.wheels.rglob("*.whl"))  # nothing refused entered the cache


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server on 127.0.0.1 serving a folder: (base URL, folder)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_from_a_simple_index_mirror_url(
    project: Project, tmp_path: Path, http_folder: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, root = http_folder
    wheel = make_wheel(root / "files", "tinytorch", "1.0+cpu")
    (root / "simple" / "tinytorch").mkdir(parents=True)
    href = f"../../files/{wheel.name.replace('+', '%2B')}#sha256={sha256_file(wheel)}"
    (root / "simple" / "tinytorch" / "index.html").write_text(
        f'<html><body><a href="{href}">{wheel.name}</a></body></html>', encoding="utf-8"
    )
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", f"{base}/simple")
    _lock_tinytorch(project, wheel)
    got = fetch_locked(project, "small", "native", indexes=_indexes(project))
    assert [(a.source, a.downloaded_bytes) for a in got] == [("mirror", wheel.stat().st_size)]


def test_fetch_from_the_canonical_url_without_mirror(
    project: Project, tmp_path: Path, http_folder: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, root = http_folder
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", "")  # mirror switched off on this machine
    wheel = make_wheel(root, "tinytorch", "1.0+cpu")
    _lock_tinytorch(project, wheel, url=f"{base}/{wheel.name.replace('+', '%2B')}")
    got = fetch_locked(project, "small", "native", indexes=_indexes(project))
    assert [(a.source, a.downloaded_bytes) for a in got] == [("download", wheel.stat().st_size)]


def test_fetch_needs_a_lock_that_matches_its_pylock(project: Project, mirror: Path) -> None:
    with pytest.raises(LockError, match="run `envbuilder lock --env small` first"):
        fetch_locked(project, "small", "native", indexes=_indexes(project))
    _lock_tinytorch(project, make_wheel(mirror, "tinytorch", "1.0+cpu"))
    with (project.lockfiles / "pylock.small-native.toml").open("a") as fh:
        fh.write("# edited\n")
    with pytest.raises(
        LockError, match=r"does not match the sha256 recorded in lockfiles/small\.lock\.toml"
    ):
        fetch_locked(project, "small", "native", indexes=_indexes(project))


def test_wheelhouse_installs_offline_with_hash_checking(
    project: Project, mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVBUILDER_MIRROR_FAKE", raising=False)
    wheel = make_wheel(mirror, "tinytorch", "1.0+cpu")
    _lock_tinytorch(project, wheel)
    context = tmp_path / "context"
    requirements = write_wheelhouse(
        project,
        "small",
        "native",
        context,
        in_image_prefix=str(context / "wheels"),
        indexes=_indexes(project),
    )
    line = f"{context / 'wheels' / wheel.name} --hash=sha256:{sha256_file(wheel)}\n"
    assert requirements == context / "requirements.txt"
    assert requirements.read_text(encoding="utf-8") == line
    assert (context / "wheels" / wheel.name).stat().st_ino == cache_path(
        project, sha256_file(wheel), wheel.name
    ).stat().st_ino  # hard link, no copy
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv / "bin" / "python"),
        "install",
        "--no-index",
        "--no-deps",
        "--require-hashes",
        "--no-cache-dir",
        "-r",
    ]
    done = subprocess.run([*pip, str(requirements)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tinytorch; print(tinytorch.VERSION)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "1.0+cpu"
    # The same file with a wrong hash is refused.
    requirements.write_text(line.replace(sha256_file(wheel), "0" * 64), encoding="utf-8")
    refused = subprocess.run([*pip, str(requirements)], capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "hash" in (refused.stdout + refused.stderr).lower()


def test_the_pylocks_index_names_the_mirror_to_ask(
    project: Project, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PEP 751 `packages.index` says which index, hence which mirror, holds a file, whatever
    host its URL names (PyTorch's indexes link files on other hosts). Without it the URL is
    not under the index's URL and the mirror is not asked."""
    monkeypatch.delenv("ENVBUILDER_MIRROR_FAKE", raising=False)
    wheel = make_wheel(mirror, "tinytorch", "1.0+cpu")
    elsewhere = f"https://files.example.invalid/x/{wheel.name.replace('+', '%2B')}"
    _lock_tinytorch(project, wheel, url=elsewhere, index=FAKE_INDEX_URL)
    got = fetch_locked(project, "small", "native", indexes=_indexes(project))
    assert [(a.filename, a.source) for a in got] == [(wheel.name, "mirror")]


def test_a_gone_url_is_found_on_the_pylocks_index_by_name_and_hash(
    project: Project, http_folder: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded URL is unreachable (a closed port on 127.0.0.1) and no mirror is set: the
    simple-index page `<index>/<name>/` of the index the entry names lists the file (here by its
    `#sha256=` fragment under another path), which is fetched and accepted by its hash."""
    base, root = http_folder
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", "")
    wheel = make_wheel(root / "files", "tinytorch", "1.0+cpu")
    page = root / "simple" / "tinytorch"
    page.mkdir(parents=True)
    href = f"../../files/{wheel.name.replace('+', '%2B')}#sha256={sha256_file(wheel)}"
    (page / "index.html").write_text(f'<a href="{href}">{wheel.name}</a>', encoding="utf-8")
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{sock.getsockname()[1]}/whl/{wheel.name.replace('+', '%2B')}"
        _lock_tinytorch(project, wheel, url=gone, index=f"{base}/simple")
        got = fetch_locked(project, "small", "native", indexes=_indexes(project))
    assert [(a.source, a.downloaded_bytes) for a in got] == [("download", wheel.stat().st_size)]
    assert got[0].path.read_bytes() == wheel.read_bytes()

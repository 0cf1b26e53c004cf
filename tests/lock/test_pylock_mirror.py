"""Issue 17's acceptance: a shipped pylock is installed from a local mirror of its index, served on
127.0.0.1, while the URL the pylock records is unreachable, the way docs/lock.md tells users.

pip 26.3 and uv 0.13.9 do not do it alone: both fetch a pylock entry from its recorded URL only
(they ignore PEP 751 `packages.index`, `--index-url` and `--find-links` for it; docs/lock.md,
"Installing from a mirror"). So docs/lock.md documents one envbuilder command, and this test runs
exactly that command on a copy of the shipped project whose `pytorch-cpu` index (canonical URL in
the spec, the pylocks' `url` and `index`, hence the lock's hashes) is moved to a closed port on
127.0.0.1. torch comes from the mirror (this machine's copy of the locked wheel, which must have
the locked sha256); its small dependencies come from the default index (hence `network`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuilder.core.fsutil import sha256_bytes
from envbuilder.core.project import Project
from envbuilder.lock.indexes import index_source
from envbuilder.lock.lockfile import read_env_lock, write_env_lock
from envbuilder.spec.load import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.network]

REPO = Path(__file__).resolve().parents[2]
ENV, TARGET, INDEX = "cpu", "native", "pytorch-cpu"
#: The command docs/lock.md gives, word for word (<mirror> and <venv> stand for the user's values).
DOCUMENTED = (
    "ENVBUILDER_MIRROR_PYTORCH_CPU=<mirror> envbuilder build --env cpu --target native "
    "--path <venv>"
)


@dataclasses.dataclass(frozen=True)
class LockedTorch:
    name: str  # the wheel's file name
    sha256: str
    version: str
    canonical: str  # the index URL the shipped pylock records


def _locked_torch() -> LockedTorch:
    doc = tomllib.loads((REPO / "lockfiles" / f"pylock.{ENV}-{TARGET}.toml").read_text("utf-8"))
    (torch,) = [p for p in doc["packages"] if p["name"] == "torch"]
    (wheel,) = torch["wheels"]
    name = wheel["url"].rsplit("/", 1)[-1].replace("%2B", "+")
    return LockedTorch(name, wheel["hashes"]["sha256"], torch["version"], torch["index"])


def _local_torch(locked: LockedTorch) -> Path:
    """This machine's copy of the locked torch wheel: in the mirror folder the shipped spec (or
    ENVBUILDER_MIRROR_PYTORCH_CPU) gives for the index. Skips when it is not here or not the
    locked file."""
    spec = load_spec(REPO / "environments.toml")
    source, _ = index_source(spec.indexes[INDEX], REPO)
    folder = source.mirror_folder()
    wheel = folder / locked.name if folder is not None else None
    if wheel is None or not wheel.is_file():
        pytest.skip(
            f"no local copy of {locked.name} (the mirror folder of index {INDEX!r}: "
            f"{folder}); the test serves that file as the mirror"
        )
    digest = hashlib.sha256()
    with wheel.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != locked.sha256:
        pytest.skip(f"{wheel} is not the locked file (sha256 {digest.hexdigest()})")
    return wheel


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """A PEP 503 simple index on 127.0.0.1 (a real HTTP server in a thread): its URL, its
    folder and the paths it was asked for."""
    root = tmp_path / "mirror"
    root.mkdir()
    served: list[str] = []

    class Logging(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Logging, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", root, served
    finally:
        server.shutdown()
        server.server_close()


def _publish(root: Path, locked: LockedTorch, wheel: Path) -> None:
    """The mirror's simple page for torch, linking `wheel` under the locked file name (with its
    real sha256 in the fragment, as an index does)."""
    files = root / "files"
    files.mkdir(exist_ok=True)
    served = files / locked.name
    served.unlink(missing_ok=True)
    served.symlink_to(wheel)
    page = root / "simple" / "torch"
    page.mkdir(parents=True, exist_ok=True)
    href = f"../../files/{locked.name.replace('+', '%2B')}#sha256={_sha256(wheel)}"
    (page / "index.html").write_text(f'<a href="{href}">{locked.name}</a>\n', encoding="utf-8")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _relocated_copy(dest: Path, canonical: str, unreachable: str) -> Project:
    """The shipped spec and locks with the index's canonical URL moved to `unreachable`: in the
    spec, in every pylock (`url` and `index`), and the lock's hashes recomputed (the lock stays
    current, as a checkout of a project whose index is down would be)."""
    dest.mkdir()
    spec = (REPO / "environments.toml").read_text(encoding="utf-8")
    assert spec.count(f'url = "{canonical}"') == 1
    (dest / "environments.toml").write_text(spec.replace(canonical, unreachable), "utf-8")
    shutil.copytree(REPO / "lockfiles", dest / "lockfiles")
    project = Project.from_spec(dest / "environments.toml")
    lock = read_env_lock(project.env_lock(ENV))
    targets = {}
    for target, entry in lock.targets.items():
        pylock = project.lockfiles / entry.pylock
        data = pylock.read_bytes()
        assert data.count(f'index = "{canonical}"'.encode()) == 1
        pylock.write_bytes(data.replace(canonical.encode(), unreachable.encode()))
        targets[target] = dataclasses.replace(
            entry, pylock_sha256=sha256_bytes(pylock.read_bytes())
        )
    write_env_lock(
        project,
        dataclasses.replace(
            lock, spec_hash=load_spec(project.spec_path).env_hash(ENV), targets=targets
        ),
    )
    return project


def _build(project: Project, mirror_url: str, venv: Path, cache: Path) -> tuple[int, str]:
    """The documented command, run as a user runs it (its own process, this environment)."""
    command = DOCUMENTED.replace("<mirror>", mirror_url).replace("<venv>", str(venv)).split()
    assignment, argv = command[0], command[1:]
    name, _, value = assignment.partition("=")
    assert name == "ENVBUILDER_MIRROR_PYTORCH_CPU" and value == mirror_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILDER_MIRROR_")}
    env.update(
        {
            name: value,
            "ENVBUILDER_CACHE": str(cache),
            "NO_COLOR": "1",
            "NO_PROXY": "127.0.0.1",
            "no_proxy": "127.0.0.1",
        }
    )
    assert argv[0] == "envbuilder"
    done = subprocess.run(
        [sys.executable, "-m", "envbuilder", *argv[1:]],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    return done.returncode, done.stdout + done.stderr


def test_docs_give_the_command_this_test_runs() -> None:
    text = (REPO / "docs" / "lock.md").read_text(encoding="utf-8")
    assert DOCUMENTED in text


def test_install_a_shipped_pylock_from_a_mirror_of_its_index(
    tmp_path: Path, mirror: tuple[str, Path, list[str]]
) -> None:
    locked = _locked_torch()
    wheel = _local_torch(locked)
    mirror_url, root, served = mirror
    with socket.socket() as closed:  # bound and never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}/whl/cpu"
        project = _relocated_copy(tmp_path / "proj", locked.canonical, unreachable)
        venv, cache = tmp_path / "venv", tmp_path / "cache"

        # A mirror serving other bytes under torch's name: refused by hash, nothing installed.
        impostor = tmp_path / "impostor" / locked.name
        impostor.parent.mkdir()
        impostor.write_bytes(b"not the locked torch wheel")
        _publish(root, locked, impostor)
        code, out = _build(project, mirror_url, venv, cache)
        assert code == 1, out
        assert f"{locked.name}: sha256 {_sha256(impostor)} does not match the lock" in out, out
        assert unreachable in out, out  # the recorded URL was tried too, and refused
        assert "Traceback" not in out and not venv.exists()

        # The real file on the mirror: installed, hash-checked, from the mirror.
        _publish(root, locked, wheel)
        served.clear()
        code, out = _build(project, mirror_url, venv, cache)
        assert code == 0, out
    assert f"/files/{locked.name.replace('+', '%2B')}" in served
    cached = cache / "wheels" / locked.sha256[:2] / locked.sha256 / locked.name
    assert cached.is_file()  # the cache takes a file only after its sha256 matched the lock
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == locked.version, probe.stderr

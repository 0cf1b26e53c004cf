"""The README's first command on a machine that is not this project's (docs/docker.md, "First
command"): its registry serves another `debian:bookworm-slim` than the one the committed lock pins.

The fresh machine is played by a Docker engine of its own (its own socket, data and exec roots)
in a network namespace of its own (`ip netns`: a loopback and nothing else, so its bridge, its
127.0.0.1 and anything it starts never touch this machine's network or the shared engine), whose
registry mirror is a registry of its own on that namespace's 127.0.0.1 serving a *different*
debian:bookworm-slim: the CI seed's layer under another image config, as Docker Hub serves
another build of the tag. A twin of that registry (the same storage) listens on this machine's
127.0.0.1 at the same port, for envbuilder's own questions to the mirror. torch comes only from a
replica of its canonical index (https://download.pytorch.org/whl/cpu served on 127.0.0.1: the
locked wheel, as the machine's mirror URL), never from a mirror folder; apt only from the
snapshot replica (tests/aptreplica.py), served inside the namespace, where the builds'
host networking puts apt. Markers: docker, network (PyPI's small wheels, Debian's archive), slow.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aptreplica import Replica

from envbuilder.image.oci.blobs import canonical_json, file_blob, registry_manifest

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.docker]

REPO = Path(__file__).resolve().parent.parent
SEED = Path(os.environ.get("ENVBUILDER_CI_STATE", "/var/lib/envbuilder-ci")) / "seed"
#: The README's first command, word for word.
FIRST_COMMAND = ("nox", "-s", "build-docker", "--", "cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ready: object, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} did not come up within {seconds:.0f}s")


def _http_ok(url: str) -> bool:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _other_debian(dest: Path) -> Path:
    """The seed's layer under another image config: a different debian:bookworm-slim."""
    if not (SEED / "layer.tar.gz").is_file():
        pytest.fail(f"no CI seed in {SEED} (.ci/services.sh writes it)")
    dest.mkdir()
    os.link(SEED / "layer.tar.gz", dest / "layer.tar.gz")
    config = json.loads((SEED / "config.json").read_text(encoding="utf-8"))
    config["created"] = "2026-11-30T00:00:00Z"
    config["history"][0]["created"] = "2026-11-30T00:00:00Z"
    config["history"][0]["created_by"] += " (another build of the tag: tests/test_fresh_machine.py)"
    (dest / "config.json").write_bytes(canonical_json(config))
    manifest = registry_manifest(
        file_blob(dest / "config.json"), [file_blob(dest / "layer.tar.gz")]
    )
    (dest / "manifest.json").write_bytes(canonical_json(manifest))
    return dest


@dataclass
class FreshMachine:
    docker_host: str
    registry: str  # 127.0.0.1:PORT, the engine's mirror
    served_digest: str  # what it serves as debian:bookworm-slim
    torch_url: str  # the replica of https://download.pytorch.org/whl/cpu
    torch_log: list[str]
    apt: Replica


def _start_registry(root: Path, port: int, prefix: list[str]) -> subprocess.Popen[bytes]:
    """docker-registry on 127.0.0.1:PORT (of the namespace `prefix` enters, if any), storing
    in root/registry."""
    config = root / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n"
        f"  filesystem:\n    rootdirectory: {root / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    return subprocess.Popen(
        [*prefix, "docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(root / f"registry{len(prefix)}.log").open("wb"),
    )


def _start_engine(
    root: Path, registry: str, prefix: list[str]
) -> tuple[subprocess.Popen[bytes], str]:
    """dockerd in the namespace (its bridge is the namespace's; no iptables rules anywhere)."""
    sock = root / "d.sock"
    process = subprocess.Popen(
        [
            *prefix,
            "dockerd",
            f"--host=unix://{sock}",
            f"--data-root={root / 'data'}",
            f"--exec-root={root / 'x'}",
            f"--pidfile={root / 'd.pid'}",
            f"--registry-mirror=http://{registry}",
            f"--insecure-registry={registry}",
            "--iptables=false",
            "--ip-masq=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(root / "dockerd.log").open("wb"),
    )
    host = f"unix://{sock}"

    def up() -> bool:
        return (
            subprocess.run(
                ["docker", "-H", host, "info"], capture_output=True, check=False
            ).returncode
            == 0
        )

    _wait("the fresh machine's Docker engine", up, 90)
    return process, host


class _TorchIndex(http.server.SimpleHTTPRequestHandler):
    log_to: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.log_to.append(self.path)


def _serve_torch(root: Path) -> tuple[http.server.ThreadingHTTPServer, str, list[str]]:
    """https://download.pytorch.org/whl/cpu's layout on 127.0.0.1: the locked wheel at
    /whl/cpu/<file> and the simple page /whl/cpu/torch/, from this machine's copy."""
    pylock = tomllib.loads((REPO / "lockfiles/pylock.cpu-docker.toml").read_text("utf-8"))
    (torch,) = [p for p in pylock["packages"] if p["name"] == "torch"]
    (wheel,) = torch["wheels"]
    name = wheel["url"].rsplit("/", 1)[-1].replace("%2B", "+")
    folder = os.environ.get("ENVBUILDER_MIRROR_PYTORCH_CPU", "/opt/wheels")
    local = Path(folder) / name
    if not local.is_file():
        pytest.fail(f"no copy of the locked {name} on this machine ({folder})")
    index = root / "torch-index" / "whl" / "cpu"
    (index / "torch").mkdir(parents=True)
    shutil.copy(local, index / name)
    digest = hashlib.sha256((index / name).read_bytes()).hexdigest()
    assert digest == wheel["hashes"]["sha256"]
    quoted = name.replace("+", "%2B")
    (index / "torch" / "index.html").write_text(
        f'<a href="../{quoted}#sha256={digest}">{name}</a>\n', encoding="utf-8"
    )
    log: list[str] = []
    handler = type("H", (_TorchIndex,), {"log_to": log})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(root / "torch-index"))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/whl/cpu", log


def _in_namespace(root: Path) -> list[str]:
    """A network namespace of its own with only its loopback up; the prefix that runs a
    command in it. `nsenter --net`, not `ip netns exec`: that one also mounts a sysfs of its
    own, hiding the cgroup mounts dockerd needs."""
    name = root.name
    subprocess.run(["ip", "netns", "add", name], check=True)
    prefix = ["nsenter", f"--net=/run/netns/{name}"]
    subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], check=True)
    return prefix


def _unmount_under(root: Path) -> None:
    """What the engine left mounted under `root` (its netns bind mount), deepest first."""
    lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    points = [line.split()[4] for line in lines]
    for point in sorted((p for p in points if p.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", point], check=False)


def _in_namespace_ok(prefix: list[str], url: str) -> bool:
    done = subprocess.run(
        [*prefix, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", url],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout == "200"


@pytest.fixture(scope="module")
def fresh() -> Iterator[FreshMachine]:
    root = Path(tempfile.mkdtemp(prefix="ebfm", dir="/tmp"))  # short: a unix socket lives there
    processes: list[subprocess.Popen[bytes]] = []
    server = None
    apt = None
    prefix: list[str] = []
    try:
        prefix = _in_namespace(root)
        port = _free_port()
        processes.append(_start_registry(root, port, []))  # this machine's twin
        processes.append(_start_registry(root, port, prefix))  # the engine's mirror
        registry = f"127.0.0.1:{port}"
        _wait("the fresh machine's registry", lambda: _http_ok(f"http://{registry}/v2/"))
        _wait(
            "its twin in the namespace",
            lambda: _in_namespace_ok(prefix, f"http://{registry}/v2/"),
        )
        pushed = subprocess.run(
            [
                *(sys.executable, str(REPO / ".ci/seed_image.py"), "push"),
                str(_other_debian(root / "img")),
                *("--registry", registry, "--name", "library/debian", "--tag", "bookworm-slim"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        served = pushed.stdout.strip().splitlines()[-1]
        engine, host = _start_engine(root, registry, prefix)
        processes.append(engine)
        server, torch_url, torch_log = _serve_torch(root)
        apt = Replica(root / "apt", serve_prefix=prefix)
        yield FreshMachine(host, registry, served, torch_url, torch_log, apt)
    finally:
        if apt is not None:
            apt.stop()
        if server is not None:
            server.shutdown()
        for process in reversed(processes):  # the engine first: it unmounts its layers
            process.terminate()
            process.wait(timeout=120)
        _unmount_under(root)
        if prefix:
            subprocess.run(["ip", "netns", "delete", root.name], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _checkout(dest: Path) -> Path:
    """A clean copy of this checkout: the files git tracks (or would), nothing ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _environ(fresh: FreshMachine, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVBUILDER_", "DOCKER_"))}
    bindir = str(Path(sys.executable).parent)  # nox, as `uv tool install nox` would put it
    env.update(
        {
            "PATH": f"{bindir}:{env.get('PATH', '')}",
            "DOCKER_HOST": fresh.docker_host,
            "ENVBUILDER_MIRROR_PYTORCH_CPU": fresh.torch_url,
            "ENVBUILDER_MIRRORS_FILE": str(cache / "no-mirrors.toml"),
            "ENVBUILDER_APT_PROXY": fresh.apt.url,
            "ENVBUILDER_CACHE": str(cache),
            "NO_COLOR": "1",
        }
    )
    return env


def test_the_first_command_re_pins_in_a_scratch_copy_and_validates(
    fresh: FreshMachine, tmp_path: Path
) -> None:
    checkout = _checkout(tmp_path / "clone")
    committed = {p.name: p.read_bytes() for p in (checkout / "lockfiles").iterdir()}
    done = subprocess.run(
        FIRST_COMMAND,
        cwd=checkout,
        env=_environ(fresh, tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    pinned = tomllib.loads(committed["cpu.lock.toml"].decode())["targets"]["docker"]["base_image"]
    old = pinned.split("@", 1)[1]
    scratch_lock = checkout / "build/demo/lockfiles/cpu.lock.toml"
    assert (
        f"cpu: re-pinned debian:bookworm-slim {old} -> {fresh.served_digest} (docker) in "
        f"{scratch_lock}"
    ) in out, out[-6000:]
    assert "which it read from 127.0.0.1:5000, a registry this engine does not use" in out
    # The committed lock is untouched; the scratch copy's pins this machine's image.
    assert {p.name: p.read_bytes() for p in (checkout / "lockfiles").iterdir()} == committed
    repinned = tomllib.loads(scratch_lock.read_text(encoding="utf-8"))["targets"]["docker"]
    assert repinned["base_image"] == f"debian:bookworm-slim@{fresh.served_digest}"
    assert repinned["base_source"] == fresh.registry
    report = json.loads((checkout / "build/demo/reports/cpu.docker.json").read_text("utf-8"))
    assert report["status"] == "pass", report["status"]
    # torch came from the replica of its canonical index, apt from the snapshot replica.
    assert any(p.endswith(".whl") and "torch-2.13.0" in p for p in fresh.torch_log)
    assert any("libssl3_" in p for p in fresh.apt.served())


def test_build_tells_not_served_here_from_lost_or_changed(
    fresh: FreshMachine, tmp_path: Path
) -> None:
    """Without --repin-base-into the build stops at the pull (before any wheel), naming the
    case; a pin whose source is this engine's own mirror is "lost or changed"."""
    checkout = _checkout(tmp_path / "clone")
    env = _environ(fresh, tmp_path / "cache")
    build = [sys.executable, "-m", "envbuilder", "build", "--target", "docker", "--env", "cpu"]
    done = subprocess.run(build, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "which it read from 127.0.0.1:5000, a registry this engine does not use" in done.stderr
    assert "Nothing is wrong with the lock" in done.stderr
    assert "--repin-base-into build/demo" in done.stderr

    lock = checkout / "lockfiles/cpu.lock.toml"
    text = lock.read_text(encoding="utf-8")
    lock.write_text(text.replace("127.0.0.1:5000", fresh.registry), encoding="utf-8")
    done = subprocess.run(
        [*build, "--repin-base-into", "build/demo"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert f"read from {fresh.registry}, which this engine uses but which does not serve" in (
        done.stderr
    )
    assert "changed by hand" in done.stderr and "git log -p lockfiles/" in done.stderr
    assert not (checkout / "build/demo").exists()  # asked, but never for a lost pin

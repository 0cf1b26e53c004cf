"""Issue 5: envbuilder works unchanged against a remote engine named by `DOCKER_HOST=ssh://...`.

A real OpenSSH server (`/usr/sbin/sshd`, Debian's openssh-server, installed by .ci/services.sh)
listens on 127.0.0.1 only, on a free port, with keys made here. The docker SDK goes through the
system's `ssh` client (`use_ssh_client`), which runs `docker system dial-stdio` on the "remote"
side, i.e. the local engine again -- so both ends can be compared.

OpenSSH reads `~/.ssh/config` from the passwd entry's home, not from $HOME, so a temp HOME would not
reach it; instead a two-line `ssh` first on PATH adds `-F <temp config>` and execs the real
/usr/bin/ssh. The config (Host, Port, IdentityFile, no known_hosts) is what a user would put in
`~/.ssh/config`. The port is in DOCKER_HOST: the docker SDK passes `-p 22` when DOCKER_HOST
has none, so a `Port` line in the ssh config does not apply (unlike the docker CLI).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from clirun import in_project
from conftest import service_missing

from envbuilder.builders.docker import image_tag
from envbuilder.core.errors import EngineError
from envbuilder.core.project import Project
from envbuilder.image import engine
from envbuilder.lock import lockfile

pytestmark = [pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu"
SSHD = Path("/usr/sbin/sshd")
SSH = shutil.which("ssh", path="/usr/bin:/bin") or "/usr/bin/ssh"


@dataclass(frozen=True)
class SshServer:
    """A running sshd: how to reach it and what to export so that ssh:// reaches it."""

    pid: int
    user: str
    port: int
    env: dict[str, str]  # PATH (the ssh wrapper first) for the docker SDK's ssh subprocess
    log: Path

    @property
    def docker_host(self) -> str:
        # The port must be in DOCKER_HOST: without one the docker SDK passes `-p 22` to ssh,
        # which overrides a `Port` in the ssh config (docker/utils/utils.py parse_host).
        return f"ssh://{self.user}@127.0.0.1:{self.port}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "envbuilder-test", "-f", str(path)],
        check=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the sshd this module started, by its pid. Its per-connection processes end with
    their clients' ssh processes (the fixture closes every docker client first: close_all);
    a session ended first is what test_exit_after_the_far_side_closed_prints_no_traceback
    does on purpose."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _write_configs(tmp: Path, port: int, user: str) -> tuple[Path, Path]:
    """(sshd_config, the client's ssh config) in `tmp`, with fresh host and client keys."""
    _keygen(tmp / "host_key")
    _keygen(tmp / "client_key")
    shutil.copy(tmp / "client_key.pub", tmp / "authorized_keys")
    sshd_config = tmp / "sshd_config"
    sshd_config.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {tmp / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile {tmp / 'sshd.pid'}\n"
        f"AllowUsers {user}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nX11Forwarding no\n"
        "LogLevel VERBOSE\n"
    )
    client_config = tmp / "ssh_config"
    client_config.write_text(
        f"Host 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {tmp / 'client_key'}\n"
        "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  BatchMode yes\n  LogLevel ERROR\n"
    )
    return sshd_config, client_config


def _wait_until_up(
    proc: subprocess.Popen[bytes], env: dict[str, str], user: str, log: Path
) -> None:
    """Poll `ssh 127.0.0.1 true` until it logs in; fail/skip with sshd's log if it never does."""
    for _ in range(50):
        if proc.poll() is not None:
            service_missing(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        done = subprocess.run(
            ["ssh", "--", "127.0.0.1", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0:
            return
        time.sleep(0.2)
    pytest.fail(
        f"cannot log in to the test sshd as {user}: {done.stderr}\n"
        f"sshd log:\n{log.read_text()[-2000:]}",
        pytrace=False,
    )


@contextlib.contextmanager
def _running_sshd(tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], SshServer]]:
    """An sshd on 127.0.0.1:<free port> that accepts this user's temp key, and the environment
    that reaches it; stopped afterwards (its sessions are the caller's to end first)."""
    if not SSHD.exists():
        service_missing(f"{SSHD} is missing (Debian: apt-get install openssh-server)")
    remote_docker = subprocess.run(
        ["sh", "-lc", "command -v docker"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not remote_docker:
        service_missing(
            "the `docker` CLI is not on the login PATH (ssh:// runs "
            "`docker system dial-stdio` on the remote side)"
        )
    user = pwd.getpwuid(os.getuid()).pw_name
    port = _free_port()
    sshd_config, client_config = _write_configs(tmp, port, user)
    wrapper_dir = tmp / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F "{client_config}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    # sshd refuses to start without its privilege-separation directory (Debian's init makes it).
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = tmp / "sshd.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(sshd_config)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    try:
        _wait_until_up(proc, env, user, log)
        yield proc, SshServer(proc.pid, user, port, env, log)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def ssh_server(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """The module's sshd (see `_running_sshd`)."""
    with _running_sshd(tmp_path_factory.mktemp("sshd")) as (_proc, server):
        try:
            yield server
        finally:
            gc.collect()  # unreferenced clients close now, while sshd still answers
            engine.close_all()


@pytest.fixture
def via_ssh(ssh_server: SshServer, monkeypatch: pytest.MonkeyPatch) -> SshServer:
    """DOCKER_HOST=ssh://USER@127.0.0.1:PORT for this test (key etc. from the ssh config)."""
    monkeypatch.setenv("PATH", ssh_server.env["PATH"])
    monkeypatch.setenv("DOCKER_HOST", ssh_server.docker_host)
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return ssh_server


def _sessions(server: SshServer) -> int:
    """How many logins sshd accepted so far (from its log)."""
    return server.log.read_text().count("Accepted publickey for")


def test_connect_over_ssh_reaches_the_same_engine(docker_client: Any, via_ssh: SshServer) -> None:
    # Other tests build and remove images on the same engine meanwhile: compare with what the
    # local socket lists both before and after, and follow one tag made here both ways.
    tag = f"envbuilder-ssh-test:{uuid.uuid4().hex[:12]}"
    assert docker_client.images.get("debian:bookworm-slim").tag(tag)
    before_sessions = _sessions(via_ssh)
    local_before = set(docker_client.api.images(quiet=True))
    client = engine.connect()
    try:
        assert client.api.base_url.startswith("http+docker://ssh")
        assert client.info()["ID"] == docker_client.info()["ID"]
        # One API call (images.list() makes one per image, each a new ssh login).
        remote = set(client.api.images(quiet=True))
        local_after = set(docker_client.api.images(quiet=True))
        assert [tag] == [
            t for i in client.api.images(name=tag.split(":")[0]) for t in i["RepoTags"] if t == tag
        ]
        client.api.remove_image(tag)  # a write through ssh, seen on the local socket
    finally:
        client.close()
    assert local_before & local_after <= remote
    assert local_before & local_after  # the seeded base image at least
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    assert _sessions(via_ssh) > before_sessions  # it went through this sshd, not the socket


def test_wrong_key_is_an_engine_error_naming_the_host(
    via_ssh: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused by the real sshd (another key): the user gets EngineError, not a traceback.
    _keygen(tmp_path / "other_key")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host 127.0.0.1\n  Port {via_ssh.port}\n  IdentityFile {tmp_path / 'other_key'}\n"
        "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  BatchMode yes\n  LogLevel ERROR\n"
    )
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F "{config}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(EngineError, match="ssh://"):
        engine.connect()


@pytest.fixture(scope="module")
def cpu_project(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A copy of the checkout's CPU env with its image on the engine: built through the local
    socket, which is a no-op when tests/builders/test_docker_cpu.py (or a user) built it already."""
    inputs = [ROOT / "environments.toml", ROOT / "lockfiles", ROOT / "dockerfiles" / ENV]
    missing = [str(p.relative_to(ROOT)) for p in inputs if not p.exists()]
    if missing:
        pytest.fail(f"the checkout lacks {', '.join(missing)} (run envbuilder lock/render)")
    root = tmp_path_factory.mktemp("cpu-ssh-project")
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / ENV, root / "dockerfiles" / ENV)
    project = Project.from_spec(root / "environments.toml")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DOCKER_HOST", raising=False)
        assert in_project(project, "build", "--target", "docker", "--env", ENV) == 0
    return project


@pytest.mark.slow
def test_validate_over_ssh_writes_a_passing_report(
    cpu_project: Project, docker_client: Any, via_ssh: SshServer
) -> None:
    lock = lockfile.load_env_lock(cpu_project, ENV)
    assert lock is not None
    tag = image_tag(ENV, lock.targets["docker"].pylock_sha256)
    assert docker_client.images.get(tag)  # built by the fixture
    report_path = cpu_project.report(ENV, "docker")
    assert not report_path.exists()
    before = _sessions(via_ssh)

    code = in_project(
        cpu_project,
        "validate",
        "--target",
        "docker",
        "--env",
        ENV,
        "--only",
        "device",
        "--only",
        "conformance",
    )

    report = json.loads(report_path.read_text())
    assert code == 0, report
    assert report["status"] == "pass"
    assert report["labels"] == {"env": ENV, "target": "docker"}
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert (statuses.pop("device"), statuses.pop("conformance")) == ("pass", "pass")
    assert set(statuses.values()) == {"skip"}  # not in --only
    assert report["fingerprint"]["torch"].startswith("2.13.0")
    assert report["fingerprint"]["lock_sha256"] == lock.targets["docker"].pylock_sha256
    assert _sessions(via_ssh) > before  # the engine was reached through this sshd
    leftover = docker_client.containers.list(
        all=True, filters={"label": [f"org.envbuilder.env={ENV}", "org.envbuilder.role=validate"]}
    )
    assert leftover == []


# --- issue 13, fault 11: no BrokenPipeError from ssh connections, and close() ends them ---------

#: A CLI-like process: it runs a container over ssh:// (what `validate` does), says "ready", and
#: exits when told to, leaving its connections to close_all() and the exit.
_CHILD = """
import sys
from envbuilder.image import engine
client = engine.connect()
code, output, _ = engine.run_in_container(
    client, "debian:bookworm-slim", ["echo", "probe"],
    engine.ContainerRun(labels={"org.envbuilder.env": "ssh-exit-test"}))
print("ready", code, output.strip(), flush=True)
sys.stdin.readline()
"""


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, command name, state letter) of every process, from /proc."""
    out: dict[int, tuple[int, str, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        out[int(stat.parent.name)] = (int(ppid), name, state)
    return out


def _running_ssh_children(pid: int) -> set[int]:
    """The `ssh` processes `pid` started that still run (not zombies)."""
    return {
        p
        for p, (ppid, name, state) in _processes().items()
        if ppid == pid and name == "ssh" and state != "Z"
    }


def _descendants(pid: int) -> list[int]:
    procs = _processes()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, (ppid, _n, _s) in procs.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}", pytrace=False)
        time.sleep(0.1)


def test_exit_after_the_far_side_closed_prints_no_traceback(
    docker_client: Any, tmp_path: Path
) -> None:
    # The far side ends the connections while the process still holds them (dockerd drops a
    # connection idle for 5 minutes; here the sshd's sessions are ended at once). The docker SDK's
    # own close() then wrote to the exited ssh at interpreter exit: BrokenPipeError tracebacks.
    with _running_sshd(tmp_path) as (sshd, server):
        env = {**server.env, "DOCKER_HOST": server.docker_host}
        for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
            env.pop(name, None)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            ready = child.stdout.readline()
            assert ready.split() == ["ready", "0", "probe"], child.communicate(timeout=60)
            open_ssh = _running_ssh_children(child.pid)
            assert open_ssh, "the child holds no open ssh connection: this test would prove nothing"
            for pid in _descendants(sshd.pid):  # the sessions of the sshd this test started
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            _wait_for(
                lambda: not (_running_ssh_children(child.pid) & open_ssh),
                "the child's ssh processes saw their sessions end",
            )
            child.stdin.write("\n")
            child.stdin.flush()
            _out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_close_ends_every_ssh_process_it_started(via_ssh: SshServer) -> None:
    before = _running_ssh_children(os.getpid())
    client = engine.connect()
    try:
        code, output, _ = engine.run_in_container(
            client,
            "debian:bookworm-slim",
            ["echo", "probe"],
            engine.ContainerRun(labels={"org.envbuilder.env": "ssh-close-test"}),
        )
        assert (code, output.strip()) == (0, "probe")
        started = _running_ssh_children(os.getpid()) - before
        assert started, "no ssh connection is open after a container run: nothing to close"
    finally:
        client.close()
    assert not (_running_ssh_children(os.getpid()) & started)

"""The docker target on a hand-made project (one tiny locked wheel), against the real engine.

The image is built once per session, the corporate way: through a real HTTP proxy on 127.0.0.1
(given as HTTP_PROXY, so apt inside the build goes through it) and with an extra CA bundle
($ENVBUILDER_CA_BUNDLE). Then the image is checked with testinfra: none of it stayed behind.
The real CPU env (torch, the probe) is built and validated in tests/builders/test_docker_cpu.py.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import select
import socket
import socketserver
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envbuilder.builders.context import assemble_context, context_digest
from envbuilder.builders.docker import (
    DockerBuilder,
    detect_host_kind,
    image_tag,
    probe_arguments,
)
from envbuilder.core.errors import (
    BuildError,
    EngineError,
    LockError,
    RegistryError,
    UsageError,
    ValidationError,
)
from envbuilder.core.imagedefs import LOCK_LABEL, needs_host_network, proxy_build_args
from envbuilder.core.model import EnvSpec
from envbuilder.core.project import Project
from envbuilder.lock import lockfile
from envbuilder.lock.record import record_artifact
from envbuilder.spec.load import load_spec
from envbuilder.targets.base import BuildOptions, PullOptions, PushOptions, ValidateOptions
from envbuilder.targets.docker import DockerTable

ENV = "demo"
TARGET = DockerBuilder()
WHEEL = "envbuilder_demo-1.0-py3-none-any.whl"
FAKE_CA = "-----BEGIN CERTIFICATE-----\nZW52YnVpbGRlci10ZXN0LWNh\n-----END CERTIFICATE-----\n"

# Follows the build-context contract: the build stage installs offline from envbuilder/, the final
# stage copies only the venv. The build stage records the CA's hash (not the CA) to prove it
# arrived there.
DOCKERFILE = """\
FROM debian:bookworm-slim AS base
RUN apt-get update && apt-get install -y --no-install-recommends python3 \\
    && rm -rf /var/lib/apt/lists/* && useradd --uid 1000 --create-home envbuilder

FROM base AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv \\
    && rm -rf /var/lib/apt/lists/*
COPY envbuilder/ /tmp/envbuilder/
RUN python3 -m venv /opt/venv \\
    && /opt/venv/bin/python -m pip install --no-cache-dir --no-index --no-deps \\
       --require-hashes -r /tmp/envbuilder/requirements.txt \\
    && if [ -f /tmp/envbuilder/ca.crt ]; then \\
         sha256sum /tmp/envbuilder/ca.crt | cut -c1-64 > /opt/venv/ca-seen; fi

FROM base
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    ENVBUILDER_ENV=demo
ARG ENVBUILDER_LOCK_SHA256
LABEL org.envbuilder.lock-sha256=$ENVBUILDER_LOCK_SHA256
USER 1000
"""


def _wheel(dest: Path) -> Path:
    """A minimal valid wheel: envbuilder_demo.py with VALUE = 42."""
    files = {
        "envbuilder_demo.py": b"VALUE = 42\n",
        "envbuilder_demo-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: envbuilder-demo\nVersion: 1.0\n"
        ),
        "envbuilder_demo-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    record.append("envbuilder_demo-1.0.dist-info/RECORD,,")
    files["envbuilder_demo-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    path = dest / WHEEL
    path.write_bytes(buf.getvalue())
    return path


#: The spec of demo_env(): the lock below must be current for it (targets refuse a stale lock).
DEMO_SPEC = """\
# hand-made test project: env demo, one tiny wheel, locked by hand below
[env.demo]
description = "hand-made test env"
accelerator = "cpu"
python = "3.11"
packages = ["envbuilder-demo==1.0"]
targets = ["docker"]

[env.demo.docker]
base = "debian:bookworm-slim"
"""


def make_project(
    root: Path, dockerfile: str = DOCKERFILE, base_image: str = "debian:bookworm-slim"
) -> Project:
    """A locked and rendered project with one env, `demo`, that installs one tiny wheel."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "environments.toml").write_text(DEMO_SPEC)
    project = Project.from_spec(root / "environments.toml", cache=root / "cache")
    wheel = _wheel(root)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project.lockfiles.mkdir()
    pylock = project.pylock(ENV, "docker")
    pylock.write_text(
        'lock-version = "1.0"\ncreated-by = "envbuilder-tests"\nrequires-python = ">=3.11"\n\n'
        '[[packages]]\nname = "envbuilder-demo"\nversion = "1.0"\n\n[[packages.wheels]]\n'
        f'name = "{WHEEL}"\nurl = "{wheel.as_uri()}"\nhashes = {{ sha256 = "{sha}" }}\n'
    )
    lock = lockfile.EnvLock(
        version=lockfile.LOCK_VERSION,
        env=ENV,
        envbuilder_version="0",
        spec_hash=load_spec(project.spec_path).env_hash(ENV),  # current: targets refuse stale
        source_date_epoch=0,
        targets={
            "docker": lockfile.TargetLock(
                platform="x86_64-manylinux_2_28",
                python="3.11",
                pylock=pylock.name,
                pylock_sha256=hashlib.sha256(pylock.read_bytes()).hexdigest(),
                base_image=base_image,
            )
        },
    )
    lockfile.write_env_lock(project, lock)
    (project.root / "dockerfiles" / ENV).mkdir(parents=True)
    (project.root / "dockerfiles" / ENV / "Dockerfile").write_text(dockerfile)
    return project


@functools.cache
def _demo_spec_hash() -> str:
    """The env's hash in DEMO_SPEC: a loaded env carries it, and builders check the lock with it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "environments.toml"
        path.write_text(DEMO_SPEC)
        return load_spec(path).env_hash(ENV)


def demo_env() -> EnvSpec:
    """The env of DEMO_SPEC, made by hand (as the spec loader makes it, its spec hash too)."""
    return EnvSpec(
        name=ENV,
        description="hand-made test env",
        accelerator="cpu",
        python="3.11",
        packages=("envbuilder-demo==1.0",),
        index_pins={},
        targets=("docker",),
        tables={"docker": DockerTable(base="debian:bookworm-slim")},
        spec_hash=_demo_spec_hash(),
    )


def _pylock_sha(project: Project) -> str:
    return hashlib.sha256(project.pylock(ENV, "docker").read_bytes()).hexdigest()


class _ProxyHandler(socketserver.StreamRequestHandler):
    """A forward HTTP proxy (absolute-URI requests and CONNECT), counting what it served."""

    def handle(self) -> None:
        request = self.rfile.readline()
        method, target, _version = request.decode("latin-1").split(" ", 2)
        headers = []
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            headers.append(line)
        self.server.seen.append(f"{method} {target}")  # type: ignore[attr-defined]
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)), timeout=30)
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            rest = target.split("://", 1)[1]
            hostport, _, path = rest.partition("/")
            host, _, port = hostport.partition(":")
            upstream = socket.create_connection((host, int(port or 80)), timeout=30)
            upstream.sendall(
                f"{method} /{path} HTTP/1.1\r\n".encode()
                + b"".join(
                    h for h in headers if not h.lower().startswith((b"proxy-", b"connection"))
                )
                + b"Connection: close\r\n\r\n"
            )
        self._relay(upstream)

    def _relay(self, upstream: socket.socket) -> None:
        sockets = [self.connection, upstream]
        try:
            while True:
                readable, _, _ = select.select(sockets, [], [], 60)
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is self.connection else self.connection).sendall(data)
        finally:
            upstream.close()


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.seen: list[str] = []


@pytest.fixture(scope="session")
def corporate_build(
    docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Project, Any, list[str], str]]:
    """(project, artifact, requests the proxy saw, proxy URL): the demo image built through a
    local proxy with an extra CA bundle, without the layer cache."""
    root = tmp_path_factory.mktemp("corporate")
    project = make_project(root / "project")
    ca = root / "corp-ca.pem"
    ca.write_text(FAKE_CA)
    proxy = _Proxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_address[1]}"
    with pytest.MonkeyPatch.context() as mp:
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            mp.setenv(name, url)
        mp.setenv("NO_PROXY", "localhost")
        # The machine's apt proxy (CI's snapshot replica) would take http:// from HTTP_PROXY.
        mp.delenv("ENVBUILDER_APT_PROXY", raising=False)
        mp.setenv("ENVBUILDER_CA_BUNDLE", str(ca))
        artifact = TARGET.build(project, demo_env(), BuildOptions(no_cache=True), _no_progress)
    proxy.shutdown()
    proxy.server_close()
    yield project, artifact, list(proxy.seen), url
    docker_client.images.remove(artifact.reference, force=True)


def _no_progress(what: str, done: int, total: int | None) -> None:
    pass


@pytest.fixture(scope="session")
def demo_container(docker_client: Any, corporate_build: Any) -> Iterator[Any]:
    """A running container of the demo image, for testinfra's docker backend."""
    _project, artifact, _seen, _url = corporate_build
    container = docker_client.containers.run(
        artifact.reference,
        ["sleep", "infinity"],
        detach=True,
        labels={"org.envbuilder.test": "demo-static"},
    )
    yield container
    container.remove(force=True)


@pytest.fixture(scope="session")
def demo_host(demo_container: Any) -> Any:
    testinfra = pytest.importorskip("testinfra")
    return testinfra.get_host(f"docker://{demo_container.id}")


# --- build -------------------------------------------------------------------------------------


def test_build_tags_labels_and_records_the_image(docker_client: Any, corporate_build: Any) -> None:
    project, artifact, _seen, _url = corporate_build
    sha = _pylock_sha(project)
    assert artifact.reference == image_tag(ENV, sha) == f"envbuilder/demo:{sha[:12]}"
    image = docker_client.images.get(artifact.reference)
    assert image.id == artifact.digest
    assert image.labels[LOCK_LABEL] == sha
    recorded = lockfile.load_env_lock(project, ENV)
    assert recorded is not None
    assert recorded.artifacts["docker"]["image_id"] == image.id


def test_build_went_through_the_proxy(corporate_build: Any) -> None:
    _project, _artifact, seen, _url = corporate_build
    # apt-get update/install in the base and build stages fetched through our proxy.
    assert any("Release" in s or "Packages" in s for s in seen), seen
    assert any(s.endswith(".deb") for s in seen), seen


def test_ca_bundle_reached_the_build_stage(demo_host: Any) -> None:
    seen = demo_host.file("/opt/venv/ca-seen").content_string.strip()
    assert seen == hashlib.sha256(FAKE_CA.encode()).hexdigest()


def test_history_and_config_hold_no_proxy_or_ca(docker_client: Any, corporate_build: Any) -> None:
    _project, artifact, _seen, url = corporate_build
    image = docker_client.images.get(artifact.reference)
    text = json.dumps(image.history()) + json.dumps(image.attrs)
    host_port = url.split("://", 1)[1]
    for secret in (host_port, "ca.crt", "ZW52YnVpbGRlci10ZXN0LWNh", "/tmp/envbuilder"):
        assert secret not in text


def test_image_filesystem_holds_no_proxy_ca_wheel_or_cache(
    demo_host: Any, corporate_build: Any
) -> None:
    _project, _artifact, _seen, url = corporate_build
    host_port = url.split("://", 1)[1]
    leftovers = demo_host.run(
        "find / -xdev \\( -name '*.whl' -o -name ca.crt -o -path /tmp/envbuilder "
        "-o -path '*/.cache/pip' \\) -print 2>/dev/null"
    ).stdout
    assert leftovers == ""
    assert demo_host.run("ls /var/lib/apt/lists | grep -v -x -e lock -e partial").stdout == ""
    grep = demo_host.run(f"grep -rl --exclude-dir=proc --exclude-dir=sys '{host_port}' /etc /opt")
    assert grep.stdout == ""
    assert "PROXY" not in demo_host.run("env").stdout.upper()


def test_static_image_checks(demo_host: Any) -> None:
    user = demo_host.user()
    assert user.uid == 1000
    assert user.name != "root"
    assert demo_host.run("command -v python").stdout.strip() == "/opt/venv/bin/python"
    assert (
        demo_host.run(
            "python -c 'import envbuilder_demo; print(envbuilder_demo.VALUE)'"
        ).stdout.strip()
        == "42"
    )
    assert demo_host.environment()["ENVBUILDER_ENV"] == "demo"
    assert not demo_host.file("/root/.cache").exists


def test_rebuild_with_nothing_changed_builds_nothing(
    docker_client: Any, corporate_build: Any
) -> None:
    project, artifact, _seen, _url = corporate_build
    again = TARGET.build(project, demo_env(), BuildOptions(), _no_progress)
    assert again.details["changed"] == "no"
    assert again.digest == artifact.digest


def test_context_follows_the_contract(corporate_build: Any) -> None:
    project, _artifact, _seen, _url = corporate_build
    context = assemble_context(
        project, ENV, "docker", project.root / "dockerfiles" / ENV, indexes=demo_env().indexes
    )
    try:
        files = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
        assert files == [
            "Dockerfile",
            "envbuilder/pylock.toml",
            "envbuilder/requirements.txt",
            f"envbuilder/wheels/{WHEEL}",
        ]
        line = (context / "envbuilder/requirements.txt").read_text().strip()
        sha = hashlib.sha256((context / f"envbuilder/wheels/{WHEEL}").read_bytes()).hexdigest()
        assert line == f"/tmp/envbuilder/wheels/{WHEEL} --hash=sha256:{sha}"
        digest = context_digest(context)
        (context / "envbuilder/ca.crt").write_text(FAKE_CA)
        assert context_digest(context) == digest  # trust settings are not content
        (context / "Dockerfile").write_text(DOCKERFILE + "# changed\n")
        assert context_digest(context) != digest
    finally:
        import shutil

        shutil.rmtree(context)


def test_missing_dockerfile_says_to_render(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    (project.root / "dockerfiles" / ENV / "Dockerfile").unlink()
    with pytest.raises(Exception, match="envbuilder render"):
        assemble_context(
            project, ENV, "docker", project.root / "dockerfiles" / ENV, indexes=demo_env().indexes
        )


def test_unlocked_env_says_to_lock(tmp_path: Path, docker_client: Any) -> None:
    project = make_project(tmp_path / "p")
    project.env_lock(ENV).unlink()
    with pytest.raises(LockError, match="envbuilder lock --env demo"):
        TARGET.build(project, demo_env(), BuildOptions(), _no_progress)


def test_edited_pylock_is_refused(tmp_path: Path, docker_client: Any) -> None:
    project = make_project(tmp_path / "p")
    with project.pylock(ENV, "docker").open("a") as fh:
        fh.write("# edited\n")
    with pytest.raises(LockError, match="does not match the sha256"):
        TARGET.build(project, demo_env(), BuildOptions(), _no_progress)


def test_unpullable_base_fails_before_fetching_wheels(
    tmp_path: Path, docker_client: Any, registry: str
) -> None:
    base = f"{registry}/envbuilder-test/missing-base@sha256:{'0' * 64}"
    project = make_project(tmp_path / "p", base_image=base)
    with pytest.raises(BuildError, match="cannot be pulled"):
        TARGET.build(project, demo_env(), BuildOptions(), _no_progress)
    assert not project.wheels.exists()  # nothing was fetched


def test_base_digest_missing_from_the_registry_says_how_to_repin(
    tmp_path: Path, docker_client: Any, registry: str
) -> None:
    # The repository exists (the seeded debian), this digest does not: a lock pinned on another
    # machine's seed, or a digest the registry dropped.
    digest = "sha256:" + "e" * 64
    project = make_project(tmp_path / "p", base_image=f"{registry}/library/debian@{digest}")
    with pytest.raises(BuildError) as info:
        TARGET.build(project, demo_env(), BuildOptions(), _no_progress)
    message = str(info.value)
    assert "\n" not in message
    assert digest in message and "does not have that digest" in message
    assert "`envbuilder lock --env demo --refresh-base && envbuilder render --env demo`" in message
    assert not project.wheels.exists()


def test_failed_build_records_nothing(tmp_path: Path, docker_client: Any) -> None:
    project = make_project(tmp_path / "p", "FROM debian:bookworm-slim\nRUN exit 7\n")
    with pytest.raises(Exception, match="returned a non-zero code: 7"):
        TARGET.build(project, demo_env(), BuildOptions(), _no_progress)
    recorded = lockfile.load_env_lock(project, ENV)
    assert recorded is not None
    assert recorded.artifacts == {}


# --- validate (the probe needs torch: see test_docker_cpu.py; here the error paths) -------------


def test_validate_without_an_image_says_build_or_pull(tmp_path: Path, docker_client: Any) -> None:
    project = make_project(tmp_path / "p")
    with pytest.raises(ValidationError, match="envbuilder build --target docker --env demo"):
        TARGET.validate(project, demo_env(), ValidateOptions(), _no_progress)


def _validate_containers(client: Any) -> list[Any]:
    """Containers `validate` started for the demo env (other helpers share the engine)."""
    labels = ["org.envbuilder.env=demo", "org.envbuilder.role=validate"]
    return list(client.containers.list(all=True, filters={"label": labels}))


def test_validate_runs_the_probe_as_uid_1000_and_writes_the_report(
    corporate_build: Any, docker_client: Any
) -> None:
    # The demo venv has no torch: the probe runs, its torch checks error, the report says fail.
    project, _artifact, _seen, _url = corporate_build
    report = TARGET.validate(project, demo_env(), ValidateOptions(), _no_progress)
    assert report == project.reports / "demo.docker.json"
    data = json.loads(report.read_text())
    assert data["labels"] == {"env": "demo", "target": "docker"}
    assert data["options"]["expect"] == "cpu"
    assert data["fingerprint"]["lock_sha256"] == _pylock_sha(project)
    assert data["fingerprint"]["python"].startswith("3.11.")
    assert data["status"] == "fail"
    assert "No module named 'torch'" in json.dumps(data["checks"])
    # The report says which engine produced it (issue 29).
    assert data["engine"]["product"] == "docker"
    assert data["engine"]["version"] == docker_client.version()["Version"]
    assert data["engine"]["api_version"] == docker_client.version()["ApiVersion"]
    assert _validate_containers(docker_client) == []


def test_validate_without_python_in_the_image_is_a_clear_error(
    tmp_path: Path, docker_client: Any
) -> None:
    project = make_project(tmp_path / "p", "FROM debian:bookworm-slim\nUSER 1000\n")
    artifact = TARGET.build(project, demo_env(), BuildOptions(), _no_progress)
    try:
        with pytest.raises(EngineError, match=r"could not start: .*/opt/venv/bin/python"):
            TARGET.validate(project, demo_env(), ValidateOptions(), _no_progress)
        assert not (project.reports / "demo.docker.json").exists()
        assert _validate_containers(docker_client) == []
    finally:
        docker_client.images.remove(artifact.reference, force=True)


def test_probe_arguments() -> None:
    options = ValidateOptions(level="standard", repeat=3, only=("matmul",), skip=("amp",))
    assert probe_arguments(demo_env(), options) == [
        "--level",
        "standard",
        "--expect",
        "cpu",
        "--label",
        "env=demo",
        "--label",
        "target=docker",
        "--repeat",
        "3",
        "--only",
        "matmul",
        "--skip",
        "amp",
    ]


@pytest.mark.parametrize(
    ("present", "kind"),
    [
        (["dev/kfd", "dev/dri/renderD128"], "native-rocm"),
        (["dev/dxg"], "wsl2-legacy"),
        (["dev/dxg", "opt/rocm/lib/librocdxg.so"], "wsl2-rocdxg"),
        (["dev/nvidia0"], "nvidia"),
        ([], "cpu"),
    ],
)
def test_detect_host_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: list[str], kind: str
) -> None:
    monkeypatch.delenv("ENVBUILDER_HOST_KIND", raising=False)
    for rel in present:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).touch()
    assert detect_host_kind(tmp_path) == kind


def test_host_kind_override_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVBUILDER_HOST_KIND", "nvidia")
    assert detect_host_kind() == "nvidia"
    monkeypatch.setenv("ENVBUILDER_HOST_KIND", "tpu")
    with pytest.raises(UsageError, match="native-rocm"):
        detect_host_kind()


def test_proxy_build_args_take_both_spellings() -> None:
    args = proxy_build_args({"https_proxy": "http://p:1", "NO_PROXY": "x", "PATH": "/bin"})
    assert args == {
        "HTTPS_PROXY": "http://p:1",
        "https_proxy": "http://p:1",
        "NO_PROXY": "x",
        "no_proxy": "x",
    }
    assert needs_host_network({"HTTP_PROXY": "http://127.0.0.1:3128"})
    assert needs_host_network({"HTTPS_PROXY": "localhost:3128"})
    assert not needs_host_network({"HTTPS_PROXY": "http://proxy.corp.example:3128"})


# --- push / pull -------------------------------------------------------------------------------


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Docker config: no credentials unless a test writes some."""
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text("{}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    return config


def test_push_records_the_digest_and_pull_restores_the_tag(
    corporate_build: Any, docker_client: Any, registry: str, docker_config: Path
) -> None:
    project, artifact, _seen, _url = corporate_build
    target = TARGET
    digest_ref = target.push(
        project, demo_env(), PushOptions(f"{registry}/envbuilder-test"), _no_progress
    )
    assert digest_ref.startswith(f"{registry}/envbuilder-test/demo@sha256:")
    recorded = lockfile.load_env_lock(project, ENV)
    assert recorded is not None
    assert recorded.artifacts["docker"]["repo_digest"] == digest_ref

    # Untag (the image itself stays while the testinfra container uses it; the CPU test pulls
    # into an engine without the image).
    docker_client.images.remove(artifact.reference, force=True)
    # (push uploads with the registry API: it leaves no local REGISTRY/...:tag behind, as
    # `docker push` did)
    repo_tag = f"{registry}/envbuilder-test/demo:{_pylock_sha(project)[:12]}"
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(repo_tag)
    image_id = target.pull(project, demo_env(), PullOptions(), _no_progress)
    assert image_id == artifact.digest
    assert docker_client.images.get(artifact.reference).id == artifact.digest


def test_pull_refuses_an_image_built_from_another_lock(
    corporate_build: Any,
    docker_client: Any,
    registry: str,
    docker_config: Path,
    tmp_path: Path,
) -> None:
    project, _artifact, _seen, _url = corporate_build
    # Another image in the same repository: a different digest than what the lock says.
    other = docker_client.images.build(
        fileobj=io.BytesIO(b"FROM debian:bookworm-slim\nLABEL other=1\n"),
        rm=True,
        tag=f"{registry}/envbuilder-test/demo:other",
    )[0]
    pushed = docker_client.images.push(f"{registry}/envbuilder-test/demo", tag="other")
    assert "error" not in pushed
    other_digest = docker_client.images.get(other.id).attrs["RepoDigests"][0]
    recorded = lockfile.load_env_lock(project, ENV)
    assert recorded is not None
    good = dict(recorded.artifacts["docker"])
    try:
        record_artifact(project, ENV, "docker", repo_digest=other_digest)
        with pytest.raises(RegistryError, match=r"refusing .* built from lock"):
            TARGET.pull(project, demo_env(), PullOptions(), _no_progress)
        record_artifact(
            project,
            ENV,
            "docker",
            repo_digest=other_digest.split("@")[0] + "@sha256:" + "0" * 64,
        )
        with pytest.raises(RegistryError, match="refused"):
            TARGET.pull(project, demo_env(), PullOptions(), _no_progress)
    finally:
        record_artifact(project, ENV, "docker", **good)
        docker_client.images.remove(other.id, force=True)


def test_push_to_the_auth_registry_without_credentials_is_refused(
    corporate_build: Any, auth_registry: str, docker_config: Path
) -> None:
    project, _artifact, _seen, _url = corporate_build
    with pytest.raises(RegistryError) as err:
        TARGET.push(project, demo_env(), PushOptions(f"{auth_registry}/team"), _no_progress)
    assert f"docker login {auth_registry}" in str(err.value)

"""envbuilder.image.engine against the real engine and the real local registries."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from envbuilder.core.errors import BuildError, EngineError, RegistryError
from envbuilder.image import engine

BASE = "debian:bookworm-slim"
Events = list[tuple[str, int, int | None]]


def _context(tmp_path: Path, dockerfile: str) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    return ctx


@pytest.fixture
def scratch_tag(docker_client: Any) -> Iterator[str]:
    """A unique tag, removed (with its image) after the test."""
    tag = f"envbuilder-test/engine:{uuid.uuid4().hex[:12]}"
    yield tag
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def small_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tiny image (base + one file) shared by the run/push tests of this module."""
    ctx = _context(
        tmp_path_factory.mktemp("small"),
        f'FROM {BASE}\nRUN echo small > /small.txt\nCMD ["cat", "/small.txt"]\n',
    )
    tag = f"envbuilder-test/small:{uuid.uuid4().hex[:12]}"
    image_id = engine.build_image(docker_client, ctx, tag, {}, {})
    yield image_id
    docker_client.images.remove(image_id, force=True)


def test_connect_names_the_engine_and_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    with pytest.raises(EngineError) as err:
        engine.connect()
    message = str(err.value)
    assert "tcp://127.0.0.1:9" in message
    assert "DOCKER_HOST" in message
    assert "start" in message.lower()


class _Forwarder:
    """127.0.0.1:PORT -> the engine's unix socket: a 'remote' engine reached over TCP."""

    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.unix_path)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def test_docker_host_is_honoured_unchanged(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scratch_tag: str
) -> None:
    unix_path = docker_client.api.base_url  # http+docker://localhost for the default socket
    if not unix_path.startswith("http+docker://"):
        pytest.skip(f"the engine is not on a local unix socket ({unix_path})")
    forwarder = _Forwarder("/var/run/docker.sock")
    try:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{forwarder.port}")
        client = engine.connect()
        assert client.api.base_url == f"http://127.0.0.1:{forwarder.port}"
        ctx = _context(tmp_path, f"FROM {BASE}\nRUN echo remote > /remote.txt\n")
        image_id = engine.build_image(client, ctx, scratch_tag, {}, {})
        assert docker_client.images.get(scratch_tag).id == image_id
        client.close()
    finally:
        forwarder.close()


def test_build_reports_steps_and_labels_the_image(
    docker_client: Any, tmp_path: Path, scratch_tag: str
) -> None:
    ctx = _context(tmp_path, f"FROM {BASE}\nRUN echo one > /one\nRUN echo two > /two\n")
    events: Events = []
    image_id = engine.build_image(
        docker_client,
        ctx,
        scratch_tag,
        {"org.envbuilder.test": "yes"},
        {},
        lambda what, done, total: events.append((what, done, total)),
    )
    image = docker_client.images.get(scratch_tag)
    assert image.id == image_id
    assert image.labels["org.envbuilder.test"] == "yes"
    steps = [e for e in events if e[0].startswith("step ")]
    # The engine appends the labels as one more step.
    assert [(done, total) for _, done, total in steps] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert steps[1][0] == "step 2/4: RUN echo one > /one"


def test_failed_step_raises_build_error_with_its_output(
    docker_client: Any, tmp_path: Path, scratch_tag: str
) -> None:
    ctx = _context(
        tmp_path,
        f"FROM {BASE}\nRUN echo fine\nRUN echo marker-before-failure && exit 3\n",
    )
    with pytest.raises(BuildError) as err:
        engine.build_image(docker_client, ctx, scratch_tag, {}, {})
    message = str(err.value)
    assert "step 3/3" in message
    assert "exit 3" in message  # the failing instruction
    assert "marker-before-failure" in message  # its output
    assert "returned a non-zero code: 3" in message


def test_bad_dockerfile_is_a_build_error_not_a_traceback(
    docker_client: Any, tmp_path: Path, scratch_tag: str
) -> None:
    ctx = _context(tmp_path, f"FROM {BASE}\nNOTANINSTRUCTION foo\n")
    with pytest.raises(BuildError, match=r"NOTANINSTRUCTION|unknown instruction"):
        engine.build_image(docker_client, ctx, scratch_tag, {}, {})


def test_proxy_build_args_reach_the_build_but_not_the_image(
    docker_client: Any, tmp_path: Path, scratch_tag: str
) -> None:
    proxy = "http://proxy.invalid:3128"
    # The RUN proves the value was there at build time; only its length is stored.
    ctx = _context(tmp_path, f'FROM {BASE}\nRUN printf %s "$HTTPS_PROXY" | wc -c > /proxy-length\n')
    engine.build_image(
        docker_client, ctx, scratch_tag, {}, {"HTTPS_PROXY": proxy, "https_proxy": proxy}
    )
    out = docker_client.containers.run(scratch_tag, ["cat", "/proxy-length"], remove=True)
    assert int(out) == len(proxy)
    history = json.dumps(docker_client.images.get(scratch_tag).history())
    config = json.dumps(docker_client.images.get(scratch_tag).attrs["Config"])
    assert "proxy.invalid" not in history
    assert "proxy.invalid" not in config


def _containers_labelled(client: Any, value: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"org.envbuilder.test={value}"}))


def test_run_copies_files_in_and_out_and_removes_the_container(
    docker_client: Any, small_image: str
) -> None:
    marker = uuid.uuid4().hex
    code, output, files = engine.run_in_container(
        docker_client,
        small_image,
        ["sh", "-c", "id -u; cat /tmp/in/a.txt; cp /tmp/in/a.txt /tmp/in/b.txt; exit 4"],
        engine.ContainerRun(user="1000", labels={"org.envbuilder.test": marker}),
        files_in={"/tmp/in/a.txt": b"hello-in"},
        files_out=["/tmp/in/b.txt", "/tmp/in/missing.txt"],
    )
    assert code == 4
    assert output.splitlines() == ["1000", "hello-in"]
    assert files == {"/tmp/in/b.txt": b"hello-in"}
    assert _containers_labelled(docker_client, marker) == []


def test_run_removes_the_container_on_ctrl_c(docker_client: Any, small_image: str) -> None:
    marker = uuid.uuid4().hex

    def interrupt(what: str, done: int, total: int | None) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.run_in_container(
            docker_client,
            small_image,
            ["sh", "-c", "echo started; sleep 600"],
            engine.ContainerRun(labels={"org.envbuilder.test": marker}),
            progress=interrupt,
        )
    assert _containers_labelled(docker_client, marker) == []


def test_run_of_a_missing_image_is_an_engine_error(docker_client: Any) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        engine.run_in_container(docker_client, "envbuilder-test/missing:nope", ["true"])


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("127.0.0.1:5000/envbuilder/cpu:abc", ("127.0.0.1:5000/envbuilder/cpu", "abc")),
        ("127.0.0.1:5000/envbuilder/cpu", ("127.0.0.1:5000/envbuilder/cpu", None)),
        ("debian:bookworm-slim", ("debian", "bookworm-slim")),
    ],
)
def test_split_reference(ref: str, expected: tuple[str, str | None]) -> None:
    assert engine.split_reference(ref) == expected


def test_device_options_for_cpu_pass_nothing() -> None:
    assert engine.device_run_options("cpu") == {}


def test_device_options_for_native_rocm_use_numeric_gids() -> None:
    options = engine.device_run_options("native-rocm")
    assert options["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert all(gid.isdigit() for gid in options.get("group_add", []))
    assert options["security_opt"] == ["seccomp=unconfined"]


def test_device_options_on_a_rocdxg_host_mount_dids_conf_only_when_it_exists(
    tmp_path: Path,
) -> None:
    """librocdxg >= 1.2.1 installs share/rocdxg/dids.conf, which containers mount (its v1.2.1
    notes); on a host without one nothing is mounted (Docker would create the path)."""
    options = engine.device_run_options("wsl2-rocdxg", root=tmp_path)
    assert options["devices"] == ["/dev/dxg:/dev/dxg:rwm"]
    assert not any("dids.conf" in host for host in options["volumes"])
    dids = tmp_path / "opt/rocm/share/rocdxg/dids.conf"
    dids.parent.mkdir(parents=True)
    dids.write_text("0x7448\n", encoding="utf-8")
    options = engine.device_run_options("wsl2-rocdxg", root=tmp_path)
    assert options["volumes"][str(dids)] == {"bind": "/usr/share/rocdxg/dids.conf", "mode": "ro"}
    assert options["volumes"]["/opt/rocm/lib/librocdxg.so"]["bind"] == "/usr/lib/librocdxg.so"


def test_device_options_for_nvidia_request_all_gpus() -> None:
    (request,) = engine.device_run_options("nvidia")["device_requests"]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Count"] == -1


@pytest.fixture
def empty_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text("{}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    return config


def test_push_and_pull_by_digest(
    docker_client: Any, small_image: str, registry: str, empty_docker_config: Path
) -> None:
    client = engine.connect()
    repo = f"{registry}/envbuilder-test/small"
    digest_ref = engine.push_image(client, small_image, repo, "t1")
    assert digest_ref.startswith(f"{repo}@sha256:")
    assert digest_ref in engine.repo_digests(client, small_image)
    client.images.remove(f"{repo}:t1")
    assert engine.pull_image(client, digest_ref) == small_image


def test_push_without_credentials_is_refused_clearly(
    docker_client: Any, small_image: str, auth_registry: str, empty_docker_config: Path
) -> None:
    client = engine.connect()
    repo = f"{auth_registry}/envbuilder-test/small"
    with pytest.raises(RegistryError) as err:
        engine.push_image(client, small_image, repo, "t")
    message = str(err.value)
    assert "refused" in message
    assert f"docker login {auth_registry}" in message
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(f"{repo}:t")  # no tag left behind


def test_push_uses_the_docker_config_credentials(
    docker_client: Any,
    small_image: str,
    auth_registry: str,
    auth_registry_credentials: tuple[str, str],
    empty_docker_config: Path,
) -> None:
    token = base64.b64encode(":".join(auth_registry_credentials).encode()).decode()
    (empty_docker_config / "config.json").write_text(
        json.dumps({"auths": {auth_registry: {"auth": token}}})
    )
    client = engine.connect()
    repo = f"{auth_registry}/envbuilder-test/small"
    assert engine.push_image(client, small_image, repo, "t2").startswith(f"{repo}@sha256:")
    client.images.remove(f"{repo}:t2")

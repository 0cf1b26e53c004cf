"""A registry's or mirror's answers are not trusted to be well-formed, printable or bounded
(issue 30, item 8): a real HTTP server on 127.0.0.1, for the length of one test, answers
envbuilder's registry client (envbuilder.image.registry_api) with terminal escapes, a malformed
token service and credentials in URLs, and its wheel fetch with an endless body; every case is
one error whose text is safe to print, and no download grows past what the lock records."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envbuilder.core.errors import RegistryError
from envbuilder.core.progress import no_progress
from envbuilder.image.registry_api import Registry
from envbuilder.lock.wheelcache import LockedFile, _try_fetch

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


def _serve(handle: Handler) -> Iterator[str]:
    class _Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        do_HEAD = do_GET
        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _answer(
    request: http.server.BaseHTTPRequestHandler, status: int, body: bytes, **h: str
) -> None:
    request.send_response(status)
    for key, value in h.items():
        request.send_header(key.replace("_", "-"), value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


@pytest.fixture
def hostile() -> Iterator[str]:
    """A registry that answers every request with an error whose text carries terminal escapes
    and a URL with a password."""

    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        body = b"\x1b[2J\x1b[31mdenied\x1b[0m see https://bob:s3cret@example.invalid/x\x07"
        _answer(request, 500, body)

    yield from _serve(handle)


@pytest.fixture
def bad_token_service() -> Iterator[str]:
    """A registry whose Bearer challenge names a token service (itself) that answers HTML."""
    port: list[str] = []

    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        if request.path.startswith("/token"):
            _answer(request, 200, b"<html>not json</html>")
            return
        realm = f'Bearer realm="http://{port[0]}/token",service="reg",scope="repository:x:pull"'
        _answer(request, 401, b"{}", WWW_Authenticate=realm)

    for address in _serve(handle):
        port.append(address)
        yield address


def test_registry_text_reaches_the_message_without_escapes_or_passwords(hostile: str) -> None:
    registry = Registry(hostile, "http")
    with pytest.raises(RegistryError) as caught:
        registry.manifest("envbuilder/cpu", "latest")
    text = str(caught.value)
    assert "HTTP 500" in text and "denied" in text
    assert "\x1b" not in text and "\x07" not in text
    assert "s3cret" not in text


def test_a_token_service_that_answers_no_json_is_one_message(bad_token_service: str) -> None:
    registry = Registry(bad_token_service, "http")
    with pytest.raises(RegistryError, match="answered with something that is not JSON"):
        registry.manifest("x", "latest")


@pytest.fixture
def endless() -> Iterator[str]:
    """A mirror that answers every file with an endless body (no Content-Length)."""

    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.end_headers()
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):  # the client hangs up: the test's point
            for _ in range(1 << 16):  # at most 4 GiB, so the server stops by itself
                request.wfile.write(chunk)

    yield from _serve(handle)


def test_a_mirror_that_sends_more_than_the_lock_records_is_cut_off(
    endless: str, tmp_path: Path
) -> None:
    """The wheel's download stops at the size its pylock records (issue 30, item 8: an endless
    body filled 1.7 to 5.8 GB in 20 s before)."""
    wheel = LockedFile(
        "torch", "2.13.0", "torch-2.13.0-cp311-none-any.whl", "x", "0" * 64, size=1 << 20
    )
    dest = tmp_path / "cache" / wheel.filename
    refused: list[str] = []
    got = _try_fetch(f"http://{endless}/torch.whl", dest, wheel, no_progress, refused)
    assert got is None and not dest.exists()
    assert "sent more than the 1048576 bytes the lock records" in refused[0]
    assert not any(p.stat().st_size > (2 << 20) for p in (tmp_path / "cache").iterdir())


@pytest.fixture
def huge() -> Iterator[str]:
    """A registry that answers a manifest request with 64 MB."""

    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        _answer(request, 200, b"{" + b" " * (64 << 20) + b"}")

    yield from _serve(handle)


def test_a_huge_registry_answer_is_refused_not_read_whole(huge: str) -> None:
    with pytest.raises(RegistryError, match="sent more than 4194304 bytes"):
        Registry(huge, "http").manifest("envbuilder/cpu", "latest")

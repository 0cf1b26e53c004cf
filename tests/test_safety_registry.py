"""A registry's answers are not trusted to be well-formed or printable (issue 30, item 8): a
real HTTP server on 127.0.0.1, for the length of one test, answers envbuilder's registry client
(envbuilder.image.registry_api) with terminal escapes, a malformed token service and credentials
in URLs; every case is one RegistryError whose text is safe to print."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest

from envbuilder.core.errors import RegistryError
from envbuilder.image.registry_api import Registry

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

"""Issue 30, item 2 (completion): a mirror URL's credentials never reach a message. A fetch from
`http://user:TOKEN@127.0.0.1:PORT/simple` (ENVBUILDER_MIRROR_<INDEX>) that a real HTTP server
answers with 500 fails `build` with a message naming the mirror, without the token, on stdout,
stderr and in the --json error; the refusal is redacted where it is made (core.redact), and the
credentials reach the server as HTTP Basic auth, not as part of the host name.

The server runs on 127.0.0.1 in a thread for one test (bounded: shut down when it ends, each
request answered at once).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_safety_venv import Tiny, tiny  # noqa: F401 (tiny: the fixture)

from envbuilder.lock.wheelcache import LockedFile, _try_fetch

TOKEN = "s3cr3t-T0KEN-42"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the native target is Linux-only")


class Failing(BaseHTTPRequestHandler):
    """Answers every request with 500; records what it was asked and with which credentials."""

    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = b"internal error\n"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def failing_server() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (Failing,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _basic() -> str:
    return "Basic " + base64.b64encode(f"user:{TOKEN}".encode()).decode()


def test_a_refused_fetch_is_redacted_where_it_is_made(
    failing_server: tuple[str, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    host, seen = failing_server
    url = f"http://user:{TOKEN}@{host}/simple/tinypkg-0.1-py3-none-any.whl"
    wheel = LockedFile("tinypkg", "0.1", "tinypkg-0.1-py3-none-any.whl", url, "0" * 64, None)
    refused: list[str] = []
    assert _try_fetch(url, tmp_path / "dest.whl", wheel, lambda *_: None, refused) is None
    assert seen == [("/simple/tinypkg-0.1-py3-none-any.whl", _basic())]  # auth, not the host
    (message,) = refused
    assert TOKEN not in message
    assert f"http://***@{host}/simple/tinypkg-0.1-py3-none-any.whl" in message
    assert "HTTP Error 500" in message


def _without_mirror(project: Tiny) -> None:
    """The spec's index has no mirror folder; the lock made again for it."""
    spec = project.root / "environments.toml"
    spec.write_text(
        spec.read_text().replace(f'mirror = "{project.root / "mirror"}"\n', "")
    )  # fmt: skip
    project.lock("tinypkg", "0.1")


@pytest.mark.parametrize("json_error", [False, True], ids=["text", "json"])
def test_a_build_whose_mirror_fails_prints_no_token(
    tiny: Tiny,  # noqa: F811
    tmp_path: Path,
    failing_server: tuple[str, list[tuple[str, str | None]]],
    monkeypatch: pytest.MonkeyPatch,
    json_error: bool,
) -> None:
    host, seen = failing_server
    _without_mirror(tiny)
    monkeypatch.setenv("ENVBUILDER_MIRROR_LOCAL", f"http://user:{TOKEN}@{host}/simple")
    proc = tiny.build(tmp_path / "venv", *(["--json"] if json_error else []))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert seen and all(auth == _basic() for _, auth in seen)  # the mirror was asked
    assert TOKEN not in proc.stdout + proc.stderr
    assert f"http://***@{host}/simple/" in proc.stderr
    if json_error:
        (failed,) = json.loads(proc.stdout)["artifacts"]  # one entry per env (issue 33)
        error = failed["error"]
        assert "cannot fetch tinypkg-0.1" in error["message"] and TOKEN not in error["message"]
    assert not (tmp_path / "venv" / "bin" / "python").exists()  # nothing built

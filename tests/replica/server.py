"""The replica's indexes on disk (PEP 503 simple layout) and an HTTP server for them on
127.0.0.1 (a free port, a daemon thread).

Layout under the root folder, one folder per index of the catalog:
    <index>/simple/index.html            the project list
    <index>/simple/<project>/index.html  the project's files, `#sha256=` on each link
    <index>/files/<file name>            the stand-in files
A project page of a [[link]] entry lists another index's files (as PyTorch's rocm7.14 index
lists the files on AMD's host), without hashes. A project an index does not hold answers that
index's `unknown_project_status` (AMD's and PyTorch's indexes answer 403).
"""

from __future__ import annotations

import hashlib
import html
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from replica.catalog import Catalog, StandinFile, project_name


def _page(title: str, anchors: list[str]) -> str:
    body = "\n".join(anchors)
    return (
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
        f'content="1.0"><title>{html.escape(title)}</title></head>\n<body>\n{body}\n'
        "</body></html>\n"
    )


def _anchor(href: str, text: str) -> str:
    return f'<a href="{html.escape(href, quote=True)}">{html.escape(text)}</a>'


def write_layout(catalog: Catalog, root: Path, round_: int = 1) -> None:
    """(Re)write the whole layout of round `round_` under `root`."""
    for key in catalog.indexes:
        shutil.rmtree(root / key, ignore_errors=True)
    pages: dict[tuple[str, str], list[str]] = {}
    for key in catalog.indexes:
        for f in catalog.files_of(key, round_):
            dest = root / key / "files" / f.filename
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(f.data)
            href = f"../../files/{quote(f.filename)}#sha256={_sha256(f)}"
            pages.setdefault((key, project_name(f.name)), []).append(_anchor(href, f.filename))
    for link in catalog.links:
        wanted = {project_name(n) for n in link.names}
        for f in catalog.files_of(link.target_index, round_):
            if project_name(f.name) not in wanted:
                continue
            href = f"../../../{link.target_index}/files/{quote(f.filename)}"
            if link.hashes:
                href += f"#sha256={_sha256(f)}"
            pages.setdefault((link.index, project_name(f.name)), []).append(
                _anchor(href, f.filename)
            )
    for key in catalog.indexes:
        projects = sorted(p for (i, p) in pages if i == key)
        simple = root / key / "simple"
        simple.mkdir(parents=True, exist_ok=True)
        (simple / "index.html").write_text(
            _page(f"{key}: simple index", [_anchor(f"{p}/", p) for p in projects]), encoding="utf-8"
        )
        for project in projects:
            folder = simple / project
            folder.mkdir()
            (folder / "index.html").write_text(
                _page(f"Links for {project}", sorted(pages[(key, project)])), encoding="utf-8"
            )


def _sha256(f: StandinFile) -> str:
    return hashlib.sha256(f.data).hexdigest()


@dataclass
class RequestLog:
    """Every project page asked for: (index, project, status)."""

    entries: list[tuple[str, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, index: str, project: str, status: int) -> None:
        with self.lock:
            self.entries.append((index, project, status))

    def projects(self, index: str) -> set[str]:
        with self.lock:
            return {p for i, p, _ in self.entries if i == index}

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


def _handler(
    root: Path, catalog: Catalog, log: RequestLog
) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
            if len(parts) >= 3 and parts[1] == "simple" and parts[0] in catalog.indexes:
                index, project = parts[0], parts[2]
                if not (root / index / "simple" / project / "index.html").is_file():
                    status = catalog.indexes[index].unknown_project_status
                    log.add(index, project, status)
                    self.send_error(status)
                    return
                log.add(index, project, 200)
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the request log records what tests look at

    return Handler


@dataclass
class ReplicaServer:
    """The running server: `url(index)` is an index's simple URL; `publish(round)` rewrites the
    layout (a later round adds the files published later)."""

    catalog: Catalog
    root: Path
    port: int
    log: RequestLog

    def url(self, index: str) -> str:
        return f"http://127.0.0.1:{self.port}/{index}/simple/"

    def file_url(self, index: str, filename: str) -> str:
        return f"http://127.0.0.1:{self.port}/{index}/files/{quote(filename)}"

    def publish(self, round_: int) -> None:
        write_layout(self.catalog, self.root, round_)


@contextmanager
def serve(catalog: Catalog, root: Path, round_: int = 1) -> Iterator[ReplicaServer]:
    """Write the layout under `root` and serve it on 127.0.0.1 until the block ends."""
    write_layout(catalog, root, round_)
    log = RequestLog()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, catalog, log))
    thread = threading.Thread(target=httpd.serve_forever, name="replica-index", daemon=True)
    thread.start()
    try:
        yield ReplicaServer(catalog, root, httpd.server_address[1], log)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)

#!/usr/bin/env python3
"""A replica of Debian's snapshot archive (snapshot.debian.org) on 127.0.0.1, serving only the apt
versions the locks pin, for builds on machines that cannot reach the real one (this project's CI).

The rendered Dockerfiles point apt at `http://snapshot.debian.org/archive/<archive>/<timestamp>/`
(envbuilder/data/apt.toml) and keep apt's signature check: the images trust Debian's archive keys
only. So the replica serves **Debian's own signed files**, copied from the live archive this
machine's apt is configured with (`--origin`, default: the URIs of /etc/apt's sources), each
checked by its hash:

  build   for each suite of bookworm (bookworm and bookworm-updates of `debian`,
          bookworm-security of `debian-security`): its InRelease (signed by Debian), the
          `main/binary-amd64/Packages.xz` that InRelease lists (sha256 checked against it, also
          stored under by-hash/SHA256/); then every .deb that a lock's [targets.*.apt.*] tables
          pin, found in those Packages files by name and version and checked against the sha256
          they give. Nothing else is in the pool: a build that needs an unpinned version fails.
          `--leave-out NAME=VERSION` leaves a pinned .deb out (the tests' snapshot that lacks a
          pinned version). Downloads are kept by sha256 in `--cache` for the next build.
  serve   an HTTP server on 127.0.0.1 answering as an HTTP proxy for snapshot.debian.org (and on
          its own paths `/archive/...`): `/archive/<archive>/<any timestamp>/<path>` is
          `<dir>/<archive>/<path>`. Builds reach it through ENVBUILDER_APT_PROXY, which envbuilder
          hands to apt as its http proxy (kept out of the image and its history), so the image
          is the one the real snapshot archive gives. Each served .deb is logged (`--log`).
          A request for another host (an image without snapshot sources reading its distro's
          own archive) is passed on unchanged, as any HTTP proxy would: only snapshot.debian.org
          is answered from the replica.

What it cannot be: the snapshot of another day. Every timestamp gets the archive as it was when
the replica was built; the real archive would answer an older timestamp with older index files.

  apt_snapshot.py build --lock lockfiles/cpu.lock.toml --out DIR [--cache DIR] [--leave-out N=V]
  apt_snapshot.py serve DIR --port 5003 [--log FILE]
  apt_snapshot.py pins --lock lockfiles/cpu.lock.toml      # the pins a build would serve
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import lzma
import re
import shutil
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

APT_SOURCES = (Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*")))
SNAPSHOT_HOST = "snapshot.debian.org"
#: archive -> suites the rendered sources name (envbuilder/data/apt.toml, debian:bookworm*).
SUITES = {"debian": ("bookworm", "bookworm-updates"), "debian-security": ("bookworm-security",)}
INDEX = "main/binary-amd64/Packages.xz"
_PATH = re.compile(r"^/archive/(debian|debian-security)/[0-9]{8}T[0-9]{6}Z/(.+)$")


def apt_origins(sources: tuple[Path, ...] = APT_SOURCES) -> dict[str, str]:
    """archive ("debian", "debian-security") -> the URI this machine's apt reads it from (its
    one-line `deb URI SUITE` entries and deb822 `URIs:` fields), so the replica copies from
    the mirror the machine already uses."""
    uris: list[str] = []
    for path in sources:
        if not path.is_file() or path.suffix not in ("", ".list", ".sources"):
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["deb"]:
                uris += [w for w in words[1:] if "://" in w][:1]
            elif words[:1] == ["URIs:"]:
                uris += words[1:]
    out: dict[str, str] = {}
    for uri in uris:
        archive = uri.rstrip("/").rsplit("/", 1)[-1]
        if archive in SUITES:
            out.setdefault(archive, uri.rstrip("/"))
    return out


def log(message: str) -> None:
    print(f"apt_snapshot: {message}", file=sys.stderr)


def fetch(url: str) -> bytes:
    # Directly, not through this process's proxy variables (they may name the replica itself).
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=120) as response:
        return bytes(response.read())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def listed_sha256(inrelease: str, path: str) -> tuple[str, int]:
    """(sha256, size) that a Release file's SHA256 section gives for `path`."""
    section = inrelease.split("\nSHA256:\n", 1)[1]
    for line in section.splitlines():
        if not line.startswith(" "):
            break
        digest, size, name = line.split()
        if name == path:
            return digest, int(size)
    raise SystemExit(f"the InRelease lists no {path}")


def stanzas(packages: str) -> dict[tuple[str, str], dict[str, str]]:
    """(Package, Version) -> the stanza's fields, of a Packages file."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for block in packages.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields and "Version" in fields:
            out[(fields["Package"], fields["Version"])] = fields
    return out


def locked_pins(locks: list[Path]) -> set[tuple[str, str]]:
    """Every (package, version) of the locks' [targets.*.apt.*] tables."""
    pins: set[tuple[str, str]] = set()
    for path in locks:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        for target in doc.get("targets", {}).values():
            for stage in target.get("apt", {}).values():
                pins.update(stage.items())
    return pins


def cached_fetch(url: str, digest: str, cache: Path) -> bytes:
    """The file at `url` whose sha256 must be `digest` (from the cache when it is there)."""
    kept = cache / digest
    if kept.is_file():
        data = kept.read_bytes()
        if sha256(data) == digest:
            return data
    data = fetch(url)
    if sha256(data) != digest:
        raise SystemExit(f"{url}: sha256 {sha256(data)}, but the signed index says {digest}")
    cache.mkdir(parents=True, exist_ok=True)
    (cache / f"{digest}.tmp").write_bytes(data)
    (cache / f"{digest}.tmp").replace(kept)
    return data


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def build_indexes(
    out: Path, origins: dict[str, str]
) -> dict[tuple[str, str], tuple[str, dict[str, str]]]:
    """Copy each suite's InRelease and Packages.xz; (name, version) -> (archive, stanza)."""
    found: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
    for archive, suites in SUITES.items():
        for suite in suites:
            base = f"{origins[archive]}/dists/{suite}"
            inrelease = fetch(f"{base}/InRelease")
            digest, size = listed_sha256(inrelease.decode("utf-8"), INDEX)
            index = fetch(f"{base}/{INDEX}")
            if sha256(index) != digest or len(index) != size:
                raise SystemExit(f"{base}/{INDEX} does not match its InRelease")
            dists = out / archive / "dists" / suite
            write(dists / "InRelease", inrelease)
            write(dists / INDEX, index)
            write(dists / "main/binary-amd64/by-hash/SHA256" / digest, index)
            for key, fields in stanzas(lzma.decompress(index).decode("utf-8")).items():
                found.setdefault(key, (archive, fields))  # the first suite listing it wins
            log(f"{archive} {suite}: InRelease and {INDEX} ({len(index)} bytes)")
    return found


def build(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    origins = dict(apt_origins())
    for value in args.origin:
        archive, _, uri = value.partition("=")
        origins[archive] = uri.rstrip("/")
    if missing_origin := sorted(set(SUITES) - set(origins)):
        raise SystemExit(
            f"no apt source for {', '.join(missing_origin)} in /etc/apt; give "
            "--origin ARCHIVE=URI (the Debian mirror to copy the signed files from)"
        )
    found = build_indexes(out, origins)
    leave_out = {tuple(v.split("=", 1)) for v in args.leave_out}
    pool: dict[str, str] = {}
    missing = []
    for name, version in sorted(locked_pins(args.lock)):
        entry = found.get((name, version))
        if entry is None:
            missing.append(f"{name} {version}")
            continue
        archive, fields = entry
        if (name, version) in leave_out:
            log(f"leaving out {name} {version} (--leave-out)")
            continue
        data = cached_fetch(
            f"{origins[archive]}/{fields['Filename']}", fields["SHA256"], args.cache
        )
        write(out / archive / fields["Filename"], data)
        pool[f"{name}={version}"] = f"{archive}/{fields['Filename']}"
    if missing:
        raise SystemExit(
            "the live archive no longer lists " + ", ".join(missing) + " (pinned by the locks); "
            "the replica cannot be made from it: re-lock the apt versions"
        )
    manifest = {
        "origins": origins,
        "suites": SUITES,
        "pool": pool,
        "left_out": sorted(args.leave_out),
    }
    write(out / "replica.json", (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    log(f"{len(pool)} pinned .debs in {out}")
    return 0


class Handler(http.server.BaseHTTPRequestHandler):
    root: Path
    served_log: Path | None = None

    def _file(self) -> Path | None:
        url = urllib.parse.urlsplit(self.path)
        if url.netloc and url.hostname != SNAPSHOT_HOST:
            return None
        match = _PATH.match(urllib.parse.unquote(url.path))
        if match is None or ".." in match[2].split("/"):
            return None
        path = self.root / match[1] / match[2]
        return path if path.is_file() else None

    def _forward(self, body: bool) -> None:
        """Pass a request for another host on (http only, as apt's http method asks)."""
        request = urllib.request.Request(self.path, method=self.command)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=120) as response:
                status, data = response.status, response.read()
                kind = response.headers.get("Content-Type", "application/octet-stream")
        except urllib.error.HTTPError as exc:
            status, data, kind = exc.code, b"", "text/plain"
        except OSError as exc:
            self.send_error(502, f"cannot reach {self.path}: {exc}")
            return
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _answer(self, body: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.scheme == "http" and url.hostname not in (None, SNAPSHOT_HOST):
            self._forward(body)
            return
        path = self._file()
        if path is None:
            self.send_error(404, "not in this replica of the snapshot archive")
            return
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)
            if path.suffix == ".deb" and self.served_log is not None:
                with self.served_log.open("a", encoding="utf-8") as fh:
                    fh.write(f"{path.relative_to(self.root)}\n")

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the log file says more
        return


def serve(args: argparse.Namespace) -> int:
    Handler.root = args.dir.resolve()
    Handler.served_log = args.log
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    log(f"serving {args.dir} on 127.0.0.1:{server.server_address[1]}")
    print(server.server_address[1], flush=True)  # the port (0 asks for a free one)
    server.serve_forever()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="copy the signed indexes and the pinned .debs")
    b.add_argument("--lock", type=Path, action="append", required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--cache", type=Path, default=Path("/var/cache/envbuilder-ci/apt-debs"))
    b.add_argument("--leave-out", action="append", default=[], metavar="NAME=VERSION")
    b.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="ARCHIVE=URI",
        help="where to copy an archive from (default: the URIs of this machine's apt sources)",
    )
    s = sub.add_parser("serve", help="answer as snapshot.debian.org on 127.0.0.1")
    s.add_argument("dir", type=Path)
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--log", type=Path)
    p = sub.add_parser("pins", help="print the pinned NAME=VERSION a build would serve")
    p.add_argument("--lock", type=Path, action="append", required=True)
    args = parser.parse_args()
    if args.command == "pins":
        print("".join(f"{n}={v}\n" for n, v in sorted(locked_pins(args.lock))), end="")
        return 0
    return build(args) if args.command == "build" else serve(args)


if __name__ == "__main__":
    sys.exit(main())

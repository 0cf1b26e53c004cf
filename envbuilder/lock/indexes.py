"""Where each named index of the spec is read from on this machine: its canonical URL, or a mirror.

Mirrors are a machine's setting (where this machine reads an index from), not the team's: the
first of these that names one wins:

1. the environment variable `ENVBUILDER_MIRROR_<NAME>` (NAME upper-cased, every character that is
   not a letter or digit turned into `_`; an empty value switches the mirror off);
2. the user's mirrors file, `$ENVBUILDER_MIRRORS_FILE`, else
   `$XDG_CONFIG_HOME/envbuilder/mirrors.toml`, else `~/.config/envbuilder/mirrors.toml` (where
   pip's `pip.conf` and uv's `uv.toml` live): a `[mirrors]` table keyed by the index's
   canonical URL (so it serves every spec that uses that index, whatever it calls it) or by its
   name in the spec;
3. `[indexes.NAME] mirror = "..."` in the spec (a mirror the whole team shares, e.g. a company
   proxy URL).

A mirror folder that does not exist falls back to the canonical URL with a warning. Files from a
mirror are only ever accepted by hash (uv hashes what it resolves; envbuilder.lock.wheelcache
verifies every file against the lock).

Used by the uv run (envbuilder.lock.uv: what uv resolves against) and by the wheel cache
(envbuilder.lock.wheelcache: where a locked file may be fetched from).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from envbuilder.core import grammar
from envbuilder.core.errors import SpecError
from envbuilder.core.model import Index
from envbuilder.core.redact import redact
from envbuilder.core.statefile import StateFileError, UserFile, read_state

MIRROR_ENV_PREFIX = "ENVBUILDER_MIRROR_"
#: Names the user's mirrors file instead of the default place (tests and CI use it).
MIRRORS_FILE_VAR = "ENVBUILDER_MIRRORS_FILE"
#: A mirrors file maps a few index URLs; one bigger than this is not one.
MAX_MIRRORS_BYTES = 1 << 20
_MIRRORS_FIX = UserFile(
    "a mirrors file is a small TOML file with one table, [mirrors]; fix or remove it "
    f"(or point {MIRRORS_FILE_VAR} at another)"
)

#: What uv leaves as it is when it turns a folder into a file:// URL (the url crate encodes only
#: controls, space, `"#%<>?\`{}` and non-ASCII in a path); Python's quote() would also encode `+`.
_UV_PATH_SAFE = "/!$&'()*+,;=:@[]^|~"


def mirror_env_var(index_name: str) -> str:
    """`ENVBUILDER_MIRROR_<NAME>`: the per-machine override of an index's mirror."""
    return MIRROR_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", index_name.upper())


def _is_url(value: str) -> bool:
    return urlsplit(value).scheme in ("http", "https")


def _canonical_is_flat(index: Index) -> bool:
    """Whether an index is a flat listing (find-links page) rather than a PEP 503 simple index.

    AMD's repo.radeon.com wheel folders are plain listings; PyTorch's indexes are simple indexes."""
    url = index.url.lower()
    return url.endswith((".html", ".htm")) or "repo.radeon.com/rocm/manylinux" in url


@dataclass(frozen=True)
class IndexSource:
    """Where uv reads one named index from on this machine, and what the lock records."""

    name: str
    canonical: str  # the public URL; what the lock records
    location: str  # what uv resolves against: the canonical URL, a mirror URL, or a folder
    flat: bool  # a flat listing (find-links) rather than a simple index
    mirrored: bool

    def artifact_url(self, filename: str) -> str:
        """The canonical URL of a file of this index: `<index url>/<file name>` (how PyTorch's
        and AMD's indexes lay out their files)."""
        return self.canonical.rstrip("/") + "/" + quote(filename)

    def mirror_folder(self) -> Path | None:
        """The mirror folder, when the mirror is a folder."""
        if self.mirrored and not _is_url(self.location):
            return Path(self.location)
        return None

    def mirror_url(self) -> str | None:
        """The mirror URL, when the mirror is a URL."""
        return self.location if self.mirrored and _is_url(self.location) else None

    def uv_index_url(self) -> str:
        """The URL uv resolves this index from, spelled as uv spells it: the location when it is
        a URL (as written: uv keeps or drops a trailing slash as given), a folder as a file://
        URL. uv keeps an earlier pylock's pin of a package pinned to this index only when the
        entry's `index` equals this string (envbuilder.lock.uv.preferences_for_uv)."""
        if _is_url(self.location):
            return self.location
        return "file://" + quote(self.location, safe=_UV_PATH_SAFE)


def mirrors_file(environ: Mapping[str, str]) -> Path:
    """The user's mirrors file (it need not exist)."""
    if environ.get(MIRRORS_FILE_VAR):
        return Path(environ[MIRRORS_FILE_VAR]).expanduser()
    config = environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(config) / "envbuilder" / "mirrors.toml"


def machine_mirrors(environ: Mapping[str, str]) -> dict[str, str]:
    """The `[mirrors]` table of the user's mirrors file (canonical URL or index name -> folder
    or URL); empty when there is no file. SpecError naming the file and key when it is not
    what this reads."""
    path = mirrors_file(environ)
    try:
        # a link is followed: dotfile managers (stow, home-manager) link config files; a FIFO,
        # a device, a huge or deeply nested file is refused (statefile)
        doc = read_state(path, MAX_MIRRORS_BYTES, "toml", _MIRRORS_FIX, follow=True)
    except StateFileError as exc:
        raise SpecError(f"cannot read the mirrors file: {exc}") from None
    if doc is None:
        return {}
    table = doc.get("mirrors", {})
    unknown = sorted(set(doc) - {"mirrors"})
    if unknown or not isinstance(table, dict):
        raise SpecError(
            f"{path}: a mirrors file holds one table, [mirrors], mapping an index's canonical "
            f'URL (or its name) to a folder or URL, e.g. "https://download.pytorch.org/whl/cpu" '
            f'= "/srv/wheels"; found {", ".join(unknown) or "mirrors that is not a table"}'
        )
    for key, value in table.items():
        problem = (
            grammar.mirror_problem(value.removeprefix("file://"))
            if isinstance(value, str)
            else 'is not a string; write e.g. "/srv/wheels" or "https://mirror.example/simple"'
        )
        if problem:
            raise SpecError(redact(f"{path}: mirrors.{key!r} = {value!r} {problem}"))
    return dict(table)


def _configured(index: Index, env: Mapping[str, str]) -> tuple[str, str]:
    """(mirror value, where it was set) for `index` on this machine; ("", "") for none."""
    var = mirror_env_var(index.name)
    if var in env:
        return env[var], f"${var}"
    machine = machine_mirrors(env)
    for key in (index.url, index.url.rstrip("/"), index.url.rstrip("/") + "/", index.name):
        if key in machine:
            return machine[key], f"{mirrors_file(env)} mirrors.{key!r}"
    if index.mirror:
        return index.mirror, f"indexes.{index.name}.mirror"
    return "", ""


def index_source(
    index: Index, root: Path, environ: Mapping[str, str] | None = None
) -> tuple[IndexSource, str | None]:
    """Where to resolve `index` from on this machine, and a warning when a configured mirror
    cannot be used. A relative mirror folder is relative to the project root (the spec's folder)."""
    env = os.environ if environ is None else environ
    value, origin = _configured(index, env)
    canonical = IndexSource(index.name, index.url, index.url, _canonical_is_flat(index), False)
    if not value:
        return canonical, None
    if value.startswith("file://"):
        value = unquote(urlsplit(value).path)
    if _is_url(value):
        flat = value.lower().endswith((".html", ".htm"))
        return IndexSource(index.name, index.url, value, flat, True), None
    folder = Path(value).expanduser()
    if not folder.is_absolute():
        folder = root / folder
    if not folder.is_dir():
        return canonical, redact(
            f"mirror folder {folder} of index {index.name!r} (from {origin}) does not exist; "
            f"resolving from {index.url} instead"
        )
    return IndexSource(index.name, index.url, str(folder), True, True), None


def mirrored_sources(
    indexes: Mapping[str, Index], root: Path, environ: Mapping[str, str] | None = None
) -> list[IndexSource]:
    """The indexes of `indexes` that have a usable mirror on this machine (spec mirrors and
    ENVBUILDER_MIRROR_* overrides), in the order of `indexes`."""
    sources = (index_source(index, root, environ)[0] for index in indexes.values())
    return [src for src in sources if src.mirrored]

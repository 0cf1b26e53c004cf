"""The lock of an env on a pip-SDK release (ROCm 7.14+, ROCm Core SDK 10): a resolution that does
not need every name of AMD's metadata listed, and that cannot hold a placeholder.

  * uv searches the SDK's index (the one torch is pinned to) first for every name, with its
    403-for-a-missing-project answer meaning "not here" (envbuilder.lock.uv, `first_index`): under
    uv's first-index strategy a name AMD serves comes from AMD only, so PyPI's placeholders
    under the same names (`amd-torch-device-gfx11 0.0.1.dev0`, `rocm 0.1.0`, ...) cannot be
    picked, whether the name is listed in rocm.toml [pip_sdk] or not;
  * a name of the ROCm family ([pip_sdk] family) that the resolution holds but the request did
    not pin (a family wheel, a device wheel added after this release of envbuilder) is pinned to
    the same index and the env resolved again, so the lock records it by the index's canonical
    URL and a relock keeps it (uvrun.preferences_for_uv);
  * a name outside the family that uv took from that index (AMD's byte-identical copies of
    PyPI's files: filelock, sympy, ... TheRock's update_dependencies.py) is pinned to it the same
    way, so the lock records it with the index and its canonical URL, also through a folder
    mirror (`served_by_first_index`; docs/lock.md says why AMD's copy is allowed);
  * the provenance check (envbuilder.core.pipsdk.provenance_problems) then refuses the lock when any
    entry of the family comes from elsewhere or has a placeholder version, naming the package
    and where it came from.

docs/lock.md ("Locks of the pip SDK") and docs/rocm.md say why; tests/lock/test_pipsdk_lock.py shows
it against a replica of AMD's index made by AMD's own packaging code.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from envbuilder.core.compat import RocmRelease
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import LockError
from envbuilder.core.pipsdk import provenance_problems
from envbuilder.lock.indexes import IndexSource
from envbuilder.lock.uv import ResolveRequest, artifacts_of, postprocess, run_uv
from envbuilder.lock.verified import url_filename
from envbuilder.lock.wheelcache import page_links

#: Resolutions at most: the first, then one per round of newly found names (a name found in the
#: second round would be a family wheel that only a newly pinned name requires).
MAX_ROUNDS = 3


def unpinned_family(raw: bytes, request: ResolveRequest) -> dict[str, str]:
    """ROCm-family names of uv's pylock `raw` that `request` does not pin -> where uv took them
    (their artifact URLs)."""
    sdk = load_compat().pip_sdk
    pinned = {name for name, _ in request.index_pins}
    found: dict[str, str] = {}
    for pkg in tomllib.loads(raw.decode("utf-8")).get("packages", []):
        name = str(canonicalize_name(str(pkg["name"])))
        if sdk.in_family(name) and name not in pinned:
            urls = [str(a.get("url") or a.get("path") or "") for a in artifacts_of(pkg)]
            found[name] = f"{name} {pkg.get('version')} ({', '.join(urls)})"
    return found


def served_by_first_index(raw: bytes, request: ResolveRequest) -> dict[str, str]:
    """Names of uv's pylock `raw` outside the ROCm family that `request` does not pin and whose
    files uv took from its first index (AMD's mirror of PyPI's files: filelock, sympy, numpy,
    ... TheRock's update_dependencies.py) -> where uv took them. Under uv's first-index
    strategy a name that index serves comes from it only, so such a name is AMD's copy and is
    pinned to AMD's index like the family, to be recorded by its canonical URL and `index`."""
    if request.first_index is None:
        return {}
    src = request.index(request.first_index)
    sdk = load_compat().pip_sdk
    pinned = {name for name, _ in request.index_pins}
    found: dict[str, str] = {}
    for pkg in tomllib.loads(raw.decode("utf-8")).get("packages", []):
        name = str(canonicalize_name(str(pkg["name"])))
        if sdk.in_family(name) or name in pinned:
            continue
        urls = [str(a.get("url") or a.get("path") or "") for a in artifacts_of(pkg)]
        if urls and all(_on_index(src, name, url) for url in urls):
            found[name] = f"{name} {pkg.get('version')} ({', '.join(urls)})"
    return found


def _on_index(src: IndexSource, project: str, location: str) -> bool:
    """Whether the file uv recorded at `location` is one that index `src` serves (as read on
    this machine: a mirror folder's file, or a link of the project's page, by file name)."""
    filename = url_filename(location)
    folder = src.mirror_folder()
    if folder is not None:
        local = unquote(urlsplit(location).path) if location.startswith("file:") else location
        return Path(local).parent.resolve() == folder.resolve() and (folder / filename).is_file()
    page = src.location if src.flat else urljoin(src.location.rstrip("/") + "/", f"{project}/")
    links = page_links(page) or []
    return any(url_filename(link.partition("#")[0]) == filename for link in links)


def pinned_too(request: ResolveRequest, names: Sequence[str]) -> ResolveRequest:
    """`request` with `names` listed and pinned to its first index as well (uv applies an index
    pin to direct dependencies only)."""
    assert request.first_index is not None
    pins = dict(request.index_pins) | dict.fromkeys(names, request.first_index)
    return dataclasses.replace(
        request,
        packages=(*request.packages, *sorted(names)),
        index_pins=tuple(sorted(pins.items())),
    )


def resolve_sdk(
    request: ResolveRequest,
    previous: bytes | None,
    release: RocmRelease,
    where: str,
    *,
    upgrade: bool = False,
    upgrade_packages: Sequence[str] = (),
) -> bytes:
    """The post-processed pylock body (no header) of a pip-SDK request; LockError when the
    family cannot be pinned to the SDK's index or the provenance check refuses the result."""
    found: Mapping[str, str] = {}
    for _ in range(MAX_ROUNDS):
        try:
            raw = run_uv(request, previous, upgrade=upgrade, upgrade_packages=upgrade_packages)
        except LockError as exc:
            if not found:
                raise
            raise LockError(_unpinnable(where, request, found, exc)) from None
        found = unpinned_family(raw, request) | served_by_first_index(raw, request)
        if not found:
            break
        request = pinned_too(request, list(found))
    else:
        raise LockError(f"{where}: ROCm-family names kept appearing: {', '.join(found.values())}")
    body = postprocess(raw, request, "")
    doc: dict[str, Any] = tomllib.loads(body.decode("utf-8"))
    problems = provenance_problems(doc, release, [src.canonical for src in request.indexes])
    if problems:
        raise LockError(_refused(where, request, problems))
    return body


def _unpinnable(
    where: str, request: ResolveRequest, found: Mapping[str, str], exc: LockError
) -> str:
    index = request.index(str(request.first_index))
    return (
        f"{where}: the lock is refused: the ROCm-family packages "
        f"{'; '.join(found.values())} did not come from {index.name} ({index.canonical}), and "
        f"resolving them from it failed (AMD's index does not serve them?):\n{exc}"
    )


def _refused(where: str, request: ResolveRequest, problems: Sequence[str]) -> str:
    index = request.index(str(request.first_index))
    lines = "\n".join(f"  {p}" for p in problems)
    return (
        f"{where}: the lock is refused: every package of the ROCm family must come from "
        f"{index.name} ({index.canonical}) with a real version:\n{lines}\nPin the package to "
        "that index in the spec (index_pins), or check the index's mirror"
    )

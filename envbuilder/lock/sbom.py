"""A CycloneDX SBOM per built artifact, from the lock: what the artifact holds, with hashes.

    sbom_bytes(project, env, target, artifact, dpkg_status=None) -> bytes   CycloneDX 1.6 JSON
    sbom_path(project, env, target) -> Path                reports/<env>.<target>.cdx.json
    write_sbom(project, env, target, artifact, dpkg_status=None) -> Path    what `build` calls
    dpkg_architectures(status) -> {(name, version): {arch}} | None    dpkg status, parsed

Made with the CycloneDX Python library (cyclonedx-python-lib: the model, its JSON writer and its
schema validator), never as hand-written JSON. What it lists, all read from the committed lock:

* the artifact itself (metadata.component): the image (its id, the lock's prediction, as a
  SHA-256 hash), the `.wsl` (its sha256) or the venv;
* every Python package the target installs from its pylock: the file an installer picks for the
  target's platform and Python (envbuilder.lock.wheelcache.locked_files, what `build` installs),
  with its sha256, its URL as a distribution reference, a `pkg:pypi` purl (with
  `repository_url` when the pylock names the package's index), and the licenses the wheel's
  own core metadata declares, read from the wheel cache (none when unknown: docs/sbom.md);
* the base image (by digest, `pkg:oci/NAME@sha256:...?repository_url=...&tag=...`) and every apt
  package the lock pins on top of it, at its exact version
  (`pkg:deb/<debian|ubuntu>/NAME@VERSION?arch=amd64&distro=debian-12`; docs/sbom.md says how
  each qualifier is found: `arch` is the package's own `Architecture` (`all` for tzdata) read
  from the built artifact's /var/lib/dpkg/status when the caller passes it, else the arch apt
  installed for; apt licenses are not listed). The lock pins apt
  packages by version, not by file hash, so those components carry no hash (the archive's
  signed indexes vouch for them); a pinned system file (the wsl2 target's librocdxg .deb)
  carries its sha256.

Same lock in, same bytes out: the timestamp is the lock's SOURCE_DATE_EPOCH, the serial
number a UUID derived from the content, and the licenses are read from the files the lock pins
by sha256 (which `build` has fetched into the wheel cache), so a rebuild of the same lock writes
the same file.

Why a file beside the report and not an image label or a file inside the image: either would
change the image's config, so its id (the digest the lock predicts, docs/reproducibility.md),
and the SBOM names that id: a label cannot hold a document about the image it is part of. The
SBOM is a separate file whose sha256 changes with the lock, like the report.
"""

from __future__ import annotations

import re
import uuid
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import (
    DisjunctiveLicense,
    License,
    LicenseAcknowledgement,
    LicenseExpression,
)
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.spdx import fixup_id
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.metadata import RawMetadata, parse_email

from envbuilder import __version__
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import BuildError
from envbuilder.core.fsutil import atomic_write_bytes
from envbuilder.core.project import Project
from envbuilder.lock.lockfile import EnvLock, TargetLock, load_env_lock
from envbuilder.lock.wheelcache import LockedFile, cache_path, locked_files
from envbuilder.targets.base import Artifact

#: A fixed namespace for the content-derived serial numbers (uuid5 of the BOM's content).
SERIAL_NAMESPACE = uuid.UUID("9d1c2a0e-5f1b-4c5e-9a43-3c1f7b2e6a10")
SCHEMA = SchemaVersion.V1_6


def sbom_path(project: Project, env: str, target: str) -> Path:
    """reports/<env>.<target>.cdx.json, beside the validation report."""
    return project.reports / f"{env}.{target}.cdx.json"


def _sha256(hex_digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=hex_digest.removeprefix("sha256:"))


def python_component(f: LockedFile, licenses: Sequence[License] = ()) -> Component:
    """A pylock package as the file the target installs, with its sha256 and the licenses its
    own metadata declares (none when unknown)."""
    return Component(
        type=ComponentType.LIBRARY,
        name=f.name,
        version=f.version,
        purl=pypi_purl(f),
        bom_ref=f"pypi:{f.name}@{f.version}",
        hashes=[_sha256(f.sha256)],
        licenses=licenses,
        external_references=[
            ExternalReference(
                type=ExternalReferenceType.DISTRIBUTION,
                url=XsUri(f.url),
                hashes=[_sha256(f.sha256)],
            )
        ],
    )


#: The core metadata of a wheel: METADATA in its one top-level `.dist-info` folder.
_WHEEL_METADATA = re.compile(r"[^/]+\.dist-info/METADATA")
#: A `License` field longer than this, or of several lines, is the license's text, not its name.
_LICENSE_NAME_MAX = 100


def wheel_metadata(wheel: Path) -> RawMetadata | None:
    """The core metadata of a wheel file, or None when it is not there or not readable (a
    package whose wheel is not in the wheel cache, or an sdist: its license stays unknown)."""
    if not wheel.name.endswith(".whl"):
        return None
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if _WHEEL_METADATA.fullmatch(n)]
            if len(names) != 1:
                return None
            raw, _ = parse_email(archive.read(names[0]))
    except (OSError, zipfile.BadZipFile):
        return None
    return raw


def declared_licenses(metadata: RawMetadata) -> list[License]:
    """The licenses a package's core metadata declares, as CycloneDX says them; nothing is
    inferred. PEP 639's `License-Expression` (a valid SPDX expression) is the whole answer when
    present, as the PEP tells tools; else the `License` field (an SPDX id as `id`, an expression
    as itself, a short name as `name`; a field holding the license's text is skipped) and each
    `License ::` classifier verbatim as a name (the most specific of a chain)."""
    declared = LicenseAcknowledgement.DECLARED
    expression = _spdx_expression(metadata.get("license_expression"))
    if expression is not None:
        return [LicenseExpression(expression, acknowledgement=declared)]
    field = (metadata.get("license") or "").strip()
    as_expression = _spdx_expression(field) if fixup_id(field) is None else None
    if as_expression is not None and " " in as_expression:
        return [LicenseExpression(as_expression, acknowledgement=declared)]
    out: list[License] = []
    if spdx_id := fixup_id(field):
        out.append(DisjunctiveLicense(id=spdx_id, acknowledgement=declared))
    elif field and field.upper() != "UNKNOWN" and _is_a_name(field):
        out.append(DisjunctiveLicense(name=field, acknowledgement=declared))
    classifiers = [c for c in metadata.get("classifiers", []) if c.startswith("License ::")]
    for c in sorted(set(classifiers)):
        if not any(other.startswith(c + " ::") for other in classifiers):
            out.append(DisjunctiveLicense(name=c, acknowledgement=declared))
    return out


def _spdx_expression(value: str | None) -> str | None:
    """`value` as a canonical SPDX license expression, or None when it is not one."""
    if not value or not value.strip():
        return None
    try:
        return canonicalize_license_expression(value)
    except InvalidLicenseExpression:
        return None


def _is_a_name(field: str) -> bool:
    return "\n" not in field and len(field) <= _LICENSE_NAME_MAX


def cached_licenses(project: Project, files: Iterable[LockedFile]) -> dict[str, list[License]]:
    """sha256 -> the licenses declared in that file's metadata, for each file the wheel cache
    holds. The cache is keyed by sha256, so what it reads is the locked file itself; `build`
    fetches every locked file into it before it writes the SBOM."""
    out: dict[str, list[License]] = {}
    for f in files:
        metadata = wheel_metadata(cache_path(project, f.sha256, f.filename))
        if metadata is not None:
            out[f.sha256] = declared_licenses(metadata)
    return out


#: Debian's release codenames -> their numbers, for the `distro` qualifier (`debian-12`).
DEBIAN_RELEASES = {
    "buster": "10",
    "bullseye": "11",
    "bookworm": "12",
    "trixie": "13",
    "forky": "14",
}
#: uv's platform machine -> dpkg's architecture name.
DPKG_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el", "s390x": "s390x"}
#: The registry that short image names ("debian", "rocm/dev-ubuntu-24.04") are pulled from,
#: as the engine resolves them; its official images live under `library/`.
DEFAULT_REGISTRY = "docker.io"


def pypi_purl(f: LockedFile) -> PackageURL:
    """`pkg:pypi/NAME@VERSION`, with `repository_url` = the package's index when the pylock
    names one (PEP 751 `packages.index`: envbuilder writes it for the packages of a named
    index, e.g. torch's; a package of the default index has none, and the purl type's default
    repository applies)."""
    qualifiers = {"repository_url": f.index.rstrip("/")} if f.index else None
    return PackageURL(type="pypi", name=f.name, version=f.version, qualifiers=qualifiers)


def image_parts(base_image: str) -> tuple[str, str, str | None, str | None]:
    """(registry, repository path, tag, digest) of an image reference, the registry and the
    path as the engine resolves a short name ("debian:bookworm-slim@sha256:..." ->
    ("docker.io", "library/debian", "bookworm-slim", "sha256:...")."""
    ref, _, digest = base_image.partition("@")
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DEFAULT_REGISTRY, ref
    path, _, tag = path.partition(":")
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    return registry, path, tag or None, digest or None


def _distro(base_image: str | None) -> tuple[str, str | None]:
    """(purl namespace, `distro` qualifier) of the base image's apt packages: ("debian",
    "debian-12") for debian:bookworm-slim, ("ubuntu", "ubuntu-24.04") for ubuntu:24.04 or an
    image named after the release (rocm/dev-ubuntu-24.04). The qualifier is None when the
    reference does not tell the release; a codename without a known number stays a codename
    (the purl spec's `distro` is "the distribution name, codename, or suite")."""
    if not base_image:
        return "debian", None
    _, path, tag, _ = image_parts(base_image)
    name = path.rsplit("/", 1)[-1]
    vendor = "ubuntu" if "ubuntu" in name else "debian"
    numbered = re.search(r"ubuntu-(\d+\.\d+)", name) if vendor == "ubuntu" else None
    if numbered:
        return vendor, f"ubuntu-{numbered[1]}"
    release = (tag or "").split("-")[0]
    if vendor == "ubuntu" and re.fullmatch(r"\d+\.\d+", release):
        return vendor, f"ubuntu-{release}"
    if vendor == "debian" and release in DEBIAN_RELEASES:
        return vendor, f"debian-{DEBIAN_RELEASES[release]}"
    if vendor == "debian" and re.fullmatch(r"\d+", release):
        return vendor, f"debian-{release}"
    return vendor, release if re.fullmatch(r"[a-z]+", release) else None


def dpkg_arch(platform: str) -> str | None:
    """dpkg's architecture of a uv platform ("x86_64-manylinux_2_28" -> "amd64")."""
    return next((a for m, a in DPKG_ARCH.items() if platform.startswith(m)), None)


#: Where dpkg records what is installed (dpkg(1), "FILES"), in an image or a WSL rootfs.
DPKG_STATUS = "/var/lib/dpkg/status"
#: The grammar of the three fields read from it (Debian policy 5.6.1, 5.6.12, 11.1: package
#: names, versions, dpkg architecture names).
_DPKG_FIELDS = {
    "Package": re.compile(r"[a-z0-9][a-z0-9+.-]+"),
    "Version": re.compile(r"(?:\d+:)?[A-Za-z0-9][A-Za-z0-9.+~:-]*"),
    "Architecture": re.compile(r"[a-z0-9][a-z0-9-]*"),
}
#: A field line of a control stanza: `Name: value` (a continuation line starts with a blank).
_FIELD_LINE = re.compile(r"([!-9;-~][!-9;-~]*):(.*)")

#: (package, version) -> the `Architecture`s installed at that version (several for a
#: Multi-Arch: same package installed for two archs).
DpkgArchitectures = dict[tuple[str, str], frozenset[str]]


def dpkg_architectures(status: bytes) -> DpkgArchitectures | None:
    """The `Architecture` of every installed package of a dpkg status file, by (package,
    version); None when the file is malformed anywhere (a line that is no field, a stanza of an
    installed package without one of the three fields, a value outside its grammar, a package
    listed twice for one arch): the caller then says the lock's arch, never a half-read answer.
    Stanzas whose `Status` is not `... installed` (removed, config-files) are skipped."""
    found: dict[tuple[str, str], set[str]] = {}
    seen: set[tuple[str, str]] = set()
    for stanza in _stanzas(status.decode("utf-8", "replace")):
        if stanza is None:
            return None
        if stanza.get("Status", "").split()[-1:] != ["installed"]:
            continue
        values = [stanza.get(k, "") for k in _DPKG_FIELDS]
        if not all(rx.fullmatch(v) for rx, v in zip(_DPKG_FIELDS.values(), values, strict=True)):
            return None
        name, version, arch = values
        if (name, arch) in seen:
            return None
        seen.add((name, arch))
        found.setdefault((name, version), set()).add(arch)
    return {k: frozenset(v) for k, v in found.items()}


def _stanzas(text: str) -> Iterator[dict[str, str] | None]:
    """The stanzas of a control file as {field: first line's value}; None for a malformed line
    (a line that is neither a field nor a continuation, a continuation with no field before)."""
    stanza: dict[str, str] = {}
    for line in text.split("\n"):
        if not line.strip():
            if stanza:
                yield stanza
            stanza = {}
        elif line[0] in " \t":
            if not stanza:
                yield None
        elif (m := _FIELD_LINE.fullmatch(line)) is None or m[1] in stanza:
            yield None
        else:
            stanza[m[1]] = m[2].strip()
    if stanza:
        yield stanza


def installed_arch(
    name: str, version: str, native: str | None, installed: DpkgArchitectures | None
) -> str | None:
    """The `Architecture` of the pinned package `name` (`libc6` or `libc6:i386`) at `version`
    as dpkg installed it: its own (`all` for tzdata) when `installed` lists it, of several the
    one a `:arch` suffix names, else the native one; `native` (the arch apt installed for, what
    the lock alone tells) when `installed` is None or does not list the package."""
    base, _, suffix = name.partition(":")
    archs = installed.get((base, version), frozenset()) if installed else frozenset()
    if len(archs) == 1:
        return next(iter(archs))
    return suffix if suffix and suffix in archs else native


def deb_purl(
    name: str, version: str, target: TargetLock, installed: DpkgArchitectures | None = None
) -> PackageURL:
    """`pkg:deb/<vendor>/NAME@VERSION?arch=...&distro=...` (purl-spec's deb type). `arch` is the
    package's own `Architecture` from `installed` (the built artifact's dpkg status: `all` for
    an arch-independent package); without it, the architecture apt installed for (the target's
    platform), as the lock records no package's `Architecture`."""
    namespace, distro = _distro(target.base_image)
    arch = installed_arch(name, version, dpkg_arch(target.platform), installed)
    qualifiers = {k: v for k, v in (("arch", arch), ("distro", distro)) if v}
    name = name.split(":")[0]  # `libc6:amd64` names the arch, which the qualifier says
    return PackageURL(
        type="deb", namespace=namespace, name=name, version=version, qualifiers=qualifiers or None
    )


def oci_purl(base_image: str) -> PackageURL | None:
    """`pkg:oci/NAME@sha256:...?repository_url=REGISTRY/PATH&tag=TAG` (purl-spec's oci type:
    the name is the repository's last fragment, the version the digest). None without a
    digest: an oci purl is "required to uniquely identify the artifact"."""
    registry, path, tag, digest = image_parts(base_image)
    if digest is None:
        return None
    qualifiers = {"repository_url": f"{registry}/{path}"}
    if tag:
        qualifiers["tag"] = tag
    return PackageURL(
        type="oci", name=path.rsplit("/", 1)[-1].lower(), version=digest, qualifiers=qualifiers
    )


def apt_components(
    target: TargetLock, installed: DpkgArchitectures | None = None
) -> list[Component]:
    """Every apt package the lock pins for the target (each stage; one component per name and
    version), by version: the lock records no file hash for them. `installed`: the artifact's
    dpkg architectures (deb_purl)."""
    pins = sorted({(n, v) for stage in target.apt.values() for n, v in stage.items()})
    return [
        Component(
            type=ComponentType.LIBRARY,
            name=name,
            version=version,
            purl=deb_purl(name, version, target, installed),
            bom_ref=f"deb:{name}@{version}",
        )
        for name, version in pins
    ]


def base_components(target: TargetLock) -> list[Component]:
    """The base image by digest, and a pinned system file with its sha256."""
    out: list[Component] = []
    if target.base_image:
        ref, _, digest = target.base_image.partition("@")
        out.append(
            Component(
                type=ComponentType.CONTAINER,
                name=ref,
                version=digest or None,
                purl=oci_purl(target.base_image),
                bom_ref=f"base:{target.base_image}",
                hashes=[_sha256(digest)] if digest else [],
            )
        )
    if target.system_file:
        url, _, sha = target.system_file.partition("#sha256=")
        out.append(
            Component(
                type=ComponentType.FILE,
                name=url.rsplit("/", 1)[-1],
                bom_ref=f"file:{url}",
                hashes=[_sha256(sha)],
                external_references=[
                    ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url))
                ],
            )
        )
    return out


def artifact_component(env: str, target: str, artifact: Artifact, lock: EnvLock) -> Component:
    """The artifact the SBOM describes: the image, the `.wsl` or the venv."""
    kind = ComponentType.CONTAINER if target == "docker" else ComponentType.APPLICATION
    if target == "wsl2":
        kind = ComponentType.OPERATING_SYSTEM
    pylock_sha = lock.targets[target].pylock_sha256
    return Component(
        type=kind,
        name=f"envbuilder/{env}",
        version=pylock_sha[:12],
        bom_ref=f"artifact:{env}/{target}",
        description=f"envbuilder env {env}, target {target}: {artifact.reference}",
        hashes=[_sha256(artifact.digest)] if artifact.digest else [],
    )


def build_bom(
    lock: EnvLock,
    target: str,
    artifact: Artifact,
    files: Iterable[LockedFile],
    licenses: Mapping[str, Sequence[License]] | None = None,
    installed: DpkgArchitectures | None = None,
) -> Bom:
    """The BOM of one artifact (no I/O); `licenses`: sha256 -> a file's declared licenses;
    `installed`: the artifact's dpkg architectures (None: the lock's arch)."""
    t = lock.targets[target]
    known = licenses or {}
    components = [
        *base_components(t),
        *apt_components(t, installed),
        *(python_component(f, known.get(f.sha256, ())) for f in files),
    ]
    root = artifact_component(lock.env, target, artifact, lock)
    bom = Bom(
        components=components,
        metadata=BomMetaData(
            component=root,
            timestamp=datetime.fromtimestamp(lock.source_date_epoch, tz=UTC),
            properties=[],
        ),
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="envbuilder", version=__version__)
    )
    for component in components:
        bom.register_dependency(root, [component])
    return bom


def _serialize(bom: Bom) -> str:
    return str(JsonV1Dot6(bom).output_as_string(indent=2))


def sbom_bytes(
    project: Project, env: str, target: str, artifact: Artifact, dpkg_status: bytes | None = None
) -> bytes:
    """The validated CycloneDX JSON of `artifact` (BuildError when the library's schema
    validator refuses it: a bug, never written). `dpkg_status`: the artifact's
    /var/lib/dpkg/status, whose `Architecture`s the deb purls say (None, or a malformed file:
    the arch apt installed for, from the lock alone)."""
    lock = load_env_lock(project, env)
    if lock is None or target not in lock.targets:
        raise BuildError(f"env {env!r} target {target!r} is not locked: no SBOM can be made")
    t = lock.targets[target]
    files = locked_files(project.lockfiles / t.pylock, t.platform, t.python)
    installed = dpkg_architectures(dpkg_status) if dpkg_status is not None else None
    bom = build_bom(lock, target, artifact, files, cached_licenses(project, files), installed)
    bom.serial_number = uuid.UUID(int=0)  # the library's default is random
    bom.serial_number = uuid.uuid5(SERIAL_NAMESPACE, _serialize(bom))
    text = _serialize(bom)
    problem = JsonStrictValidator(SCHEMA).validate_str(text)
    if problem is not None:
        raise BuildError(f"the SBOM of {env}/{target} does not validate: {problem}")
    return (text + "\n").encode("utf-8")


def write_sbom(
    project: Project, env: str, target: str, artifact: Artifact, dpkg_status: bytes | None = None
) -> Path:
    """Write reports/<env>.<target>.cdx.json (atomically) and return its path."""
    path = sbom_path(project, env, target)
    real_folders_to(project.root, path)
    atomic_write_bytes(path, sbom_bytes(project, env, target, artifact, dpkg_status))
    return path

"""The checker: re-reads a finished `.wsl` and reports every rule it breaks (Microsoft's
validate-modern.py checks with their levels, plus envbuilder's own promises).

Microsoft's side follows microsoft/WSL distributions/validate-modern.py at 3e27a6a (2026-08):
its tar checks (`read_tar`), message for message; the manifest and URL checks have no tar to
look at and are left out."""

from __future__ import annotations

import posixpath
import tarfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envbuilder.core.errors import BuildError
from envbuilder.image.wsl.conventions import (
    DISCOURAGED_WSL_CONF_KEYS,
    DISTRIBUTION_CONF,
    DISTRIBUTION_CONF_KEYS,
    ICON_DIRS,
    OOBE_DIRS,
    SYSTEMD_BINARIES,
    SYSTEMD_UNIT_DIRS,
    TERMINAL_PROFILE_DIRS,
    WSL1_UNSUPPORTED_XATTRS,
    WSL_CONF,
    WSL_CONF_KEYS,
    clean_name,
    discouraged_units,
    is_kernel,
    is_password_hash,
    parse_conf,
    sort_key,
)

# ----------------------------------------------------------------------------- checking


Level = Literal["error", "warning"]


@dataclass(frozen=True)
class RuleFinding:
    """One broken rule in a `.wsl`: `source` is "microsoft" (validate-modern.py's checks and
    levels) or "envbuilder" (this module's promises)."""

    level: Level
    source: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: [{self.source}:{self.rule}] {self.message}"


class TarView:
    """Random access to a finished `.wsl` (headers in memory, data read on demand)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.members = tar.getmembers()
        self.by_name = {clean_name(m.name): m for m in self.members}

    def resolve(self, path: str, max_hops: int = 40) -> tarfile.TarInfo | None:
        """The member at absolute `path`, following symlinks in it and in its parents (and a
        hard link to its target); None when it does not exist or links loop."""
        parts = deque(p for p in path.split("/") if p and p != ".")
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.popleft()
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            member = self.by_name.get("/".join([*resolved, part]))
            if member is None:
                return None
            if member.issym():
                hops += 1
                if hops > max_hops:
                    return None
                if member.linkname.startswith("/"):
                    resolved = []
                parts.extendleft(reversed([p for p in member.linkname.split("/") if p]))
                continue
            resolved.append(part)
        member = self.by_name.get("/".join(resolved)) if resolved else None
        if member is not None and member.islnk():
            member = self.by_name.get(clean_name(member.linkname))
        return member

    def read(self, member: tarfile.TarInfo) -> bytes:
        if member.islnk():
            member = self.by_name[clean_name(member.linkname)]
        fh = self.tar.extractfile(member)
        return fh.read() if fh else b""


def is_x86_64_elf(head: bytes) -> bool:
    """What `file` calls "ELF 64-bit ... x86-64, version 1" (validate-modern.py's magic check)."""
    return (
        len(head) >= 20
        and head[:4] == b"\x7fELF"
        and head[4] == 2
        and head[6] == 1
        and int.from_bytes(head[18:20], "little" if head[5] == 1 else "big") == 62
    )


#: Compressed tars WSL installs (validate-modern.py KNOWN_TAR_FORMATS): gzip and xz.
_TAR_MAGICS = (b"\x1f\x8b", b"\xfd7zXZ\x00")


def check_wsl_tar(path: Path, *, source_date_epoch: int | None = None) -> list[RuleFinding]:
    """Every rule the `.wsl` at `path` breaks (an empty list: it passes). Microsoft's checks
    keep the validator's levels (error or warning)."""
    findings: list[RuleFinding] = []
    with path.open("rb") as fh:
        head = fh.read(6)
        fh.seek(0)
        if not head.startswith(_TAR_MAGICS):
            findings.append(
                RuleFinding(
                    "error",
                    "microsoft",
                    "format",
                    "not gzip or xz compressed (the tar formats WSL takes)",
                )
            )
        with tarfile.open(fileobj=fh, mode="r:*") as tar:
            view = TarView(tar)
            findings += _microsoft_checks(view)
            findings += _envbuilder_checks(view, source_date_epoch)
    return findings


class _MicrosoftFindings:
    """validate-modern.py's findings in its order, with its shared per-path check."""

    def __init__(self, view: TarView) -> None:
        self.view = view
        self.out: list[RuleFinding] = []

    def add(self, level: Level, rule: str, message: str) -> None:
        self.out.append(RuleFinding(level, "microsoft", rule, message))

    def mode_owner(
        self,
        path: str,
        modes: tuple[int, ...],
        gid: int | None = 0,
        max_size: int | None = None,
        optional: bool = False,
    ) -> tarfile.TarInfo | None:
        member = self.view.resolve(path)
        if member is None:
            if not optional:
                self.add("error", "present", f"{path} not found in the tar")
            return None
        if member.mode not in modes:
            self.add(
                "warning",
                "mode",
                f"{path} has mode {oct(member.mode)}, expected one of "
                f"{', '.join(oct(m) for m in modes)}",
            )
        if member.uid != 0:
            self.add("warning", "owner", f"{path} has uid {member.uid}, expected 0")
        if gid is not None and member.gid != gid:
            self.add("warning", "owner", f"{path} has gid {member.gid}, expected {gid}")
        if max_size is not None and member.size > max_size:
            self.add("error", "size", f"{path} is {member.size} bytes, at most {max_size}")
        return member

    def conf_keys(self, member: tarfile.TarInfo, where: str) -> dict[str, str]:
        try:
            return parse_conf(self.view.read(member), where)
        except BuildError as exc:
            self.add("error", "conf-syntax", str(exc))
            return {}

    def elf(self, path: str, optional: bool = False) -> None:
        member = self.mode_owner(path, (0o755, 0o775, 0o555), optional=optional)
        if member is not None and not is_x86_64_elf(self.view.read(member)[:64]):
            self.add("error", "elf", f"{path} is not an x86-64 ELF executable")


@dataclass(frozen=True)
class _ReferencedFile:
    """A file /etc/wsl-distribution.conf names: `key` as parsed (lower case), `label` as
    validate-modern.py spells it in its messages."""

    key: str
    label: str
    modes: tuple[int, ...]
    max_size: int | None
    dirs: tuple[str, ...]
    location_rule: str


_OOBE_COMMAND = _ReferencedFile(
    "oobe.command", "oobe.command", (0o775, 0o755), None, OOBE_DIRS, "oobe-location"
)
_ICON = _ReferencedFile(
    "shortcut.icon", "shortcut.icon", (0o664, 0o644), 1024 * 1024, ICON_DIRS, "icon-location"
)
_TERMINAL_PROFILE = _ReferencedFile(
    "windowsterminal.profiletemplate",
    "windowsterminal.profileTemplate",
    (0o660, 0o640),
    1024 * 1024,
    TERMINAL_PROFILE_DIRS,
    "terminal-profile-location",
)


def _microsoft_checks(view: TarView) -> list[RuleFinding]:
    found = _MicrosoftFindings(view)
    default_uid = _distribution_conf_checks(found)
    _wsl_conf_checks(found)
    passwd = found.mode_owner("/etc/passwd", (0o664, 0o644))
    if passwd is not None:
        _passwd_checks(view.read(passwd), default_uid, found.add)
    found.mode_owner("/etc/shadow", (0o640, 0o600, 0), gid=None)
    found.elf("/bin/bash", optional=True)
    found.elf("/bin/sh")
    for unit in _enabled_discouraged_units(view):
        found.add("warning", "systemd-unit", f"discouraged systemd unit enabled: {unit}")
    xattrs, sample = _wsl1_unsupported_xattrs(view)
    if xattrs:
        found.add(
            "warning",
            "xattrs",
            f"extended attributes WSL1 does not support: {xattrs}, e.g. on {sample}",
        )
    return found.out


def _distribution_conf_checks(found: _MicrosoftFindings) -> int | None:
    """Checks /etc/wsl-distribution.conf and the files it names; its default uid, if any."""
    dist = found.mode_owner("/etc/wsl-distribution.conf", (0o664, 0o644))
    if dist is None:
        return None
    keys = found.conf_keys(dist, "/etc/wsl-distribution.conf")
    unexpected = sorted(k for k in keys if k not in DISTRIBUTION_CONF_KEYS)
    if unexpected:
        found.add(
            "error",
            "distribution-conf-keys",
            f"unexpected keys in /etc/wsl-distribution.conf: {unexpected}",
        )
    _referenced_file_checks(found, keys, _OOBE_COMMAND)
    default_uid = _default_uid_checks(found, keys)
    if not _referenced_file_checks(found, keys, _ICON):
        found.add("warning", "icon", "no shortcut.icon provided")
    _referenced_file_checks(found, keys, _TERMINAL_PROFILE)
    return default_uid


def _referenced_file_checks(
    found: _MicrosoftFindings, keys: dict[str, str], ref: _ReferencedFile
) -> bool:
    """Checks the file `ref` names, if the conf names one (and says whether it does)."""
    path = keys.get(ref.key)
    if not path:
        return False
    found.mode_owner(path, ref.modes, max_size=ref.max_size)
    if not path.startswith(ref.dirs):
        found.add(
            "warning",
            ref.location_rule,
            f"{ref.label} {path!r} is not under {' or '.join(ref.dirs)}",
        )
    return True


def _default_uid_checks(found: _MicrosoftFindings, keys: dict[str, str]) -> int | None:
    uid_text = keys.get("oobe.defaultuid")
    if not uid_text:
        return None
    if uid_text != "1000":
        found.add("warning", "default-uid", f"oobe.defaultUid is {uid_text}, not 1000")
    return int(uid_text) if uid_text.isdigit() else None


def _wsl_conf_checks(found: _MicrosoftFindings) -> None:
    wsl_conf = found.view.resolve("/etc/wsl.conf")
    if wsl_conf is None:
        return
    found.mode_owner("/etc/wsl.conf", (0o664, 0o644))
    keys = found.conf_keys(wsl_conf, "/etc/wsl.conf")
    extra = sorted(k for k in keys if k not in WSL_CONF_KEYS)
    if extra:
        found.add("error", "wsl-conf-keys", f"unexpected keys in /etc/wsl.conf: {extra}")
    for key in sorted(DISCOURAGED_WSL_CONF_KEYS & keys.keys()):
        found.add(
            "warning",
            "wsl-conf-discouraged",
            f"discouraged /etc/wsl.conf key: {key}={keys[key]} (the modern format creates "
            "the default user at first launch: [oobe] defaultUid and the oobe command)",
        )
    if keys.get("boot.systemd", "").lower() == "true":
        found.elf("/sbin/init")


def _passwd_checks(
    data: bytes, default_uid: int | None, add: Callable[[Level, str, str], None]
) -> None:
    seen: dict[int, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) != 7 or not fields[2].isdigit():
            add("error", "passwd", f"invalid /etc/passwd entry: {line!r}")
            continue
        uid = int(fields[2])
        if uid in seen:
            add("error", "passwd", f"duplicated uid {uid} in /etc/passwd")
        else:
            seen[uid] = fields[0]
    if 0 not in seen:
        add("error", "root", "no root (uid 0) in /etc/passwd")
    elif seen[0] != "root":
        add("error", "root", f"/etc/passwd has uid 0 named {seen[0]!r}, not root")
    if default_uid is not None and default_uid in seen:
        add(
            "warning",
            "default-user-exists",
            f"/etc/passwd already has the default uid {default_uid} ({seen[default_uid]})",
        )


def _enabled_discouraged_units(view: TarView) -> list[str]:
    """Discouraged units wanted by a target (an entry of a `*.target.wants` folder of the
    systemd unit folders) that neither points at /dev/null nor is masked by
    /etc/systemd/system/UNIT -> /dev/null (validate-modern.py read_systemd_enabled_units)."""
    found = []
    discouraged = set(discouraged_units())
    for name, member in view.by_name.items():
        base = posixpath.basename(name)
        wants = posixpath.dirname(name)
        if (
            base not in discouraged
            or not wants.endswith(".target.wants")
            or posixpath.dirname(wants) not in SYSTEMD_UNIT_DIRS
        ):
            continue
        if _points_at_dev_null(view, member) or _is_masked(view, base):
            continue
        found.append(f"/{name}")
    return sorted(found)


def _points_at_dev_null(view: TarView, member: tarfile.TarInfo) -> bool:
    """A symlink whose target, followed, is /dev/null (which an export may not even hold)."""
    if not member.issym():
        return False
    target = member.linkname
    if not target.startswith("/"):
        target = posixpath.join("/", posixpath.dirname(member.name), target)
    target = posixpath.normpath(target)
    if target == "/dev/null":
        return True
    resolved = view.resolve(target)
    return resolved is not None and clean_name(resolved.name) == "dev/null"


def _is_masked(view: TarView, unit: str) -> bool:
    mask = view.by_name.get(f"etc/systemd/system/{unit}")
    return mask is not None and _points_at_dev_null(view, mask)


def _wsl1_unsupported_xattrs(view: TarView) -> tuple[list[str], str | None]:
    """The xattrs WSL1 cannot store, as PAX records (SCHILY.xattr.NAME), and a file with one."""
    found: set[str] = set()
    sample: str | None = None
    for member in view.members:
        for record in member.pax_headers:
            name = record.removeprefix("SCHILY.xattr.")
            if name != record and name.startswith(WSL1_UNSUPPORTED_XATTRS):
                found.add(name)
                sample = sample or member.name
    return sorted(found), sample


def _envbuilder_checks(view: TarView, source_date_epoch: int | None) -> list[RuleFinding]:
    problems = [
        *_layout_problems(view),
        *_mtime_problems(view, source_date_epoch),
        *_forbidden_file_problems(view),
        *_conf_owner_problems(view),
        *_shadow_problems(view),
        *_unmasked_unit_problems(view),
    ]
    return [RuleFinding("error", "envbuilder", rule, message) for rule, message in problems]


#: One broken envbuilder promise: (rule, message).
_Problem = tuple[str, str]


def _layout_problems(view: TarView) -> Iterator[_Problem]:
    names = [m.name for m in view.members]
    if any(n.startswith(("/", "./", "../")) or n == "." for n in names):
        yield "root", "member names must be relative to the filesystem root (etc/passwd)"
    if names != sorted(names, key=sort_key):
        yield "sorted", "entries are not sorted by path"
    if len(set(names)) != len(names):
        yield "unique", "duplicate entries"
    named = next((m for m in view.members if m.uname or m.gname), None)
    if named is not None:
        yield (
            "numeric-owner",
            f"{named.name} carries owner names ({named.uname}:{named.gname})",
        )


def _mtime_problems(view: TarView, source_date_epoch: int | None) -> Iterator[_Problem]:
    if source_date_epoch is None:
        return
    wrong = [m.name for m in view.members if m.mtime != source_date_epoch]
    if wrong:
        yield (
            "mtime",
            f"{len(wrong)} entries have an mtime other than SOURCE_DATE_EPOCH "
            f"{source_date_epoch}, e.g. {wrong[0]}",
        )


def _forbidden_file_problems(view: TarView) -> Iterator[_Problem]:
    if "etc/resolv.conf" in view.by_name:
        yield "resolv-conf", "the tar has /etc/resolv.conf (WSL generates it)"
    kernels = [n for n in view.by_name if is_kernel(n)]
    if kernels:
        yield "kernel", f"the tar has a kernel or initrd: {kernels}"


def _conf_owner_problems(view: TarView) -> Iterator[_Problem]:
    for conf in (WSL_CONF, DISTRIBUTION_CONF):
        m = view.by_name.get(conf)
        if m is not None and (m.uid, m.gid, m.mode, m.isfile()) != (0, 0, 0o644, True):
            yield "conf-owner", f"/{conf} must be a root:root 0644 file"


def _shadow_problems(view: TarView) -> Iterator[_Problem]:
    shadow = view.by_name.get("etc/shadow")
    if shadow is None:
        return
    for line in view.read(shadow).decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) > 1 and is_password_hash(fields[1]):
            yield "shadow", f"/etc/shadow has a password for {fields[0]!r}"


def _unmasked_unit_problems(view: TarView) -> Iterator[_Problem]:
    """With systemd in the tar, each discouraged unit must be masked."""
    if not any(b in view.by_name for b in SYSTEMD_BINARIES):
        return
    for unit in discouraged_units():
        m = view.by_name.get(f"etc/systemd/system/{unit}")
        if m is None or not m.issym() or m.linkname != "/dev/null":
            yield "masked", f"{unit} is not masked (/etc/systemd/system/{unit} -> /dev/null)"


def gzip_header_is_deterministic(path: Path) -> bool:
    """True when the gzip header has mtime 0 and no file name (what `write_wsl` promises)."""
    with path.open("rb") as fh:
        head = fh.read(10)
    flags, mtime = head[3], int.from_bytes(head[4:8], "little")
    return head[:3] == b"\x1f\x8b\x08" and not flags & 0x08 and mtime == 0

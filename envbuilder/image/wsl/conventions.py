"""Facts of the `.wsl` format that the normaliser and the checker share: Microsoft's file
locations and accepted keys, the format version, and the parsers of the files it names."""

from __future__ import annotations

import configparser
import posixpath

from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import BuildError

# Shared with the image layer normaliser (envbuilder.image.tar); re-exported for this package.
from envbuilder.image.tar import CHUNK as CHUNK
from envbuilder.image.tar import DAY as DAY
from envbuilder.image.tar import SHADOW_FILES as SHADOW_FILES
from envbuilder.image.tar import clean_name as clean_name
from envbuilder.image.tar import sort_key as sort_key

# The facts below follow microsoft/WSL distributions/validate-modern.py (at 3e27a6a, 2026-08).
#: Keys Microsoft's validator accepts in /etc/wsl-distribution.conf (section.key, lower case).
DISTRIBUTION_CONF_KEYS = frozenset(
    {
        "oobe.command",
        "oobe.defaultuid",
        "oobe.defaultname",
        "shortcut.icon",
        "shortcut.enabled",
        "windowsterminal.profiletemplate",
        "windowsterminal.enabled",
    }
)
#: Keys Microsoft's validator accepts in /etc/wsl.conf (WSL_CONF_KEYS); any other is an error.
WSL_CONF_KEYS = frozenset(
    {
        "automount.cgroups",
        "automount.enabled",
        "automount.ldconfig",
        "automount.mountfstab",
        "automount.options",
        "automount.root",
        "boot.command",
        "boot.protectbinfmt",
        "boot.systemd",
        "fileserver.enabled",
        "filesystem.umask",
        "general.hostname",
        "gpu.appendlibpath",
        "gpu.enabled",
        "interop.appendwindowspath",
        "interop.enabled",
        "network.generatehosts",
        "network.generateresolvconf",
        "network.hostname",
        "time.usewindowstimezone",
        "user.default",
    }
)
#: Accepted in /etc/wsl.conf but warned about: the modern format creates the default user at
#: first launch ([oobe] defaultUid + the oobe command), so no image should name one.
DISCOURAGED_WSL_CONF_KEYS = frozenset({"user.default"})
#: Where Microsoft wants the oobe command, the icon and the Windows Terminal profile template.
OOBE_DIRS = ("/usr/lib/wsl", "/usr/libexec/wsl")
ICON_DIRS = ("/usr/lib/wsl", "/usr/share/wsl")
TERMINAL_PROFILE_DIRS = ("/usr/lib/wsl",)
#: Extended attributes WSL1 cannot store (a warning: the distro would not import there).
WSL1_UNSUPPORTED_XATTRS = ("security.selinux", "security.ima", "security.evm")
#: Where the validator looks for enabled units: `*.target.wants` folders of these.
SYSTEMD_UNIT_DIRS = ("usr/local/lib/systemd/system", "usr/lib/systemd/system", "etc/systemd/system")
WSL_CONF = "etc/wsl.conf"
DISTRIBUTION_CONF = "etc/wsl-distribution.conf"
#: Fixed gzip level: part of the artifact's identity (a different level -> a different sha256).
COMPRESSLEVEL = 6
#: Version of the bytes this module writes: bump it whenever the same rootfs would give other
#: bytes (a rule, the tar layout, the compressor), so builds know a recorded file is stale.
FORMAT = "2"
SYSTEMD_BINARIES = ("usr/lib/systemd/systemd", "lib/systemd/systemd")


# ----------------------------------------------------------------------------- parsing


def parse_conf(data: bytes, where: str) -> dict[str, str]:
    """An INI conf file (wsl.conf, wsl-distribution.conf) as {"section.key": value}, keys
    lower-cased as WSL and Microsoft's validator read them."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise BuildError(f"{where} is not a valid INI file: {exc}") from exc
    return {
        f"{section}.{key.lower()}": parser[section][key]
        for section in parser.sections()
        for key in parser[section]
    }


def parse_passwd(data: bytes) -> dict[int, list[str]]:
    """/etc/passwd as {uid: fields}; lines that are not 7 fields with a numeric uid are skipped
    (check_wsl_tar reports them)."""
    users: dict[int, list[str]] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[2].isdigit():
            users.setdefault(int(fields[2]), fields)
    return users


def is_kernel(name: str) -> bool:
    base = posixpath.basename(name)
    parent = posixpath.dirname(name)
    kernelish = base.startswith(("vmlinuz", "vmlinux", "initrd.img", "initramfs"))
    return kernelish and parent in ("", "boot")


def is_password_hash(value: str) -> bool:
    """True when a shadow password field holds (or could hold) a usable password."""
    return value not in ("*", "!", "!*", "x") and not (value.startswith("!") and len(value) <= 2)


def discouraged_units() -> tuple[str, ...]:
    """The units Microsoft's validator warns about when enabled (validate-modern.py), from the
    compatibility data (envbuilder/data/wsl.toml)."""
    return load_compat().wsl_units.discouraged

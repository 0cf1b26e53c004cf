"""Turn a `docker export` stream into a reproducible `.wsl` file (WSL's modern distro format).

A `.wsl` file is a gzip'd tar whose root is the filesystem root (WSL 2.4.4+, `wsl --install
--from-file`). `write_wsl` reads the export stream once (never holding the rootfs in memory: file
data is spooled to a temp file beside the output, only headers stay in memory), applies
Microsoft's rules for such tars, removes what makes two builds of one Dockerfile differ, sorts the
entries and writes a deterministic gzip. Same rootfs content + same SOURCE_DATE_EPOCH -> same
bytes -> same sha256.

What the normalizer does, and why:
  * names: relative to the root (`etc/passwd`), no `./`, no `..`; directories before contents,
    siblings in byte order (sorted by path components);
  * every mtime = SOURCE_DATE_EPOCH; owners numeric (uid/gid kept, uname/gname empty); only
    `SCHILY.xattr.*` PAX records kept (file capabilities), atime/ctime dropped;
  * Microsoft's rules: no /etc/resolv.conf, no kernel (/boot/vmlinuz*, initrd, the root
    symlinks), /etc/wsl.conf and /etc/wsl-distribution.conf root:root 0644, the oobe command
    root:root 0755, root (uid 0) must be in /etc/passwd, no password hashes in /etc/shadow
    (`*`, or `!` for locked accounts), the systemd units Microsoft discourages masked
    (`/etc/systemd/system/UNIT -> /dev/null`) when the rootfs has systemd;
  * container leftovers dropped: /.dockerenv, the empty /etc/hostname and /etc/hosts mount
    points, everything under /dev, /proc, /sys (WSL mounts those);
  * build noise dropped or normalized: /var/log files, apt lists and caches, the ldconfig
    aux-cache, debconf/dpkg `*-old` backups, /tmp and /var/tmp contents, /etc/machine-id emptied
    (systemd makes one on first boot), the "last password change" day in shadow files clamped to
    SOURCE_DATE_EPOCH, and timestamp-based `.pyc` headers set to SOURCE_DATE_EPOCH (which is also
    the source file's mtime in the tar, so the caches stay valid).

`check_wsl_tar` re-reads a finished `.wsl` and reports every rule it breaks: Microsoft's
validator checks (distributions/validate-modern.py in microsoft/WSL, re-implemented here, with
its error/warning levels) plus this module's own promises.

The package's modules, one job each:
  conventions   the format's shared facts (file locations, accepted keys, FORMAT) and parsers;
  normalize     the normaliser and `write_wsl`;
  gzipwriter    the parallel, deterministic gzip writer;
  rules         `check_wsl_tar`, the checker of Microsoft's rules and envbuilder's promises.
"""

from __future__ import annotations

from envbuilder.image.wsl.conventions import (
    COMPRESSLEVEL,
    FORMAT,
    clean_name,
    discouraged_units,
    is_password_hash,
    parse_conf,
    parse_passwd,
)
from envbuilder.image.wsl.gzipwriter import ParallelGzipWriter
from envbuilder.image.wsl.normalize import (
    Entry,
    IterStream,
    NormalizeStats,
    WslResult,
    normalize,
    scrub_shadow,
    write_wsl,
)
from envbuilder.image.wsl.rules import (
    RuleFinding,
    TarView,
    check_wsl_tar,
    gzip_header_is_deterministic,
    is_x86_64_elf,
)

__all__ = [
    "COMPRESSLEVEL",
    "FORMAT",
    "Entry",
    "IterStream",
    "NormalizeStats",
    "ParallelGzipWriter",
    "RuleFinding",
    "TarView",
    "WslResult",
    "check_wsl_tar",
    "clean_name",
    "discouraged_units",
    "gzip_header_is_deterministic",
    "is_password_hash",
    "is_x86_64_elf",
    "normalize",
    "parse_conf",
    "parse_passwd",
    "scrub_shadow",
    "write_wsl",
]

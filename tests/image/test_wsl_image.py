"""envbuilder.image.wsl on tar streams made here: each rule of the `.wsl` format, one test each.

The real `docker export` path is in tests/builders/test_wsl2_build.py; these build small rootfs
tars with
the tarfile module, so every rule can be checked both ways (the normalizer fixes it, and
`check_wsl_tar` -- the port of Microsoft's validator -- finds it when it is broken).
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuilder.core.errors import BuildError
from envbuilder.image import wsl

SDE = 1_700_000_000
# A minimal x86-64 ELF header (what `file` calls "ELF 64-bit LSB executable, x86-64, version 1").
ELF = (
    b"\x7fELF\x02\x01\x01"
    + b"\x00" * 9
    + (2).to_bytes(2, "little")
    + (62).to_bytes(2, "little")
    + (1).to_bytes(4, "little")
    + b"\x00" * 40
)
# Microsoft's modern format: the oobe command creates uid 1000 at first launch, so neither
# wsl.conf ([user] default) nor /etc/passwd names that user; the shortcut has an icon.
DIST_CONF = (
    b"[oobe]\ncommand = /usr/lib/wsl/oobe.sh\ndefaultUid = 1000\n"
    b"defaultName = cpu\n\n[shortcut]\nicon = /usr/lib/wsl/envbuilder.ico\n"
)
WSL_CONF = b"[boot]\nsystemd = true\n"
PASSWD = b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
BAKED_USER = b"envbuilder:x:1000:1000::/home/envbuilder:/bin/bash\n"
ICON = b"\x00\x00\x01\x00\x01\x00" + b"\x00" * 40
SHADOW = (
    b"root:$6$salt$hashhashhash:20400:0:99999:7:::\n"
    b"daemon:*:19000:0:99999:7:::\n"
    b"envbuilder:!$y$j9T$locked:20424:0:99999:7:::\n"
    b"nopass::20424:0:99999:7:::\n"
)


@dataclass
class M:
    """One member of a synthetic export."""

    name: str
    data: bytes | None = None  # None: directory unless link/sym
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    sym: str | None = None
    hard: str | None = None
    mtime: int = 1_765_000_000
    uname: str = "root"
    xattrs: dict[str, str] | None = None


def export_tar(members: Iterable[M]) -> bytes:
    """A tar like `docker export` writes (uname set, build-time mtimes, given order)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.mode, info.uid, info.gid, info.mtime = m.mode, m.uid, m.gid, m.mtime
            info.uname = info.gname = m.uname
            if m.xattrs:
                info.pax_headers = dict(m.xattrs)
            if m.sym is not None:
                info.type, info.linkname = tarfile.SYMTYPE, m.sym
                tar.addfile(info)
            elif m.hard is not None:
                info.type, info.linkname = tarfile.LNKTYPE, m.hard
                tar.addfile(info)
            elif m.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
    return buf.getvalue()


def rootfs(*extra: M, systemd: bool = True, passwd: bytes = PASSWD) -> list[M]:
    """A small but complete rootfs, as docker would export it (with its leftovers)."""
    members = [
        M("bin", sym="usr/bin"),
        M("boot", None, 0o755),
        M("boot/vmlinuz-6.1.0-amd64", b"kernel"),
        M("boot/initrd.img-6.1.0-amd64", b"initrd"),
        M("vmlinuz", sym="boot/vmlinuz-6.1.0-amd64"),
        M("dev", None, 0o755),
        M("dev/console", b""),
        M(".dockerenv", b""),
        M("etc", None, 0o755),
        M("etc/hostname", b""),
        M("etc/hosts", b""),
        M("etc/resolv.conf", b"nameserver 10.0.0.1\n"),
        M("etc/passwd", passwd),
        M("etc/shadow", SHADOW, 0o640, 0, 42),
        M("etc/machine-id", b"0123456789abcdef0123456789abcdef\n"),
        M("etc/wsl.conf", WSL_CONF, 0o600, 1000, 1000),
        M("etc/wsl-distribution.conf", DIST_CONF, 0o664, 1000, 1000),
        M("sbin", sym="usr/sbin"),
        M("usr", None, 0o755),
        M("usr/bin", None, 0o755),
        M("usr/bin/bash", ELF, 0o755),
        M("usr/bin/dash", ELF, 0o755),
        M("usr/bin/sh", sym="dash"),
        M("usr/lib", None, 0o755),
        M("usr/lib/wsl", None, 0o755),
        M("usr/lib/wsl/oobe.sh", b"#!/bin/sh\nexit 0\n", 0o700, 1000, 1000),
        M("usr/lib/wsl/envbuilder.ico", ICON),
        M("usr/sbin", None, 0o755),
        M("var", None, 0o755),
        M("var/log", None, 0o755),
        M("var/log/dpkg.log", b"2026-12-02 installed\n"),
        M("var/cache", None, 0o755),
        M("var/cache/ldconfig", None, 0o700),
        M("var/cache/ldconfig/aux-cache", b"random"),
        M("home", None, 0o755),
        M("home/envbuilder", None, 0o755, 1000, 1000, uname="envbuilder"),
    ]
    if systemd:
        members += [
            M("usr/lib/systemd", None, 0o755),
            M("usr/lib/systemd/systemd", ELF, 0o755),
            M("usr/sbin/init", sym="../lib/systemd/systemd"),
            M("usr/lib/systemd/system", None, 0o755),
            M("usr/lib/systemd/system/systemd-resolved.service", b"[Unit]\n"),
            M("etc/systemd", None, 0o755),
            M("etc/systemd/system", None, 0o755),
            M("etc/systemd/system/multi-user.target.wants", None, 0o755),
            M(
                "etc/systemd/system/multi-user.target.wants/systemd-resolved.service",
                sym="/usr/lib/systemd/system/systemd-resolved.service",
            ),
        ]
    return members + list(extra)


def build(tmp_path: Path, members: list[M], name: str = "out.wsl", sde: int = SDE) -> wsl.WslResult:
    return wsl.write_wsl(io.BytesIO(export_tar(members)), tmp_path / name, source_date_epoch=sde)


def read_members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def read_file(path: Path, name: str) -> bytes:
    with tarfile.open(path) as tar:
        fh = tar.extractfile(name)
        assert fh is not None
        return fh.read()


def errors(findings: list[wsl.RuleFinding]) -> list[str]:
    return [str(f) for f in findings if f.level == "error"]


def rules(findings: list[wsl.RuleFinding]) -> set[str]:
    return {f.rule for f in findings}


# ----------------------------------------------------------------------------- the normalizer


def test_good_rootfs_passes_microsoft_and_envbuilder_checks(tmp_path: Path) -> None:
    result = build(tmp_path, rootfs())
    assert wsl.check_wsl_tar(result.path, source_date_epoch=SDE) == []


def test_root_of_tar_is_filesystem_root(tmp_path: Path) -> None:
    members = [
        M("./" + m.name if i % 2 else "/" + m.name, m.data, m.mode, m.uid, m.gid, m.sym, m.hard)
        for i, m in enumerate(rootfs())
    ]
    names = list(read_members(build(tmp_path, [M("./", None, 0o755), *members]).path))
    assert "etc/passwd" in names
    assert not [n for n in names if n.startswith(("/", "./")) or n in (".", "")]


def test_entries_sorted_parents_first(tmp_path: Path) -> None:
    members = [*rootfs(), M("a-b", b"x"), M("a", None, 0o755), M("a/b", b"y")]
    names = list(read_members(build(tmp_path, list(reversed(members))).path))
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert names.index("a") < names.index("a/b") < names.index("a-b")


def test_mtimes_and_numeric_owners(tmp_path: Path) -> None:
    members = read_members(build(tmp_path, rootfs()).path)
    assert {m.mtime for m in members.values()} == {SDE}
    assert {(m.uname, m.gname) for m in members.values()} == {("", "")}
    assert (members["home/envbuilder"].uid, members["home/envbuilder"].gid) == (1000, 1000)


def test_resolv_conf_kernel_and_container_leftovers_dropped(tmp_path: Path) -> None:
    result = build(tmp_path, rootfs())
    names = set(read_members(result.path))
    for gone in (
        "etc/resolv.conf",
        "boot/vmlinuz-6.1.0-amd64",
        "boot/initrd.img-6.1.0-amd64",
        "vmlinuz",
        ".dockerenv",
        "dev/console",
        "etc/hostname",
        "etc/hosts",
        "var/log/dpkg.log",
        "var/cache/ldconfig/aux-cache",
    ):
        assert gone not in names, gone
        assert gone in result.stats.dropped
    assert {"boot", "dev", "var/log"} <= names  # the folders stay


def test_conf_files_root_0644_and_oobe_root_0755(tmp_path: Path) -> None:
    members = read_members(build(tmp_path, rootfs()).path)
    for conf in ("etc/wsl.conf", "etc/wsl-distribution.conf"):
        assert (members[conf].uid, members[conf].gid, members[conf].mode) == (0, 0, 0o644)
    oobe = members["usr/lib/wsl/oobe.sh"]
    assert (oobe.uid, oobe.gid, oobe.mode) == (0, 0, 0o755)


def test_conf_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    members = [m for m in rootfs() if m.name != "etc/wsl.conf"]
    with pytest.raises(BuildError, match=r"wsl\.conf"):
        build(tmp_path, [*members, M("etc/wsl.conf", sym="/tmp/elsewhere")])
    assert list(tmp_path.iterdir()) == []  # nothing written, no temp file left


def test_missing_oobe_command_is_refused(tmp_path: Path) -> None:
    members = [m for m in rootfs() if m.name != "usr/lib/wsl/oobe.sh"]
    with pytest.raises(BuildError, match=r"oobe\.command"):
        build(tmp_path, members)


def test_no_root_in_passwd_is_refused_and_nothing_written(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="root"):
        build(tmp_path, rootfs(passwd=b"toor:x:0:0::/root:/bin/sh\n"))
    assert not (tmp_path / "out.wsl").exists()
    assert list(tmp_path.iterdir()) == []


def test_shadow_has_no_password_hashes(tmp_path: Path) -> None:
    result = build(tmp_path, rootfs())
    lines = read_file(result.path, "etc/shadow").decode().splitlines()
    fields = {line.split(":")[0]: line.split(":") for line in lines}
    assert fields["root"][1] == "*"
    assert fields["daemon"][1] == "*"
    assert fields["envbuilder"][1] == "!"
    assert fields["nopass"][1] == "*"
    # the day of the last change is clamped to SOURCE_DATE_EPOCH's day (useradd writes today)
    assert fields["root"][2] == str(SDE // 86400)
    assert fields["daemon"][2] == "19000"
    assert not any(wsl.is_password_hash(f[1]) for f in fields.values())


def test_machine_id_emptied(tmp_path: Path) -> None:
    assert read_file(build(tmp_path, rootfs()).path, "etc/machine-id") == b""


def test_discouraged_units_masked_when_systemd_present(tmp_path: Path) -> None:
    members = read_members(build(tmp_path, rootfs()).path)
    assert "systemd-resolved.service" in wsl.discouraged_units()
    for unit in wsl.discouraged_units():
        mask = members[f"etc/systemd/system/{unit}"]
        assert mask.issym() and mask.linkname == "/dev/null"


def test_no_masks_without_systemd(tmp_path: Path) -> None:
    members = read_members(build(tmp_path, rootfs(systemd=False)).path)
    assert not [n for n in members if n.startswith("etc/systemd/system/")]


def test_hard_links_point_at_the_first_member_in_tar_order(tmp_path: Path) -> None:
    # The export has the data under "z/perl" first; sorted, "a/perl" comes first.
    extra = [
        M("z", None, 0o755),
        M("z/perl", b"PERL", 0o755),
        M("a", None, 0o755),
        M("a/perl", hard="z/perl"),
    ]
    result = build(tmp_path, rootfs(*extra))
    members = read_members(result.path)
    assert members["a/perl"].isfile() and members["a/perl"].size == 4
    assert members["z/perl"].islnk() and members["z/perl"].linkname == "a/perl"
    with tarfile.open(result.path) as tar:  # extractable: the link target precedes the link
        tar.extractall(tmp_path / "x", filter="tar")
    assert (tmp_path / "x/z/perl").read_bytes() == b"PERL"


def test_hard_link_to_dropped_file_is_dropped(tmp_path: Path) -> None:
    extra = [M("var/log/x.log", b"log"), M("var/log/y.log", hard="var/log/x.log")]
    names = set(read_members(build(tmp_path, rootfs(*extra)).path))
    assert "var/log/y.log" not in names


def test_pyc_timestamp_header_set_to_source_date_epoch(tmp_path: Path) -> None:
    head = b"\xa7\r\r\n" + (0).to_bytes(4, "little") + (1_765_123_456).to_bytes(4, "little")
    pyc = head + (42).to_bytes(4, "little") + b"code"
    hashed = b"\xa7\r\r\n" + (1).to_bytes(4, "little") + b"H" * 8 + b"code"
    extra = [
        M("opt", None, 0o755),
        M("opt/__pycache__", None, 0o755),
        M("opt/__pycache__/m.cpython-311.pyc", pyc),
        M("opt/__pycache__/h.cpython-311.pyc", hashed),
    ]
    result = build(tmp_path, rootfs(*extra))
    fixed = read_file(result.path, "opt/__pycache__/m.cpython-311.pyc")
    assert int.from_bytes(fixed[8:12], "little") == SDE
    assert fixed[12:] == pyc[12:]
    assert read_file(result.path, "opt/__pycache__/h.cpython-311.pyc") == hashed


def test_xattrs_kept_other_pax_records_dropped(tmp_path: Path) -> None:
    cap = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "atime": "1.5"}
    result = build(tmp_path, rootfs(M("usr/bin/ping", ELF, 0o755, xattrs=cap)))
    ping = read_members(result.path)["usr/bin/ping"]
    assert ping.pax_headers == {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}


def test_member_outside_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="outside its root"):
        build(tmp_path, rootfs(M("../escape", b"x")))


def test_not_a_tar_is_a_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError):
        wsl.write_wsl(
            io.BytesIO(b"this is not a tar" * 100), tmp_path / "x.wsl", source_date_epoch=SDE
        )
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- determinism


def test_same_content_same_sha256_whatever_order_and_mtimes(tmp_path: Path) -> None:
    first = rootfs()
    second = [
        M(m.name, m.data, m.mode, m.uid, m.gid, m.sym, m.hard, m.mtime + 12345, uname="")
        for m in reversed(rootfs())
    ]
    a = build(tmp_path, first, "a.wsl")
    b = build(tmp_path, second, "b.wsl")
    assert a.sha256 == b.sha256
    assert a.path.read_bytes() == b.path.read_bytes()


def test_other_source_date_epoch_other_sha256(tmp_path: Path) -> None:
    assert (
        build(tmp_path, rootfs(), "a.wsl").sha256
        != build(tmp_path, rootfs(), "b.wsl", sde=SDE + 1).sha256
    )


def test_sha256_is_the_files_sha256(tmp_path: Path) -> None:
    import hashlib

    result = build(tmp_path, rootfs())
    assert result.sha256 == hashlib.sha256(result.path.read_bytes()).hexdigest()
    assert result.size == result.path.stat().st_size


def test_gzip_header_has_no_name_and_mtime_zero(tmp_path: Path) -> None:
    path = build(tmp_path, rootfs()).path
    assert wsl.gzip_header_is_deterministic(path)
    head = path.read_bytes()[:10]
    assert head[3] & 0x08 == 0 and head[4:8] == b"\0\0\0\0"
    # and a plain `gzip file` (name, mtime in the header) is recognised as not deterministic
    plain = tmp_path / "plain.gz"
    with gzip.open(plain, "wb") as fh:
        fh.write(b"x")
    assert not wsl.gzip_header_is_deterministic(plain)


def test_iterstream_reassembles_chunks_and_reports_bytes() -> None:
    data = export_tar(rootfs())
    chunks = [data[i : i + 777] for i in range(0, len(data), 777)]
    seen: list[int] = []
    stream = wsl.IterStream(chunks, lambda _w, done, _t: seen.append(done))
    assert io.BufferedReader(stream).read() == data
    assert seen[-1] == len(data)


# ----------------------------------------------------------------------------- the checker


def plain_tar(tmp_path: Path, members: list[M], compress: bool = True) -> Path:
    """What a hand-made `docker export | gzip` gives: no normalization at all."""
    path = tmp_path / ("plain.tar.gz" if compress else "plain.tar")
    data = export_tar(members)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_checker_finds_each_broken_rule_in_an_unnormalized_tar(tmp_path: Path) -> None:
    members = [M("./" + m.name, m.data, m.mode, m.uid, m.gid, m.sym, m.hard) for m in rootfs()]
    found = rules(wsl.check_wsl_tar(plain_tar(tmp_path, members), source_date_epoch=SDE))
    assert {
        "root",
        "numeric-owner",
        "mtime",
        "resolv-conf",
        "kernel",
        "conf-owner",
        "shadow",
        "masked",
    } <= found  # envbuilder's promises
    assert {"mode", "owner", "systemd-unit"} <= found  # Microsoft's warnings
    assert "sorted" in rules(wsl.check_wsl_tar(plain_tar(tmp_path, list(reversed(rootfs())))))


def test_checker_microsoft_errors(tmp_path: Path) -> None:
    conf = (
        b"[oobe]\ncommand = /opt/setup.sh\ndefaultUid = 1001\n[shortcut]\nenabled = true\n"
        b"size = 3\n"
    )
    members = [m for m in rootfs() if m.name not in ("etc/wsl-distribution.conf", "usr/bin/dash")]
    members += [
        M("etc/wsl-distribution.conf", conf),
        M("opt", None, 0o755),
        M("opt/setup.sh", b"#!/bin/sh\n", 0o755),
        M("usr/bin/dash", b"#!not elf", 0o755),
    ]
    findings = wsl.check_wsl_tar(plain_tar(tmp_path, members, compress=False))
    by_rule = {f.rule: f for f in findings}
    assert by_rule["format"].level == "error"  # not gzip
    assert by_rule["distribution-conf-keys"].level == "error"
    # shortcut.enabled is a key the validator knows (since 2025); shortcut.size is not
    assert by_rule["distribution-conf-keys"].message.endswith("['shortcut.size']")
    assert by_rule["icon"].level == "warning"  # no shortcut.icon
    assert by_rule["oobe-location"].level == "warning"
    assert by_rule["default-uid"].level == "warning"
    assert by_rule["elf"].level == "error" and "/bin/sh" in by_rule["elf"].message


def test_checker_passwd_rules(tmp_path: Path) -> None:
    bad = b"toor:x:0:0::/root:/bin/sh\nbroken line\nx:x:5:5::/:/bin/sh\ny:x:5:5::/:/bin/sh\n"
    members = [m for m in rootfs() if m.name != "etc/passwd"] + [M("etc/passwd", bad)]
    messages = [
        f.message
        for f in wsl.check_wsl_tar(plain_tar(tmp_path, members))
        if f.rule in ("root", "passwd")
    ]
    assert any("not root" in m for m in messages)
    assert any("invalid" in m for m in messages)
    assert any("duplicated uid 5" in m for m in messages)


def replaced(name: str, data: bytes, *extra: M) -> list[M]:
    """rootfs() with member `name` holding `data` (root-owned, 0644), plus `extra`."""
    return [m for m in rootfs() if m.name != name] + [M(name, data), *extra]


def test_checker_warns_about_a_baked_default_user(tmp_path: Path) -> None:
    """What validate-modern.py says about the pre-modern layout: `[user] default` in wsl.conf,
    and a passwd entry already holding oobe.defaultUid."""
    members = replaced("etc/wsl.conf", WSL_CONF + b"\n[user]\ndefault = envbuilder\n")
    members = [m for m in members if m.name != "etc/passwd"] + [
        M("etc/passwd", PASSWD + BAKED_USER)
    ]
    findings = wsl.check_wsl_tar(build(tmp_path, members).path)
    assert {(f.level, f.rule) for f in findings} == {
        ("warning", "wsl-conf-discouraged"),
        ("warning", "default-user-exists"),
    }
    assert any("user.default=envbuilder" in f.message for f in findings)


def test_checker_wsl_conf_keys_are_the_validators(tmp_path: Path) -> None:
    conf = (
        b"[boot]\nsystemd = true\n[interop]\nappendWindowsPath = false\n"
        b"[network]\ngenerateResolvConf = true\n[automount]\nroot = /\n"
    )
    assert wsl.check_wsl_tar(build(tmp_path, replaced("etc/wsl.conf", conf)).path) == []
    bad = conf + b"[user]\nname = x\n[wsl2]\nmemory = 4GB\n"
    findings = wsl.check_wsl_tar(build(tmp_path, replaced("etc/wsl.conf", bad), "b.wsl").path)
    assert [(f.level, f.message) for f in findings if f.rule == "wsl-conf-keys"] == [
        ("error", "unexpected keys in /etc/wsl.conf: ['user.name', 'wsl2.memory']")
    ]


def test_checker_icon_and_terminal_profile_locations(tmp_path: Path) -> None:
    conf = (
        b"[oobe]\ncommand = /usr/lib/wsl/oobe.sh\ndefaultUid = 1000\n[shortcut]\n"
        b"icon = /opt/icon.ico\n[windowsterminal]\nprofileTemplate = /opt/t.json\n"
    )
    members = replaced(
        "etc/wsl-distribution.conf",
        conf,
        M("opt", None, 0o755),
        M("opt/icon.ico", b"x" * (1024 * 1024 + 1)),
        M("opt/t.json", b"{}", 0o640),
    )
    by_rule = {f.rule: f for f in wsl.check_wsl_tar(plain_tar(tmp_path, members))}
    assert by_rule["icon-location"].level == "warning"
    assert by_rule["terminal-profile-location"].level == "warning"
    assert by_rule["size"].level == "error" and "/opt/icon.ico" in by_rule["size"].message


def test_checker_enabled_units_as_the_validator_lists_them(tmp_path: Path) -> None:
    """Wanted from a unit folder and not pointing at /dev/null: enabled. A want that points
    at /dev/null, or a `.target.wants` folder outside the unit folders, is not."""
    wants = "usr/lib/systemd/system/sysinit.target.wants"
    extra = [
        M(wants, None, 0o755),
        M(f"{wants}/systemd-tmpfiles-setup.service", sym="../systemd-tmpfiles-setup.service"),
        M(f"{wants}/tmp.mount", sym="/dev/null"),
        M("opt", None, 0o755),
        M("opt/x.target.wants", None, 0o755),
        M("opt/x.target.wants/networking.service", b"[Unit]\n"),
    ]
    found = [
        f.message
        for f in wsl.check_wsl_tar(plain_tar(tmp_path, rootfs(*extra)))
        if f.rule == "systemd-unit"
    ]
    assert found == [
        "discouraged systemd unit enabled: "
        "/etc/systemd/system/multi-user.target.wants/systemd-resolved.service",
        f"discouraged systemd unit enabled: /{wants}/systemd-tmpfiles-setup.service",
    ]
    # normalized, every discouraged unit is masked: nothing is enabled any more
    assert "systemd-unit" not in rules(wsl.check_wsl_tar(build(tmp_path, rootfs(*extra)).path))


def test_checker_wsl1_xattrs_and_optional_bash(tmp_path: Path) -> None:
    selinux = {"SCHILY.xattr.security.selinux": "system_u:object_r:bin_t:s0"}
    members = [
        m for m in rootfs(M("usr/bin/ls", ELF, 0o755, xattrs=selinux)) if m.name != "usr/bin/bash"
    ]
    findings = wsl.check_wsl_tar(build(tmp_path, members).path)
    assert [(f.level, f.rule) for f in findings] == [("warning", "xattrs")]  # no bash: fine
    assert "security.selinux" in findings[0].message and "usr/bin/ls" in findings[0].message


def test_checker_takes_xz_tars(tmp_path: Path) -> None:
    import lzma

    tar = gzip.decompress(build(tmp_path, rootfs()).path.read_bytes())
    path = tmp_path / "x.wsl"
    path.write_bytes(lzma.compress(tar))
    assert wsl.check_wsl_tar(path) == []


def test_checker_follows_symlinked_parents(tmp_path: Path) -> None:
    # /bin -> usr/bin and /sbin/init -> ../lib/systemd/systemd (merged /usr, as in Debian 12)
    with tarfile.open(build(tmp_path, rootfs()).path) as tar:
        view = wsl.TarView(tar)
        bash, init = view.resolve("/bin/bash"), view.resolve("/sbin/init")
        sh = view.resolve("/bin/sh")
    assert bash is not None and bash.name == "usr/bin/bash"
    assert init is not None and init.name == "usr/lib/systemd/systemd"
    assert sh is not None and sh.name == "usr/bin/dash"


def test_is_x86_64_elf() -> None:
    assert wsl.is_x86_64_elf(ELF)
    assert not wsl.is_x86_64_elf(ELF[:18] + (183).to_bytes(2, "little") + ELF[20:])  # arm64
    assert not wsl.is_x86_64_elf(b"#!/bin/sh\n" + b"\0" * 60)


# ----------------------------------------------------------------------------- parallel gzip


@pytest.mark.parametrize(
    "size", [0, 1, wsl.ParallelGzipWriter.BLOCK, 3 * wsl.ParallelGzipWriter.BLOCK + 12345]
)
def test_parallel_gzip_round_trips_and_ignores_thread_count(size: int) -> None:
    import random

    rng = random.Random(size)
    # compressible but not trivial: words from a small vocabulary plus some noise
    words = [bytes(rng.choices(range(97, 123), k=rng.randint(2, 9))) for _ in range(500)]
    data = b" ".join(rng.choices(words, k=size // 5 + 1))[:size]
    outputs = []
    for threads in (1, 3):
        buf = io.BytesIO()
        writer = wsl.ParallelGzipWriter(buf, 6, threads)
        for i in range(0, len(data), 70_000):  # writes that straddle block borders
            writer.write(data[i : i + 70_000])
        writer.close()
        outputs.append(buf.getvalue())
    assert outputs[0] == outputs[1]
    assert gzip.decompress(outputs[0]) == data
    head = outputs[0][:10]
    assert head[:4] == b"\x1f\x8b\x08\x00" and head[4:8] == b"\0\0\0\0" and head[9] == 255

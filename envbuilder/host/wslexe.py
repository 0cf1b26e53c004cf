"""The thin Windows layer: the command lines envbuilder gives `wsl.exe`, and how it reads them.

Everything here is either a pure function (command lines, output parsing: unit-tested) or a
one-line subprocess call through `WslExe.runner` (the only part that needs Windows; it was NOT run
on a real Windows machine while this was written -- see docs/wsl2.md).

Facts this relies on (Microsoft's WSL docs and `wsl --help`):
  * `wsl --version` exists only in the Store WSL (the inbox one prints its help and fails);
    the modern `.wsl` format needs WSL 2.4.4+ (`wsl --install --from-file FILE --name NAME
    --location DIR`); older WSL installs the same tar with `wsl --import NAME DIR FILE`.
  * `wsl.exe` writes its own messages (`--version`, `--list`) as UTF-16LE unless WSL_UTF8=1;
    output of Linux commands it runs is passed through as bytes.
  * `--exec` runs the command without the default shell, so arguments reach Linux unchanged
    (`--` would hand one joined string to the user's shell, which re-parses quotes and spaces).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PureWindowsPath

from envbuilder.core.errors import EngineError, UsageError
from envbuilder.core.quoting import ps_quote

#: First WSL release that installs `.wsl` files (`wsl --install --from-file`).
MODERN_MIN = (2, 4, 4)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Completed:
    """What one wsl.exe call returned (raw bytes: decode with `decode_output`)."""

    returncode: int
    stdout: bytes
    stderr: bytes


#: Runs argv with optional stdin bytes and a timeout; returns the result. Replaced in tests.
Runner = Callable[[Sequence[str], bytes | None, float | None], Completed]


def subprocess_runner(argv: Sequence[str], stdin: bytes | None, timeout: float | None) -> Completed:
    """The real runner: a subprocess, output captured as bytes."""
    try:
        proc = subprocess.run(
            list(argv), input=stdin, capture_output=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc}; install WSL with `wsl --install`") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{' '.join(argv[:4])} ... did not finish in {timeout} s") from exc
    return Completed(proc.returncode, proc.stdout, proc.stderr)


# ----------------------------------------------------------------------------- parsing


def decode_output(data: bytes) -> str:
    """wsl.exe's own output as text: UTF-16LE (its default, with or without a BOM) or UTF-8
    (with WSL_UTF8=1). NULs and BOMs never reach the caller."""
    if data.startswith(b"\xff\xfe"):
        return data[2:].decode("utf-16-le", "replace")
    if len(data) >= 2 and data[1::2].count(0) >= max(1, len(data) // 4):
        return data[: len(data) // 2 * 2].decode("utf-16-le", "replace")
    return data.decode("utf-8", "replace").lstrip("\ufeff").replace("\x00", "")


def parse_version(text: str) -> tuple[int, ...] | None:
    """The WSL version from `wsl --version` (the first line with a version number, which is
    "WSL version: 2.4.4.0" in English and localized elsewhere); None when there is none."""
    for line in text.splitlines():
        match = _VERSION.search(line)
        if match:
            return tuple(int(g) for g in match.groups() if g is not None)
    return None


def parse_distro_list(text: str) -> list[str]:
    """Names from `wsl --list --quiet`, one a line (blank lines and the default marker dropped)."""
    names = []
    for line in text.splitlines():
        name = line.strip().lstrip("*").strip()
        if name:
            names.append(name)
    return names


def check_distro_name(name: str) -> str:
    """`name` if WSL accepts it as a distro name; UsageError saying what is allowed otherwise."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a valid WSL distro name: use letters, digits, '.', "
            "'-' and '_' (at most 64, starting with a letter or digit); set it in "
            "environments.toml [env.NAME.wsl2] distro"
        )
    return name


def is_modern(version: tuple[int, ...]) -> bool:
    """True when this WSL installs `.wsl` files directly (2.4.4 or later)."""
    return version[:3] >= MODERN_MIN


# ----------------------------------------------------------------------------- command lines


def version_cmd(exe: str) -> list[str]:
    return [exe, "--version"]


def list_cmd(exe: str) -> list[str]:
    return [exe, "--list", "--quiet"]


def install_cmd(exe: str, file: str, name: str, location: str) -> list[str]:
    """Modern install (WSL 2.4.4+); `--no-launch` so no interactive first start happens here."""
    return [
        exe,
        "--install",
        "--from-file",
        file,
        "--name",
        name,
        "--location",
        location,
        "--no-launch",
    ]


def import_cmd(exe: str, name: str, location: str, file: str) -> list[str]:
    """Install for WSL older than 2.4.4 (as a WSL 2 distro)."""
    return [exe, "--import", name, location, file, "--version", "2"]


def unregister_cmd(exe: str, name: str) -> list[str]:
    return [exe, "--unregister", name]


def run_cmd(exe: str, name: str, user: str, argv: Sequence[str]) -> list[str]:
    """Run argv in distro `name` as `user`, without a shell in between."""
    return [exe, "--distribution", name, "--user", user, "--exec", *argv]


def powershell_line(argv: Sequence[str]) -> str:
    """`argv` as one PowerShell line (the call operator, every word single-quoted), for
    `envbuilder run --print` on Windows."""
    return "& " + " ".join(ps_quote(word) for word in argv)


def put_file_argv(path: str) -> list[str]:
    """Linux argv that writes stdin to `path` (how files enter a distro: no path translation,
    no dependence on the automount root)."""
    return ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod 0644 "$1"', "sh", path]


def get_file_argv(path: str) -> list[str]:
    return ["cat", path]


# ----------------------------------------------------------------------------- the engine


def find_wsl_exe() -> str:
    """Path of wsl.exe; EngineError with the fix when this machine has none."""
    found = shutil.which("wsl.exe") or shutil.which("wsl")
    if found is None and os.name == "nt":
        system_root = os.environ.get("SYSTEMROOT", r"C:\Windows")
        candidate = PureWindowsPath(system_root, "System32", "wsl.exe")
        found = str(candidate) if os.path.exists(candidate) else None  # noqa: PTH110
    if found is None:
        raise EngineError(
            "wsl.exe was not found: this needs Windows 11 with WSL (run "
            "`wsl --install --no-distribution` in an admin PowerShell); on Linux, "
            "`envbuilder validate --target wsl2` tests the .wsl with Docker instead"
        )
    return found


@dataclass
class WslExe:
    """wsl.exe, called through `runner` (a subprocess; a recorder in tests)."""

    exe: str
    runner: Runner = subprocess_runner
    timeout: float | None = 1800.0

    def _call(self, argv: list[str], stdin: bytes | None = None) -> Completed:
        return self.runner(argv, stdin, self.timeout)

    def _fail(self, what: str, result: Completed) -> EngineError:
        detail = (decode_output(result.stderr) or decode_output(result.stdout)).strip()
        return EngineError(f"wsl.exe could not {what} (exit {result.returncode}): {detail}")

    def version(self) -> tuple[int, ...]:
        """The installed WSL version; EngineError when it is the inbox WSL (no `--version`)."""
        result = self._call(version_cmd(self.exe))
        version = parse_version(decode_output(result.stdout)) if result.returncode == 0 else None
        if version is None:
            raise EngineError(
                "this WSL does not report a version (the inbox WSL of old Windows "
                "builds); run `wsl --update` to get WSL 2.4.4 or later"
            )
        return version

    def distros(self) -> list[str]:
        """Registered distro names (`wsl --list --quiet`; none registered is an empty list)."""
        result = self._call(list_cmd(self.exe))
        text = decode_output(result.stdout)
        if result.returncode != 0:
            # With no distro at all, wsl.exe exits non-zero and says so; that is an empty list.
            return []
        return parse_distro_list(text)

    def install(
        self,
        file: str,
        name: str,
        location: str,
        *,
        replace: bool = False,
        allow_import: bool = True,
    ) -> str:
        """Register `file` as distro `name` stored in `location`. Returns "install" or "import"
        (the way used). EngineError when it exists (unless `replace`: unregistered first, its
        disk is deleted) or when WSL is too old and `allow_import` is False."""
        check_distro_name(name)
        version = self.version()
        modern = is_modern(version)
        if not modern and not allow_import:
            raise EngineError(
                f"WSL {'.'.join(map(str, version))} is older than 2.4.4 and cannot "
                "install .wsl files; run `wsl --update`"
            )
        existing = {d.lower() for d in self.distros()}
        if name.lower() in existing:
            if not replace:
                raise EngineError(
                    f"a WSL distro named {name!r} already exists; pass --replace "
                    "to unregister it first (its files are deleted) or choose "
                    "another name"
                )
            self._checked(unregister_cmd(self.exe, name), f"unregister {name}")
        if modern:
            self._checked(install_cmd(self.exe, file, name, location), f"install {file}")
            return "install"
        self._checked(import_cmd(self.exe, name, location, file), f"import {file}")
        return "import"

    def _checked(self, argv: list[str], what: str, stdin: bytes | None = None) -> Completed:
        result = self._call(argv, stdin)
        if result.returncode != 0:
            raise self._fail(what, result)
        return result

    def run(
        self, name: str, user: str, argv: Sequence[str], stdin: bytes | None = None
    ) -> Completed:
        """Run argv in the distro as `user`; the exit code is the command's."""
        return self._call(run_cmd(self.exe, name, user, argv), stdin)

    def put_file(self, name: str, path: str, data: bytes, user: str = "root") -> None:
        self._checked(
            run_cmd(self.exe, name, user, put_file_argv(path)),
            f"copy {path} into {name}",
            stdin=data,
        )

    def get_file(self, name: str, path: str, user: str = "root") -> bytes:
        return self._checked(
            run_cmd(self.exe, name, user, get_file_argv(path)), f"read {path} from {name}"
        ).stdout

"""`envbuilder init`: write a starter environments.toml for this host's GPU or for --gpu/--os."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from envbuilder.commands._options import add_json_argument, path_value
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.core.fsutil import default_mode, temp_dir, write_error
from envbuilder.core.project import SPEC_NAME, find_spec
from envbuilder.core.ui import UI
from envbuilder.spec.load import check_spec
from envbuilder.spec.starter import OSES, HostOS, Request, choose

if TYPE_CHECKING:
    from envbuilder.host.hostfacts import Host

HELP = "write a starter environments.toml for this host's GPU (or --gpu/--os); never overwrites"
DESCRIPTION = """\
Write a starter spec: one env for the GPU and OS, with the newest ROCm release, torch and Python
that the compatibility data (envbuilder/data/*.toml) says work together for them, the targets
that make sense there, and comments that cite the data's sources. Every candidate is held to
`envbuilder check`; the first that passes with no error and no warning is written (what the data
marks unverified is passed over), so the file passes `envbuilder check` with 0 warnings.

  from this host   doctor's detection: the OS (linux, wsl2 inside WSL, windows) and the AMD
                   GPU rocminfo (hipInfo on Windows) lists; none: a CPU env
  from flags       --gpu "RX 7900 XTX" (a marketing name or a gfx target; "cpu" for none)
                   and --os linux|wsl2|windows (default: this host's)

Targets: linux -> docker, native; wsl2 -> wsl2, docker (Docker inside WSL with /dev/dxg);
windows -> wsl2, windows. A target the data has no accepted combination for is left out (the
comment says so). Never overwrites: an existing file is refused (exit 1) and nothing written.
Prints the path written and the env's name on stdout. Warns when a folder above holds an
environments.toml that the new file now hides from commands run below it.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spec",
        type=path_value,
        default=Path(SPEC_NAME),
        metavar="PATH",
        help=f"the file to write (default: ./{SPEC_NAME}; refused if it exists)",
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help='the GPU: a marketing name ("RX 7900 XTX") or gfx target (gfx942); "cpu" for none '
        "(default: the one doctor finds on this host)",
    )
    parser.add_argument(
        "--os", choices=OSES, help="where the env runs (default: this host's OS, as doctor sees it)"
    )
    add_json_argument(parser, "what was written")


def run(args: argparse.Namespace, ui: UI) -> int:
    dest: Path = args.spec
    if dest.exists() or dest.is_symlink():
        raise EnvbuilderError(
            f"{dest} exists; init never overwrites: move it away or pass --spec PATH"
        )
    request = _request(args, dest)
    starter = choose(request, _findings)
    _write_new(dest, starter.text.encode("utf-8"))
    shadowed = shadowed_spec(dest)
    if shadowed is not None:
        ui.warn(
            f"{shadowed} is in a folder above; commands run in {dest.absolute().parent} or "
            f"below now find {dest} instead (pass --spec {shadowed} there to use the other)"
        )
    cand = starter.candidate
    ui.info(
        f"{dest}: env {cand.env}"
        + (f" (ROCm {cand.release.version}" if cand.release else " (CPU")
        + f", torch {cand.torch}, Python {cand.python}, targets {', '.join(cand.targets)})"
    )
    ui.print(f"{dest} {cand.env}")
    if args.json:
        ui.json(
            {
                "command": "init",
                "ok": True,
                "spec": str(dest),
                "env": cand.env,
                "rocm": cand.release.version if cand.release else None,
                "torch": cand.torch,
                "python": cand.python,
                "targets": list(cand.targets),
                "shadows": str(shadowed) if shadowed is not None else None,
            }
        )
    return 0


def shadowed_spec(dest: Path) -> Path | None:
    """The spec the commands found from `dest`'s folder before `dest` was there: the nearest
    one in a folder above it (None when there is none), which `dest` now hides from them."""
    folder = dest.absolute().parent
    if dest.name != SPEC_NAME or folder.parent == folder:
        return None  # another file name is only ever used through --spec: it hides nothing
    return find_spec(folder.parent)


def _request(args: argparse.Namespace, dest: Path) -> Request:
    """The GPU and OS from the flags, else from this host (doctor's detection)."""
    if args.gpu is not None and args.os is not None:
        return Request(None if args.gpu.lower() == "cpu" else args.gpu, args.os)
    from envbuilder.host.hostfacts import Host

    return host_request(Host.current(dest.absolute().parent), args.gpu, args.os)


def host_request(host: Host, gpu: str | None, os_name: HostOS | None) -> Request:
    """What init starts from on `host`: its OS (unless `os_name`) and the first AMD GPU
    doctor finds there (unless `gpu`); no AMD GPU: a CPU env."""
    from envbuilder.host.doctor import host_amd_gpus

    kind: HostOS = os_name or host.kind
    if gpu is not None:
        return Request(None if gpu.lower() == "cpu" else gpu, kind)
    gpus = host_amd_gpus(host)
    if not gpus:
        return Request(None, kind, f"{host.kind}, no AMD GPU found by doctor: a CPU env")
    gfx, name = gpus[0]
    return Request(gfx, kind, f"{host.kind}, {name or gfx} ({gfx}) found by doctor")


def _findings(text: str) -> list[str]:
    """What `envbuilder check` says of a spec with `text` (every finding, as one line)."""
    with temp_dir("envbuilder-init-") as tmp:
        path = tmp / SPEC_NAME
        path.write_text(text, encoding="utf-8")
        result = check_spec(path)
    return [f"{f.key}: {f.severity}: {f.message}" for f in result.findings]


def _write_new(dest: Path, data: bytes) -> None:
    """Write `dest`, which must not exist: a temp file beside it, then a hard link (which
    fails when the name was taken meanwhile), so nothing is ever replaced or half-written."""
    folder = dest.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; create it first")
    tmp: Path | None = None
    try:
        # mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW under an unpredictable name, so a link or file
        # planted beside the spec is never written through nor replaced
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{dest.name}.init-", suffix=".tmp")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.chmod(default_mode())
        os.link(tmp, dest)
    except FileExistsError:
        raise EnvbuilderError(f"{dest} exists; init never overwrites") from None
    except OSError as exc:
        raise write_error(dest, exc) from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)

"""What a container of an env gets on this host to reach its accelerator: one value, two spellings.

    detect_host_kind(root) -> HostKind        native-rocm, wsl2-rocdxg, wsl2-legacy, nvidia, cpu
    host_run_flags(host_kind) -> RunFlags     docker.toml's flags with the groups as host gids
    sdk_options(flags) -> dict                `containers.create` keyword arguments (validate)
    cli_arguments(flags) -> list[str]         `docker run` arguments (run, shell, --print,
                                              devcontainer.json's runArgs, the Slurm script)

`envbuilder validate` (through envbuilder.image.engine) and `envbuilder run`/`shell` both start
from `host_run_flags`, so the device nodes, groups, mounts and variables a user's own container
gets are exactly those the probe was validated with. Standard library and the compatibility
data only: `render` (devcontainer.json, the Slurm script) imports it without the docker SDK.
"""

from __future__ import annotations

import grp
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envbuilder.core.compat import HOST_KINDS, DeviceFlags, HostKind
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import UsageError

HOST_KIND_ENV = "ENVBUILDER_HOST_KIND"
#: What `envbuilder run` says when a `docker run` line (docker, and wsl2 on Linux) finds no
#: docker CLI on PATH (RunCommand.requires); --print still works without it.
DOCKER_CLI_REQUIRED = (
    "the docker command-line client is not on PATH: `envbuilder run` hands the terminal to "
    "`docker run`; install the Docker CLI (Debian/Ubuntu: docker.io or docker-ce-cli) or use "
    "--print and run the line where docker is"
)

#: A group name -> its gid on this host, None when the host has no such group.
GroupLookup = Callable[[str], "int | None"]


def detect_host_kind(root: Path = Path("/")) -> HostKind:
    """What accelerator this host can hand to a container: $ENVBUILDER_HOST_KIND if set, else
    /dev/kfd -> native-rocm, /dev/dxg -> wsl2-rocdxg (librocdxg installed) or wsl2-legacy,
    an NVIDIA device or nvidia-smi -> nvidia, else cpu. `root` is where the host's `/` is (a
    folder holding a fake dev/ tree in tests)."""
    forced = os.environ.get(HOST_KIND_ENV)
    if forced:
        if forced not in HOST_KINDS:
            raise UsageError(f"{HOST_KIND_ENV}={forced!r}: choose one of {', '.join(HOST_KINDS)}")
        return forced
    if (root / "dev/kfd").exists():
        return "native-rocm"
    if (root / "dev/dxg").exists():
        return "wsl2-rocdxg" if (root / "opt/rocm/lib/librocdxg.so").exists() else "wsl2-legacy"
    if (root / "dev/nvidia0").exists() or (root == Path("/") and shutil.which("nvidia-smi")):
        return "nvidia"
    return "cpu"


def system_gid(name: str) -> int | None:
    """The gid of the host's group `name` (through NSS, as `id` sees it), None without one."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def group_file_lookup(path: Path) -> GroupLookup:
    """A GroupLookup reading an /etc/group file (a fake host's, in tests)."""
    gids: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            gids.setdefault(fields[0], int(fields[2]))
    return gids.get


def host_group_ids(names: Iterable[str], lookup: GroupLookup = system_gid) -> list[int]:
    """The numeric gids of the host's groups `names` (skipping groups the host lacks), sorted.

    Numbers, not names: the image's /etc/group does not know the host's `render` group, and the
    device files are owned by the host's gid."""
    return sorted({gid for name in names if (gid := lookup(name)) is not None})


@dataclass(frozen=True)
class RunFlags:
    """docker.toml's flags for one host kind, with its groups resolved to this host's gids."""

    host_kind: HostKind
    devices: tuple[str, ...] = ()
    volumes: tuple[tuple[str, str], ...] = ()  # (host path, container path), read-only
    environment: tuple[tuple[str, str], ...] = ()  # sorted by name
    group_ids: tuple[int, ...] = ()
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ipc_mode: str | None = None
    shm_size: str | None = None
    gpu_request: bool = False


def resolve_flags(flags: DeviceFlags, lookup: GroupLookup | None = system_gid) -> RunFlags:
    """`flags` with the group names as gids (`lookup` None: no groups, for a script that
    resolves them where it runs)."""
    gids = host_group_ids(flags.group_add, lookup) if lookup is not None else []
    return RunFlags(
        host_kind=flags.host_kind,
        devices=tuple(flags.devices),
        volumes=tuple(flags.volumes),
        environment=tuple(sorted(flags.environment.items())),
        group_ids=tuple(gids),
        security_opt=tuple(flags.security_opt),
        cap_add=tuple(flags.cap_add),
        ipc_mode=flags.ipc_mode,
        shm_size=flags.shm_size,
        gpu_request=flags.gpu_request,
    )


def host_run_flags(
    host_kind: HostKind, lookup: GroupLookup = system_gid, root: Path = Path("/")
) -> RunFlags:
    """What a container gets on a `host_kind` host (envbuilder/data/docker.toml), plus on a
    rocdxg WSL host librocdxg's device-id table when the host has one (`root`: where the host's
    `/` is)."""
    flags = resolve_flags(load_compat().device_flags(host_kind), lookup)
    if host_kind == "wsl2-rocdxg":
        flags = replace(flags, volumes=flags.volumes + rocdxg_volumes(root))
    return flags


def rocdxg_volumes(root: Path) -> tuple[tuple[str, str], ...]:
    """librocdxg's device-id table (wsl.toml [dxg]) as a (host, container) mount, when the host
    has one (librocdxg >= 1.2.1). Never mounted otherwise: Docker would create a missing bind
    source as a folder on the host."""
    dxg = load_compat().dxg
    if dxg is None:
        return ()
    host = root / dxg.dids_conf_host.lstrip("/")
    return ((str(host), dxg.dids_conf_container),) if host.is_file() else ()


def sdk_options(flags: RunFlags) -> dict[str, Any]:
    """`containers.create` keyword arguments of `flags` (the docker SDK's names); a GPU
    request is ("gpu_request", True): the caller makes the SDK's DeviceRequest."""
    options: dict[str, Any] = {}
    if flags.devices:
        options["devices"] = [f"{dev}:{dev}:rwm" for dev in flags.devices]
    if flags.volumes:
        options["volumes"] = {host: {"bind": inner, "mode": "ro"} for host, inner in flags.volumes}
    if flags.environment:
        options["environment"] = dict(flags.environment)
    if flags.group_ids:
        options["group_add"] = [str(gid) for gid in flags.group_ids]
    if flags.security_opt:
        options["security_opt"] = list(flags.security_opt)
    if flags.cap_add:
        options["cap_add"] = list(flags.cap_add)
    if flags.ipc_mode:
        options["ipc_mode"] = flags.ipc_mode
    if flags.shm_size:
        options["shm_size"] = flags.shm_size
    if flags.gpu_request:
        options["gpu_request"] = True
    return options


def cli_arguments(flags: RunFlags) -> list[str]:
    """`flags` as `docker run` arguments, meaning what sdk_options means: devices rwm, volumes
    read-only, the groups by gid."""
    args = [f"--device={device}" for device in flags.devices]
    args += [f"--volume={host}:{inner}:ro" for host, inner in flags.volumes]
    args += [f"--env={key}={value}" for key, value in flags.environment]
    args += [f"--group-add={gid}" for gid in flags.group_ids]
    args += [f"--security-opt={opt}" for opt in flags.security_opt]
    args += [f"--cap-add={cap}" for cap in flags.cap_add]
    if flags.ipc_mode:
        args.append(f"--ipc={flags.ipc_mode}")
    if flags.shm_size:
        args.append(f"--shm-size={flags.shm_size}")
    if flags.gpu_request:
        args.append("--gpus=all")
    return args


#: Where `run --workspace` mounts the folder in an image target's container.
WORKSPACE = "/workspace"


def docker_run_argv(
    image: str,
    command: Iterable[str],
    *,
    user: str,
    flags: RunFlags,
    tty: bool,
    workspace: Path | None = None,
    labels: Iterable[tuple[str, str]] = (),
) -> list[str]:
    """`docker run` of `command` in a fresh, removed-afterwards container of `image`, as `user`,
    with `flags`; stdin attached (and a terminal when `tty`); `workspace` mounted read-write at
    /workspace and made the working folder."""
    argv = ["docker", "run", "--rm", "--interactive"]
    if tty:
        argv.append("--tty")
    argv.append(f"--user={user}")
    argv += [f"--label={key}={value}" for key, value in labels]
    argv += cli_arguments(flags)
    if workspace is not None:
        argv += [f"--volume={workspace}:{WORKSPACE}", f"--workdir={WORKSPACE}"]
    return [*argv, image, *command]

"""`envbuilder validate`: run the probe inside each selected env's built artifact."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from envbuilder.builders.lookup import builder_for
from envbuilder.commands import _slurm
from envbuilder.commands._options import path_value
from envbuilder.commands._targets import (
    EnvFailure,
    add_selection_arguments,
    each_env,
    failure_exit_code,
    path_option,
    progress_for,
    selected,
)
from envbuilder.core.errors import UsageError, ValidationError
from envbuilder.core.model import EnvSpec
from envbuilder.core.ui import UI
from envbuilder.image.repro import image_report
from envbuilder.targets import registry
from envbuilder.targets.base import ValidateOptions

HELP = "run the validation probe inside built envs; writes reports/<env>.<target>.json"
DESCRIPTION = """\
Run the same probe (envbuilder.probe) inside each selected env's artifact, against the env's
pylock, and write reports/<env>.<target>.json:

  docker    a fresh container of envbuilder/<env>:<short lock hash>, as uid 1000, with this host's
            device flags (ROCm: /dev/kfd, /dev/dri and the render/video gids; WSL2: /dev/dxg and
            the ROCm library mounts; NVIDIA: all GPUs; otherwise none). The container is removed
            afterwards, also on failure and Ctrl-C. ENVBUILDER_HOST_KIND overrides the detection
            (native-rocm, wsl2-legacy, wsl2-rocdxg, nvidia, cpu), e.g. for a remote DOCKER_HOST.
  wsl2      dist/<env>.wsl (its sha256 must match the lock): on Windows, in the distro that
            `build` installed (wsl --distribution NAME --user USER --exec ...); on Linux, the tar
            imported into Docker (docker import) and run as that same user (uid 1000) through a
            login shell
  native    the venv's Python (--path DIR as for build)
  windows   the venv's Scripts\\python.exe (on Windows only)

Prints one line per report on stdout: <env> <target> pass|fail <report path>. For docker and
wsl2 it also says (stderr) whether the image (the `.wsl`) at hand is the one the lock predicts
(docs/reproducibility.md).
Exit 0 when every probe passed, 1 when any failed. An env whose probe cannot run (no artifact,
another lock's) is said on stderr, `error: <env>/<target>: ...`, and the next env is still
validated; the exit code is then non-zero (docs/cli.md). Ctrl-C stops the whole run.

With --slurm (a target that runs on a cluster: docker, native; one env): on every node of a
Slurm job instead. One line for the job (<env> <target> job-<id> <Slurm state> <job folder>),
one per node (<env> <target> <node> pass|fail|no-report <report>|-), one for the collectives
across nodes (<env> <target> all-nodes pass|fail|not-run <rank 0 report>|-), then the fleet
table; see the options below and docs/cluster.md.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser, default_target=None)
    _add_probe_arguments(parser)
    parser.add_argument(
        "--path",
        type=path_value,
        metavar="DIR",
        help="venv targets (native, windows): the venv to validate",
    )
    _slurm.add_arguments(parser)  # issue 16


def _add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """What the probe runs, and how long it may take."""
    parser.add_argument(
        "--level",
        choices=("quick", "standard", "long", "workload"),
        default="quick",
        help="how much the probe runs (default: quick; workload: standard, and ResNet-50 "
        "trained at 224x224 for a stable images/s)",
    )
    parser.add_argument(
        "--find-batch",
        action="store_true",
        help="the probe also finds the largest power-of-two ResNet-50 batch that trains on the GPU",
    )
    parser.add_argument(
        "--expect",
        choices=("rocm", "cuda", "cpu"),
        help="accelerator the probe must find (default: the env's; a ROCm env's run also "
        "checks the locked release, its HIP version and the GPU targets: docs/probe.md)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="repeat each timed check N times (default: 1)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CHECK",
        help="run only this check (repeatable)",
    )
    parser.add_argument(
        "--skip", action="append", default=[], metavar="CHECK", help="skip this check (repeatable)"
    )
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="give up on a probe after this long"
    )
    parser.add_argument(
        "--allow-other-lock",
        action="store_true",
        help="validate an artifact that is not the current lock's (a venv whose marker, an "
        "image whose label or a .wsl whose sha256 names another), which is refused otherwise; "
        "the report records it (other_lock)",
    )


def validate_options(args: argparse.Namespace) -> ValidateOptions:
    """The typed options of a validation; UsageError (before any work) for a bad value or an
    option the target lacks the capability for."""
    if args.repeat < 1:
        raise UsageError(f"--repeat must be at least 1, not {args.repeat}")
    return ValidateOptions(
        level=args.level,
        expect=args.expect,
        repeat=args.repeat,
        only=tuple(args.only),
        skip=tuple(args.skip),
        timeout_s=args.timeout,
        path=path_option(args, one_env=False),
        allow_other_lock=args.allow_other_lock,
        find_batch=args.find_batch,
    )


def report_status(report: Path) -> str:
    """The `status` of a probe report ("pass"/"fail"); ValidationError if it is unreadable."""
    try:
        status = json.loads(report.read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValidationError(f"{report}: not a probe report ({exc})") from None
    return str(status)


def run(args: argparse.Namespace, ui: UI) -> int:
    options = validate_options(args)
    if _slurm.requested(args):  # issue 16: on a Slurm cluster (envbuilder.slurm)
        return _slurm.run(args, ui, options)
    project, envs = selected(args)
    builder = builder_for(registry.get(args.target))

    def one(env: EnvSpec) -> dict[str, str]:
        with progress_for(ui) as progress:
            report = builder.validate(project, env, options, progress)
        status = report_status(report)
        for ok, line in image_report(builder, project, env):
            (ui.info if ok else ui.warn)(line)
        ui.print(f"{env.name} {args.target} {status} {report}")
        return {"env": env.name, "target": args.target, "status": status, "report": str(report)}

    results = each_env(envs, args.target, ui, one)
    failed = any(isinstance(r, EnvFailure) or r["status"] != "pass" for r in results)
    if args.json:
        reports = [r.as_json(status="error") if isinstance(r, EnvFailure) else r for r in results]
        ui.json(
            {"command": "validate", "ok": not failed, "target": args.target, "reports": reports}
        )
    return failure_exit_code(results, findings=failed)

"""The `--slurm` part of `envbuilder validate`: its options, and printing a cluster run.

    add_arguments(parser)                      the option group
    requested(args) -> bool                    --slurm given (UsageError: its options without it,
                                               or a target without the `cluster` capability)
    run(args, ui, options) -> exit code        validate on the cluster, print, 0 / 1

Private (leading underscore): the CLI does not discover it as a command.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from envbuilder.commands._options import path_value
from envbuilder.commands._targets import progress_for, require, selected
from envbuilder.core.errors import UsageError
from envbuilder.core.ui import UI
from envbuilder.report import fleet, fleet_output
from envbuilder.slurm.run import SlurmOutcome, SlurmRequest, validate_on_slurm
from envbuilder.slurm.script import IMAGE_RUNTIMES
from envbuilder.spec.load import load_spec
from envbuilder.targets.base import ValidateOptions

#: dest -> option, for the options that mean something only with --slurm
_SLURM_ONLY = {
    "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node",
    "partition": "--partition",
    "time": "--time",
    "sbatch_args": "--sbatch-arg",
    "runtime": "--runtime",
    "run_dir": "--run-dir",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "on a Slurm cluster (--slurm; docs/cluster.md)",
        "Submit slurm/<env>/validate.sbatch with sbatch: the probe on every node (one report "
        "per node), then its collectives check under torchrun across all nodes; a fleet report "
        "(fleet.json, fleet.md, fleet.html) in RUN_DIR/job-<id>/. --timeout is envbuilder's "
        "deadline for the whole job, pending included: the job is cancelled (scancel) then, "
        "and on Ctrl-C. Exit 1 names each failed node.",
    )
    group.add_argument(
        "--slurm",
        action="store_true",
        help="validate on every node of a Slurm job (docker: the image, pinned "
        "by digest; native: the venv, on a shared file system)",
    )
    _add_allocation_arguments(group)
    _add_run_arguments(group)


def _add_allocation_arguments(group: argparse._ArgumentGroup) -> None:
    """What the job asks sbatch for."""
    group.add_argument(
        "--nodes",
        type=int,
        default=None,
        metavar="N",
        help="nodes to allocate (sbatch --nodes; default 2)",
    )
    group.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="G",
        help="sbatch --gpus-per-node, and torchrun's ranks per node (default: "
        "every GPU torch sees; 2 gloo ranks on CPU envs)",
    )
    group.add_argument("--partition", metavar="P", help="sbatch --partition")
    group.add_argument(
        "--time", metavar="T", help="the job's time limit (sbatch --time; default 30 minutes)"
    )
    group.add_argument(
        "--sbatch-arg",
        dest="sbatch_args",
        action="append",
        default=[],
        metavar="ARG",
        help="one more sbatch option, as is (repeatable), e.g. --sbatch-arg=--account=proj",
    )


def _add_run_arguments(group: argparse._ArgumentGroup) -> None:
    """How the nodes run the env, and where they write."""
    group.add_argument(
        "--runtime",
        choices=IMAGE_RUNTIMES,
        help="how nodes run the image: docker (default), pyxis (srun "
        "--container-image) or apptainer",
    )
    group.add_argument(
        "--run-dir",
        type=path_value,
        metavar="DIR",
        help="a folder every node sees, for the probe and the results (default: "
        "reports/slurm/<env>.<target>/ beside the spec)",
    )


def requested(args: argparse.Namespace) -> bool:
    """Whether --slurm was given; UsageError when one of its options was given without it, or
    when the target lacks the registry's `cluster` capability."""
    if args.slurm:
        require(
            args.target,
            "cluster",
            "target {target} runs on no cluster; --slurm applies to {have_and}",
        )
        return True
    given = [flag for dest, flag in _SLURM_ONLY.items() if getattr(args, dest) not in (None, [])]
    if given:
        raise UsageError(f"{given[0]} applies to a cluster run; add --slurm")
    return False


def _word(status: str) -> str:
    """A fleet status as one word for the result lines ("no report" -> "no-report")."""
    return status.replace(" ", "-")


def fleet_table(result: fleet.Fleet) -> Table:
    """The fleet report as a rich table: one row per node, failed ones in red."""
    table = Table(title=Text(fleet_output.summary_line(result)))
    for name in fleet_output.TABLE_HEADER:
        table.add_column(Text(name))
    for row, node in zip(fleet_output.table_rows(result), result.nodes, strict=True):
        style = "red" if node.failed else ""
        table.add_row(*(Text(cell, style=style) for cell in row))
    return table


def run(args: argparse.Namespace, ui: UI, options: ValidateOptions) -> int:
    """Validate each selected env on the cluster; print per node and the fleet table."""
    project, envs = selected(args)
    if len(envs) != 1:
        raise UsageError("--slurm validates one env per job; name it with --env")
    spec = load_spec(project.spec_path)
    request = _request(args, options)
    env = envs[0]
    with progress_for(ui) as progress:
        outcome = validate_on_slurm(project, spec, env, args.target, options, request, progress)
    result = outcome.fleet
    _print_outcome(env.name, args.target, outcome, ui)
    failures = [] if result.ok else result.failures()
    for line in failures:
        ui.error(line)
    if args.json:
        ui.json(_json_result(env.name, args.target, outcome, failures))
    return 0 if result.ok else 1


def _request(args: argparse.Namespace, options: ValidateOptions) -> SlurmRequest:
    return SlurmRequest(
        nodes=2 if args.nodes is None else args.nodes,
        gpus_per_node=args.gpus_per_node,
        partition=args.partition,
        time=args.time,
        sbatch_args=tuple(args.sbatch_args),
        runtime=args.runtime,
        run_dir=args.run_dir,
        timeout_s=options.timeout_s,
    )


def _print_outcome(env: str, target: str, outcome: SlurmOutcome, ui: UI) -> None:
    result = outcome.fleet
    # Five words a line, as plain validate's (<env> <target> <what> <status> <path>): the job
    # first, so that a script finds the job folder even when no node wrote a report.
    ui.print(f"{env} {target} job-{outcome.job.job_id} {outcome.job.state} {outcome.job_dir}")
    for node in result.nodes:
        ui.print(f"{env} {target} {node.node} {_word(node.status)} {node.report or '-'}")
    cross = result.job_dir / "collectives" / "all.json"
    ui.print(
        f"{env} {target} all-nodes {_word(result.cross.status)} {cross if cross.is_file() else '-'}"
    )
    ui.table(fleet_table(result))
    for path in outcome.files.values():
        ui.info(f"fleet report: {path}")


def _json_result(
    env: str, target: str, outcome: SlurmOutcome, failures: list[str]
) -> dict[str, Any]:
    """validate --slurm --json (envbuilder/data/schemas/cli.schema.json, docs/cli.md)."""
    result = outcome.fleet
    cross = result.job_dir / "collectives" / "all.json"
    reports = [
        {"env": env, "target": target, "status": n.status, "report": str(n.report)}
        for n in result.nodes
        if n.report is not None and n.status in ("pass", "fail")
    ]
    return {
        "command": "validate",
        "ok": result.ok,
        "target": target,
        "reports": reports,
        "slurm": {
            "job_id": outcome.job.job_id,
            "state": outcome.job.state,
            "job_dir": str(outcome.job_dir),
            "nodes": [
                {
                    "node": n.node,
                    "status": n.status,
                    "report": str(n.report) if n.report is not None else None,
                }
                for n in result.nodes
            ],
            "all_nodes": {
                "status": result.cross.status,
                "report": str(cross) if cross.is_file() else None,
            },
            "fleet": {kind: str(path) for kind, path in outcome.files.items()},
            "failures": failures,
        },
    }

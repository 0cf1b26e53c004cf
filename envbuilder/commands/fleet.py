"""`envbuilder fleet`: the fleet report of one cluster validation job (docs/cluster.md)."""

from __future__ import annotations

import argparse

from envbuilder.commands._options import path_value
from envbuilder.commands._slurm import fleet_table
from envbuilder.core.ui import UI
from envbuilder.report import comparison, fleet, fleet_output

HELP = "the fleet report of a cluster validation: one row per node, outliers, collectives"
DESCRIPTION = f"""\
Read the folder a Slurm validation job wrote (RUN_DIR/job-<id>/, by `envbuilder validate --slurm`
or by `sbatch slurm/<env>/validate.sbatch` without envbuilder) and print its fleet report: one
row per node (failed nodes first: the checks that failed, or why there is no report), outliers
flagged by the noise rule of `envbuilder compare`, the collectives across all nodes against one
node. Nothing in the folder is changed unless --out names it.

A node is an outlier for a matmul or single-node busbw metric when, compared with the pooled
samples of all other nodes: {comparison.noise_rule_text(comparison.DEFAULT_NOISE_FLOOR_PCT)}
Judged with 3 or more nodes; two nodes that differ are a note (neither is singled out).

Exit 0 when every node and the collectives across nodes passed, 1 otherwise."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job_dir",
        type=path_value,
        metavar="JOB_DIR",
        help="the job's folder, e.g. reports/slurm/cpu.docker/job-12",
    )
    parser.add_argument(
        "--format",
        choices=("table", "markdown", "json"),
        default="table",
        help="what to print (default: table)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the fleet report as one JSON object on stdout (as --format "
        "json; messages go to stderr)",
    )
    parser.add_argument(
        "--out",
        type=path_value,
        metavar="DIR",
        help="also write fleet.json, fleet.md and fleet.html into DIR",
    )
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=comparison.DEFAULT_NOISE_FLOOR_PCT,
        metavar="PCT",
        help="smallest difference in %% that can count "
        f"(default {comparison.DEFAULT_NOISE_FLOOR_PCT:g})",
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    result = fleet.read_job_dir(args.job_dir, noise_floor_pct=args.noise_floor)
    if args.json:
        ui.json_text(fleet_output.dumps_json(result))
    elif args.format == "json":
        ui.out.print(fleet_output.dumps_json(result), end="", markup=False, highlight=False)
    elif args.format == "markdown":
        ui.out.print(fleet_output.to_markdown(result), end="", markup=False, highlight=False)
    else:
        ui.table(fleet_table(result))
        for note in result.notes:
            ui.info(f"note: {note}")
    if args.out is not None:
        for path in fleet_output.write_reports(result, args.out).values():
            ui.info(f"wrote {path}")
    if result.ok:
        return 0
    for line in result.failures():
        ui.error(line)
    return 1

"""`envbuilder doctor`: host preflight with a fix for every problem."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from envbuilder.commands._options import add_common_arguments
from envbuilder.core.ui import UI
from envbuilder.host import doctor, hostfacts

HELP = "check this host (OS, RAM, disk, Docker, GPU devices, drivers, WSL, Python) for an env"
DESCRIPTION = """\
Host preflight. Linux: OS and kernel, RAM, free disk, the Docker engine, /dev/kfd and /dev/dri
with your groups, rocminfo's gfx targets, nvidia-smi. Inside WSL2: /dev/dxg, libdxcore.so and the
ROCm WSL runtime for the release. Windows: build 22621+, virtualization, wsl --version, HIP_PATH,
hipInfo. With --env NAME: whether this host can run that env (GPU supported by its target and
release, Python). Read-only: it never changes GPU settings, groups or drivers.

Exit 0 when nothing failed (warnings allowed), 1 when a check failed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--env", metavar="NAME", help="check the host against this env's needs")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON "
        "object on stdout (schema: envbuilder/data/schemas/doctor.schema.json)",
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    env = None
    root = Path.cwd()
    if args.env:
        from envbuilder.spec.load import load_spec

        env = load_spec(args.spec).env(args.env)
        root = Path(args.spec).resolve().parent
    report = doctor.diagnose(hostfacts.Host.current(root), env)
    if args.json:
        ui.json(report.to_json())
    else:
        _print(report, ui)
    return 1 if report.status == "fail" else 0


def _print(report: hostfacts.DoctorReport, ui: UI) -> None:
    title = f"envbuilder doctor ({report.host_kind}" + (
        f", env {report.env})" if report.env else ")"
    )
    table = Table(title=title)
    for name in ("", "check", "finding", "fix"):
        table.add_column(name, overflow="fold")
    marks = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red")}
    for f in report.findings:
        mark, style = marks[f.severity]
        table.add_row(
            mark, f.check, f.summary, f.fix or "", style=style if f.severity != "ok" else None
        )
    ui.table(table)
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in ("ok", "warn", "fail")}
    ui.print(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed")

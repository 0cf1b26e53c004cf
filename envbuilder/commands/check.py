"""`envbuilder check`: hold environments.toml against the compatibility data."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from envbuilder.commands._options import add_common_arguments, add_json_argument
from envbuilder.core.compat import INSTALL_MODEL_LABELS
from envbuilder.core.errors import UsageError
from envbuilder.core.model import Spec
from envbuilder.core.ui import UI
from envbuilder.spec.load import check_spec

HELP = "check environments.toml: errors exit 1, warnings are printed"
DESCRIPTION = """\
Read the spec, merge [defaults] into each [env.NAME] and check every value: TOML syntax, unknown
keys, types, PEP 508 requirements, torch vs wheel index vs Python, GPU vs target (WSL, Windows),
ROCm release vs WSL runtime and Ubuntu release, HSA_OVERRIDE_GFX_VERSION, RCCL/NCCL settings,
names that must be Docker/WSL names, and anything that could become code in a generated file.

One line per finding, on stdout:
    FILE: KEY: error|warning: what is wrong; what would be right
(--json: {"command": "check", "ok": bool, "envs": [...], "findings": [{"severity", "file",
"key", "message"}], "install_models": [{"env", "rocm", "install_model", "label"}]}).
Then, on stderr, one line per ROCm env naming the install model its release resolves to
("rocm714: ROCm 7.14.1 installs through the pip SDK (...)"; docs/rocm.md).
Exit 0 when there are no errors (warnings allowed), 1 when there is any error. Writes nothing.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="report only findings for this env (repeatable); file-wide findings always show",
    )
    add_json_argument(parser, "the findings")


def run(args: argparse.Namespace, ui: UI) -> int:
    result = check_spec(args.spec)
    findings = list(result.findings)
    if args.env:
        # Names come from the file as written, so an unknown --env is a usage error (exit 2)
        # even when the spec has errors, instead of filtering every finding away.
        for name in args.env:
            if result.spec is not None:
                result.spec.env(name)  # UsageError with a did-you-mean
            elif result.env_names and name not in result.env_names:
                raise UsageError(
                    f"{args.spec}: no environment {name!r}; known: {', '.join(result.env_names)}"
                )
        findings = [
            f for f in findings if not f.key.startswith("env.") or f.key.split(".")[1] in args.env
        ]
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    models = install_models(result.spec, args.env) if result.spec else []
    if args.json:
        ui.json(
            _json_result(
                list(result.spec.envs) if result.spec else [],
                [dataclasses.asdict(f) for f in findings],
                ok=not errors,
                models=models,
            )
        )
    else:
        for finding in findings:
            ui.print(str(finding))
    for m in models:
        driver = f"; the host needs {m['host_driver']}" if "host_driver" in m else ""
        ui.info(f"{m['env']}: ROCm {m['rocm']} installs through {m['label']}{driver}")
    if errors:
        ui.info(f"{args.spec}: {errors} error(s), {warnings} warning(s)")
        return 1
    envs = ", ".join(result.spec.envs) if result.spec else ""
    ui.info(f"{args.spec}: ok ({envs}); {warnings} warning(s)")
    return 0


def install_models(spec: Spec, only: list[str]) -> list[dict[str, str]]:
    """Each ROCm env's release and the install model envbuilder uses for it (the release's first
    `install` in envbuilder/data/rocm.toml); a release the data does not know is a finding
    already and is left out here. `only`: the --env filter (empty: every env)."""
    out: list[dict[str, str]] = []
    for name, env in spec.envs.items():
        if (only and name not in only) or env.accelerator != "rocm" or not env.rocm:
            continue
        release = env.release
        if release is None:
            continue
        model = {
            "env": name,
            "rocm": release.version,
            "install_model": release.install_model,
            "label": INSTALL_MODEL_LABELS[release.install_model],
        }
        if release.host_driver:
            model["host_driver"] = release.host_driver
        out.append(model)
    return out


def _json_result(
    envs: list[str], findings: list[dict[str, Any]], ok: bool, models: list[dict[str, str]]
) -> dict[str, Any]:
    """The --json object (docs/cli.md)."""
    return {
        "command": "check",
        "ok": ok,
        "envs": envs,
        "findings": findings,
        "install_models": models,
    }

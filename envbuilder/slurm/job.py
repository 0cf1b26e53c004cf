"""Slurm's client commands, as values: submit, poll, cancel.

    submit(script, sbatch_args, env, cwd) -> job id         sbatch --parsable
    poll(job_id, env) -> JobState                            squeue while queued, then
                                                             scontrol show job / sacct
    cancel(job_id, env, wait_s) -> JobState                  scancel, then until it is over
    scancel(job_id, env)                                     scancel only
    expand_nodes(node_list, env) -> [node]                   scontrol show hostnames
    require_commands(env)                                    the commands above are on PATH
    printable(text)                                          control characters as '?'

Every command runs through envbuilder.core.interrupts.run (its own session; ended with its group on
Ctrl-C or a timeout). A missing command or one Slurm refuses is a SlurmError naming the
command and Slurm's own message. Everything Slurm prints reaches envbuilder with its control
characters (escape sequences) replaced by '?' (printable).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuilder.core import interrupts
from envbuilder.core.errors import EngineError

#: Job states after which nothing of the job runs any more (Slurm's JOB_STATE_CODES).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
#: What we say when Slurm has forgotten a job: no accounting, and MinJobAge has passed.
FORGOTTEN = "GONE"
COMMAND_TIMEOUT_S = 60.0
#: What a run needs: submit, follow, cancel (sacct is optional: not every cluster keeps
#: accounting, and poll() does without it).
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")
_FIELD = re.compile(r"(\w+)=(\S*)")


class SlurmError(EngineError):
    """A Slurm command is missing, refused a request or answered something unreadable."""


@dataclass(frozen=True)
class JobState:
    """One look at a job. `state` is Slurm's (PENDING, RUNNING, COMPLETED, TIMEOUT, ...) or
    GONE when Slurm no longer knows it; `reason` is Slurm's Reason (why pending, why failed)."""

    job_id: str
    state: str
    reason: str = ""
    node_list: str = ""
    exit_code: str = ""
    run_time: str = ""
    time_limit: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES or self.state == FORGOTTEN

    def describe(self) -> str:
        """One line: "job 12 RUNNING on n[1-2] (00:00:15)", "job 12 PENDING (Resources)"."""
        text = f"job {self.job_id} {self.state}"
        if self.node_list and self.node_list not in ("(null)", "None"):
            text += f" on {self.node_list}"
        extras = [
            x for x in (self.reason if self.reason not in ("None", "") else "", self.run_time) if x
        ]
        return text + (f" ({', '.join(extras)})" if extras else "")


def _run(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    try:
        result = interrupts.run(list(args), cwd=cwd, env=env, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(
            f"{args[0]} is not installed here: run envbuilder on a machine with "
            "Slurm's client commands (a login node; Debian: slurm-client)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{' '.join(args[:3])} did not answer within {timeout:g} s: is "
            "slurmctld up (`scontrol ping`)?"
        ) from None
    return subprocess.CompletedProcess(
        result.args, result.returncode, printable(result.stdout), printable(result.stderr)
    )


#: Control characters other than newline and tab: escape sequences in a Slurm message (a job
#: name, a reason, a plugin's output) would otherwise reach the user's terminal as they are.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str | None) -> str:
    """Slurm's output made safe to show: control characters but newline and tab become '?'."""
    return _CONTROL.sub("?", text or "")


def require_commands(env: Mapping[str, str]) -> None:
    """SlurmError naming every missing client command, before anything is submitted: a job
    that sbatch queued but squeue cannot follow, or scancel cannot end, would be left running."""
    path = env.get("PATH", os.defpath)
    missing = [c for c in COMMANDS if shutil.which(c, path=path) is None]
    if missing:
        raise SlurmError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH "
            f"({path}): envbuilder submits, follows and cancels the job with "
            f"{', '.join(COMMANDS)}; run it on a machine with Slurm's client commands "
            "(a login node; Debian: slurm-client)"
        )


def _failed(args: Sequence[str], result: subprocess.CompletedProcess[str]) -> SlurmError:
    said = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
    return SlurmError(f"{args[0]} failed: {said}")


def submit(script: Path, sbatch_args: Sequence[str], env: Mapping[str, str], cwd: Path) -> str:
    """Submit `script` with `sbatch --parsable ARGS SCRIPT` in `cwd`; return the job id."""
    args = ["sbatch", "--parsable", *sbatch_args, str(script)]
    result = _run(args, env, cwd)
    if result.returncode != 0:
        raise _failed(args, result)
    job_id = result.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {result.stdout.strip()!r}, not a job id")
    return job_id


def _squeue(job_id: str, env: Mapping[str, str]) -> JobState | None:
    """The job as squeue shows it while it is queued, running or completing; None when squeue
    no longer lists it."""
    args = ["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N|%M|%l"]
    result = _run(args, env)
    if result.returncode != 0:
        if "invalid job id" in result.stderr.lower():
            return None
        raise _failed(args, result)
    line = result.stdout.strip().splitlines()[:1]
    if not line:
        return None
    state, reason, nodes, run_time, limit = ([*line[0].split("|"), "", "", "", ""])[:5]
    if state in FINAL_STATES:
        return None  # squeue may list a finished job briefly; scontrol has its final fields
    return JobState(job_id, state, reason, nodes, "", run_time, limit)


def _scontrol(job_id: str, env: Mapping[str, str]) -> JobState | None:
    args = ["scontrol", "show", "job", "-o", job_id]
    result = _run(args, env)
    if result.returncode != 0:
        if "invalid job id" in (result.stderr + result.stdout).lower():
            return None
        raise _failed(args, result)
    fields = dict(_FIELD.findall(result.stdout))
    if "JobState" not in fields:
        raise SlurmError(
            f"scontrol show job {job_id} answered no JobState: {result.stdout.strip()[:200]!r}"
        )
    return JobState(
        job_id,
        fields["JobState"],
        fields.get("Reason", ""),
        fields.get("NodeList", ""),
        fields.get("ExitCode", ""),
        fields.get("RunTime", ""),
        fields.get("TimeLimit", ""),
    )


def _sacct(job_id: str, env: Mapping[str, str]) -> JobState | None:
    """Slurm's accounting, where a cluster keeps it (scontrol forgets a job after MinJobAge)."""
    args = ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Reason,NodeList,ExitCode,Elapsed"]
    try:
        result = _run(args, env)
    except SlurmError:
        return None  # no sacct here: then the job is simply forgotten
    line = result.stdout.strip().splitlines()[:1] if result.returncode == 0 else []
    if not line:
        return None
    state, reason, nodes, exit_code, elapsed = ([*line[0].split("|"), "", "", "", ""])[:5]
    # sacct writes "CANCELLED by 0": the state is the first word
    return JobState(job_id, state.split(" ")[0], reason, nodes, exit_code, elapsed)


def poll(job_id: str, env: Mapping[str, str]) -> JobState:
    """The job's state now: squeue while it is queued or running; once squeue drops it, its
    final fields from scontrol, else sacct, else GONE."""
    queued = _squeue(job_id, env)
    if queued is not None:
        return queued
    final = _scontrol(job_id, env) or _sacct(job_id, env)
    return final or JobState(
        job_id, FORGOTTEN, "Slurm no longer knows the job (no accounting; MinJobAge passed)"
    )


def scancel(job_id: str, env: Mapping[str, str]) -> None:
    """Ask Slurm to end the job (a job it no longer knows is fine); SlurmError if it refuses."""
    args = ["scancel", job_id]
    result = _run(args, env)
    if result.returncode != 0 and "invalid job id" not in result.stderr.lower():
        raise _failed(args, result)


def cancel(
    job_id: str, env: Mapping[str, str], wait_s: float = 60.0, interval_s: float = 1.0
) -> JobState:
    """scancel the job and wait (at most `wait_s`) until nothing of it runs; its last state."""
    scancel(job_id, env)
    deadline = time.monotonic() + wait_s
    state = poll(job_id, env)
    while not state.finished and time.monotonic() < deadline:
        time.sleep(interval_s)
        state = poll(job_id, env)
    return state


def expand_nodes(node_list: str, env: Mapping[str, str]) -> list[str]:
    """Slurm's host list ("n[1-2],gpu07") as names, by `scontrol show hostnames`."""
    if not node_list or node_list in ("(null)", "None"):
        return []
    args = ["scontrol", "show", "hostnames", node_list]
    result = _run(args, env)
    if result.returncode != 0:
        raise _failed(args, result)
    return result.stdout.split()

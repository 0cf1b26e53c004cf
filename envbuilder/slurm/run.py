"""`envbuilder validate --slurm`: validate an env on every node of a Slurm job, and between them.

    validate_on_slurm(project, spec, env, target, options, request, progress)
        -> SlurmOutcome

The target must have the registry's `cluster` capability (envbuilder.slurm.script.cluster_kind:
an image target, or a venv target). Steps: verify the lock; render slurm/<env>/validate.sbatch
(written when it changed); pick the image (the pushed one the lock records, else, for the docker
runtime, the local engine's image built from this lock) or the venv; stage probe.pyz and
pylock.toml in the run folder (it must be on a file system every node sees: by default
reports/slurm/<env>.<target>/ of the checkout); `sbatch`; follow the job with squeue (then
scontrol/sacct) and report its state and the nodes done; cancel it with `scancel` on Ctrl-C or
when `request.timeout_s` passes; read the job folder into a fleet report (envbuilder.report.fleet)
and write fleet.json, fleet.md and fleet.html beside the node reports.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envbuilder.builders.lookup import builder_for
from envbuilder.builders.proberun import probe_options, probe_zipapp_bytes
from envbuilder.builders.render import MARKER
from envbuilder.core.datafolders import real_folders_to
from envbuilder.core.errors import RenderError, UsageError, ValidationError
from envbuilder.core.fsutil import atomic_write_bytes
from envbuilder.core.model import EnvSpec, Spec
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.lock import lockfile
from envbuilder.lock.verified import VerifiedLock, load_verified_lock
from envbuilder.report import fleet, fleet_output, jobfolder
from envbuilder.slurm import job as slurm_job
from envbuilder.slurm.script import IMAGE_RUNTIMES, cluster_kind, pushed_image, render_script
from envbuilder.targets import registry
from envbuilder.targets.base import LocalImageBuilder, ValidateOptions, VenvBuilderProtocol

#: The runtime of each kind of cluster target unless told otherwise.
DEFAULT_RUNTIME = {"image": "docker", "venv": "venv"}
#: A probe option the script splits on whitespace must be one word of these characters.
_WORD = re.compile(r"[A-Za-z0-9._=:,/+@%-]+\Z")
#: sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (sbatch(1)).
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}\Z|infinite|unlimited|UNLIMITED|INFINITE")
#: Seconds between two looks at the job.
POLL_S = 2.0


@dataclass(frozen=True)
class SlurmRequest:
    """What the user asked of Slurm (`validate --slurm` options)."""

    nodes: int = 2
    gpus_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    sbatch_args: tuple[str, ...] = ()
    runtime: str | None = None  # None: the target's default (docker / venv)
    run_dir: Path | None = None
    timeout_s: float | None = None  # envbuilder's own deadline, pending time included
    poll_s: float = POLL_S


@dataclass(frozen=True)
class SlurmOutcome:
    job: slurm_job.JobState
    job_dir: Path
    script: Path
    fleet: fleet.Fleet
    files: Mapping[str, Path] = field(default_factory=dict)  # the fleet report's files
    cancelled: str | None = None  # why envbuilder cancelled the job, when it did


# --------------------------------------------------------------------------- checks


def check_request(target: str, request: SlurmRequest) -> str:
    """The runtime to use; UsageError for a combination that cannot run."""
    kind = cluster_kind(target)
    if kind is None:
        have = [t for t in registry.with_capability("cluster") if cluster_kind(t) is not None]
        raise UsageError(
            f"target {target} runs on no cluster; --slurm applies to "
            f"{' and '.join(have) or 'no target'}"
        )
    runtime = request.runtime or DEFAULT_RUNTIME[kind]
    if kind == "image" and runtime not in IMAGE_RUNTIMES:
        raise UsageError(
            f"--runtime {runtime} does not run an image; for the {target} target "
            f"choose {', '.join(IMAGE_RUNTIMES)}"
        )
    if kind == "venv" and runtime != "venv":
        raise UsageError(
            f"--runtime {runtime} runs an image; the {target} target runs its venv "
            "(leave --runtime out)"
        )
    if request.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, not {request.nodes}")
    if request.gpus_per_node is not None and request.gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node must be at least 1, not {request.gpus_per_node}")
    if request.time is not None and not _TIME.fullmatch(request.time):
        raise UsageError(
            f"--time {request.time!r}: give minutes, MM:SS, HH:MM:SS or D-HH:MM:SS, as for sbatch"
        )
    if request.timeout_s is not None and not request.timeout_s > 0:
        raise UsageError(f"--timeout must be positive, not {request.timeout_s:g}")
    return runtime


#: What a run folder's path cannot hold: sbatch expands '%' in --output (%j, %N), and ':' and
#: ',' separate the bind mounts of docker -v, pyxis --container-mounts and apptainer --bind;
#: a newline or another control character breaks the batch script's lines.
_RUN_DIR_BAD = re.compile(r"[%:,\x00-\x1f\x7f]")


def check_run_dir(run_dir: Path, given: bool) -> None:
    """UsageError, before anything is written or submitted, for a run folder whose path sbatch
    or a container runtime would read as something else."""
    bad = sorted(set(_RUN_DIR_BAD.findall(str(run_dir))))
    if not bad:
        return
    shown = ", ".join(repr(c) for c in bad)
    where = f"--run-dir {run_dir}" if given else f"the run folder {run_dir} (the default)"
    raise UsageError(
        f"{where} holds {shown}: sbatch reads '%' in --output as a pattern, ':' and ',' "
        "separate the bind mounts of docker, pyxis and apptainer, and a control character "
        "breaks the batch script; choose a folder without them"
        + ("" if given else " with --run-dir")
    )


def check_run_dir_owner(run_dir: Path) -> None:
    """UsageError, before anything is written or submitted, when the run folder exists and is
    not this user's own or others can write into it: they could make or replace the job's
    folder and forge its node results (jobfolder.shared_folder_refusal)."""
    try:
        info = run_dir.stat()
    except FileNotFoundError:
        return  # new: made by this user
    except OSError as exc:
        raise UsageError(f"the run folder {run_dir}: {exc.strerror or exc}") from None
    why = jobfolder.shared_folder_refusal(info)
    if why is not None:
        raise UsageError(
            f"the run folder {run_dir} {why}: another user could make or replace the job's "
            "folder there and forge its node results; choose a folder of your own "
            "(--run-dir DIR)"
        )


def probe_words(env: EnvSpec, options: ValidateOptions) -> tuple[list[str], list[str], bool]:
    """(probe options of every run, the per-node --only/--skip, whether the collectives across
    nodes run). UsageError for a value the script could not pass as one word."""
    common = probe_options(
        env,
        ValidateOptions(level=options.level, expect=options.expect, repeat=options.repeat),
        {"env": env.name},
    )
    select = [w for c in options.only for w in ("--only", c)]
    select += [w for c in options.skip for w in ("--skip", c)]
    for word in (*common, *select):
        if not _WORD.fullmatch(word):
            raise UsageError(
                f"{word!r} cannot be passed to the batch script (one word of "
                "letters, digits and . _ = : , / + @ % -)"
            )
    cross = "collectives" not in options.skip and (
        not options.only or "collectives" in options.only
    )
    return common, select, cross


# --------------------------------------------------------------------------- inputs


def write_script(project: Project, spec: Spec, env: EnvSpec, progress: ProgressFn) -> Path:
    """Render slurm/<env>/validate.sbatch and write it when it changed; a file there that
    envbuilder did not generate is refused (RenderError), never overwritten."""
    files = render_script(project, spec, env)
    if not files:
        raise UsageError(f"env {env.name!r} has no target a cluster runs")
    ((path, data),) = files.items()
    current = path.read_bytes() if path.is_file() else None
    if current == data:
        return path
    if current is not None and MARKER.encode() not in current[:2048]:
        raise RenderError(
            f"{path} exists and was not generated by envbuilder; move it away "
            "(envbuilder writes its batch script there)"
        )
    atomic_write_bytes(path, data)
    progress(f"wrote {path} (commit it with the lock)", 0, None)
    return path


def _local_image(env: str, target: str, pylock_sha256: str) -> str:
    """The id of the local image built from this lock, as the target's builder finds it."""
    builder = builder_for(registry.get(target))
    image = (
        builder.local_image(env, pylock_sha256) if isinstance(builder, LocalImageBuilder) else None
    )
    if image is None:
        raise ValidationError(
            f"no image for the nodes: the lock records no pushed image and the Docker engine "
            f"has no image of {env} built from this lock. On a cluster, build and push it "
            f"(`envbuilder build --target {target} --env {env}`, `envbuilder push --env {env} "
            "--registry HOST/PATH`); the nodes pull it by digest"
        )
    return image


def choose_image(
    lock: lockfile.EnvLock, env: str, target: str, runtime: str, pylock_sha256: str
) -> str:
    """The image every node runs: the pushed one (by digest) when the lock records it; else,
    for docker only, this engine's image built from the lock (by id: nodes sharing this engine,
    or with the image preloaded, run exactly it)."""
    pushed = pushed_image(lock, target)
    if pushed:
        return pushed
    if runtime != "docker":
        raise ValidationError(
            f"--runtime {runtime} pulls the image from a registry, and the lock records no "
            f"pushed image; run `envbuilder push --env {env} --registry HOST/PATH` first"
        )
    return _local_image(env, target, pylock_sha256)


def _venv(project: Project, env: EnvSpec, target: str, path: Path | None) -> Path:
    """The venv the nodes run: --path, else the target's default folder (its builder says)."""
    builder = builder_for(registry.get(target))
    if not isinstance(builder, VenvBuilderProtocol):
        raise UsageError(f"target {target} makes no venv for the nodes to run")
    venv = builder.venv_path(project, env, path)
    if not (venv / "bin" / "python").exists():
        raise ValidationError(
            f"no venv at {venv}; build it on a file system every node sees "
            f"(`envbuilder build --target {target} --env {env.name} --path "
            "DIR`)"
        )
    return venv


def stage(run_dir: Path, pylock: bytes) -> None:
    """probe.pyz and pylock.toml in the run folder, where every node reads them."""
    atomic_write_bytes(run_dir / "probe.pyz", probe_zipapp_bytes(), 0o755)
    atomic_write_bytes(run_dir / "pylock.toml", pylock, 0o644)


def sbatch_arguments(env: str, request: SlurmRequest, run_dir: Path) -> list[str]:
    args = [
        f"--job-name=envbuilder-validate-{env}",
        f"--nodes={request.nodes}",
        "--ntasks-per-node=1",
        f"--output={run_dir}/slurm-%j.out",
    ]
    if request.partition:
        args.append(f"--partition={request.partition}")
    if request.time:
        args.append(f"--time={request.time}")
    if request.gpus_per_node:
        args.append(f"--gpus-per-node={request.gpus_per_node}")
    return [*args, *request.sbatch_args]


# --------------------------------------------------------------------------- following


def _nodes_done(job_dir: Path) -> tuple[int, str]:
    nodes = job_dir / "nodes"  # a link there is not followed (jobfolder.JobFolder refuses it)
    done = 0 if nodes.is_symlink() else len(list(nodes.glob("*.exit")))
    phase = (jobfolder.read_text_small(job_dir / "phase") or "").strip()
    return done, phase


def follow(
    job_id: str,
    job_dir: Path,
    nodes: int,
    environ: Mapping[str, str],
    request: SlurmRequest,
    progress: ProgressFn,
) -> tuple[slurm_job.JobState, str | None]:
    """Poll until the job is over; say what changes. Cancels it (scancel, then waits) on Ctrl-C
    (re-raised) or once `request.timeout_s` has passed (returned as the reason)."""
    try:
        return _poll_until_over(job_id, job_dir, nodes, environ, request, progress)
    except KeyboardInterrupt:
        progress(f"interrupted: cancelling Slurm job {job_id}", 0, None)
        final = slurm_job.cancel(job_id, environ)
        progress(f"{final.describe()}", 0, None)
        raise
    except slurm_job.SlurmError as exc:
        raise _cancelled_unwatched(job_id, job_dir, environ, exc) from None


def _poll_until_over(
    job_id: str,
    job_dir: Path,
    nodes: int,
    environ: Mapping[str, str],
    request: SlurmRequest,
    progress: ProgressFn,
) -> tuple[slurm_job.JobState, str | None]:
    start = time.monotonic()
    last = ""
    while True:
        state = slurm_job.poll(job_id, environ)
        if state.finished:
            return state, None
        last = _say_change(state, job_dir, nodes, last, progress)
        if request.timeout_s is not None and time.monotonic() - start > request.timeout_s:
            why = f"not finished after {request.timeout_s:g} s (--timeout)"
            progress(f"job {job_id} {why}: cancelling it", 0, None)
            return slurm_job.cancel(job_id, environ), why
        time.sleep(request.poll_s)


def _say_change(
    state: slurm_job.JobState, job_dir: Path, nodes: int, last: str, progress: ProgressFn
) -> str:
    """Report the job's state and the nodes' progress when they differ from `last` (what the
    previous poll saw); what this poll saw."""
    done, phase = _nodes_done(job_dir)
    line = f"{state.state} {state.reason} {done} {phase}"
    if line != last:
        detail = (
            f": {phase} phase, {done}/{nodes} node probe(s) done"
            if state.state == "RUNNING" and phase
            else ""
        )
        progress(state.describe() + detail, 0, None)
    return line


def _cancelled_unwatched(
    job_id: str, job_dir: Path, environ: Mapping[str, str], exc: slurm_job.SlurmError
) -> slurm_job.SlurmError:
    """The job is queued and envbuilder cannot see it any more (slurmctld down, squeue
    refusing): cancel it rather than leave it running unwatched; the error says which job."""
    try:
        slurm_job.scancel(job_id, environ)  # no waiting: polling is what failed
        after = f"envbuilder cancelled job {job_id}"
    except slurm_job.SlurmError:
        after = f"cancel it with `scancel {job_id}`"
    return slurm_job.SlurmError(
        f"job {job_id} was submitted, but envbuilder cannot follow it: {exc}; {after} "
        f"(its folder: {job_dir})"
    )


# --------------------------------------------------------------------------- the whole run


def validate_on_slurm(
    project: Project,
    spec: Spec,
    env: EnvSpec,
    target: str,
    options: ValidateOptions,
    request: SlurmRequest,
    progress: ProgressFn,
) -> SlurmOutcome:
    """Validate `env`'s `target` on a Slurm job of `request.nodes` nodes; see the module."""
    runtime = check_request(target, request)
    if target not in env.targets:
        raise UsageError(f"env {env.name!r} has no target {target!r}")
    run_dir = _run_dir(project, env.name, target, request)
    check_run_dir(run_dir, request.run_dir is not None)
    real_folders_to(project.root, run_dir / "-")  # the default reports/slurm/<env>.<target>/
    check_run_dir_owner(run_dir)
    slurm_job.require_commands(os.environ)  # before anything is written or submitted
    settings = _probe_settings(runtime, env, options)
    verified = load_verified_lock(project, env.name, target, spec.env_hash(env.name))
    script = write_script(project, spec, env, progress)
    settings |= _environment_setting(project, env, target, options, runtime, verified)
    if request.gpus_per_node:
        settings["ENVBUILDER_RANKS_PER_NODE"] = str(request.gpus_per_node)
    settings["ENVBUILDER_RUN_DIR"] = str(run_dir)
    stage(run_dir, verified.pylock.data)
    environ = {**os.environ, **settings}
    job_id = slurm_job.submit(
        script, sbatch_arguments(env.name, request, run_dir), environ, run_dir
    )
    job_dir = run_dir / f"job-{job_id}"
    progress(
        f"submitted job {job_id} ({request.nodes} node(s), {runtime}); results in {job_dir}",
        0,
        None,
    )
    state, cancelled = follow(job_id, job_dir, request.nodes, environ, request, progress)
    return _outcome(job_id, state, cancelled, run_dir, script, environ)


def _run_dir(project: Project, env: str, target: str, request: SlurmRequest) -> Path:
    """--run-dir, or reports/slurm/<env>.<target>, as an absolute path (the nodes see it)."""
    return Path(
        os.path.abspath(  # noqa: PTH100
            request.run_dir or project.reports / "slurm" / f"{env}.{target}"
        )
    )


def _probe_settings(runtime: str, env: EnvSpec, options: ValidateOptions) -> dict[str, str]:
    """The job's settings for the runtime and what the probe checks on each node and across."""
    common, select, cross = probe_words(env, options)
    return {
        "ENVBUILDER_RUNTIME": runtime,
        "ENVBUILDER_PROBE_ARGS": " ".join(common),
        "ENVBUILDER_NODE_CHECKS": " ".join(select),
        "ENVBUILDER_CROSS_NODE": "1" if cross else "0",
    }


def _environment_setting(
    project: Project,
    env: EnvSpec,
    target: str,
    options: ValidateOptions,
    runtime: str,
    verified: VerifiedLock,
) -> dict[str, str]:
    """Where the nodes find the environment: the image the runtime pulls, or the venv."""
    if runtime in IMAGE_RUNTIMES:
        return {
            "ENVBUILDER_IMAGE": choose_image(
                verified.lock, env.name, target, runtime, verified.pylock.entry.pylock_sha256
            )
        }
    return {"ENVBUILDER_VENV": str(_venv(project, env, target, options.path))}


def _outcome(
    job_id: str,
    state: slurm_job.JobState,
    cancelled: str | None,
    run_dir: Path,
    script: Path,
    environ: Mapping[str, str],
) -> SlurmOutcome:
    """The ended job's results, read from its folder, and the reports written from them."""
    job_dir = run_dir / f"job-{job_id}"
    info = fleet.JobInfo(
        job_id,
        state.state,
        state.reason,
        state.run_time,
        tuple(slurm_job.expand_nodes(state.node_list, environ)),
        _job_note(state, cancelled, run_dir),
    )
    # absent when the job ended before its script ran; 0755 at most (the umask may take more)
    job_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    result = fleet.read_job_dir(job_dir, info)
    return SlurmOutcome(
        state, job_dir, script, result, fleet_output.write_reports(result, job_dir), cancelled
    )


def _job_note(state: slurm_job.JobState, cancelled: str | None, run_dir: Path) -> str | None:
    """Why the job ended early, with the last lines of its batch output (the script's own
    refusals land there), or None when it completed."""
    if state.state == "COMPLETED" and not cancelled:
        return None
    out = run_dir / f"slurm-{state.job_id}.out"
    tail = jobfolder.tail_lines(out, 3)  # its end only: a batch output can be big
    parts = [
        f"envbuilder cancelled the job: {cancelled}"
        if cancelled
        else f"the job ended {state.state}"
        + (f" ({state.reason})" if state.reason not in ("", "None") else ""),
        f"batch output {out.name}: {tail}" if tail else "",
    ]
    return "; ".join(p for p in parts if p)

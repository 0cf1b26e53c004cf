"""Issue 16: `envbuilder validate --slurm` and slurm/<env>/validate.sbatch, on the real two-node
cluster of `.ci/services.sh` (docs/cluster.md) with the real Docker engine and registry.

The env is the checkout's `cpu` env, in a copy of its spec, lockfiles/ and dockerfiles/ (the
lock's [artifacts] and the rendered script are written there, not in the working tree). Its
image is built through the CLI (nothing is rebuilt when the engine has it) and pushed to the
local registry, so the script pins the pushed digest and every node pulls it by digest.

The cluster is shared by everyone on the machine: every job a test submitted is cancelled when
the test ends, whatever happened. Jobs are small: the quick level, often one check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from clirun import in_project
from conftest import SlurmCluster, service_missing

from envbuilder.builders.render import MARKER
from envbuilder.builders.venvcommands import uv_venv_environment
from envbuilder.commands._cli import main
from envbuilder.core import activate
from envbuilder.core.compatload import load_compat
from envbuilder.core.errors import RenderError
from envbuilder.core.project import Project
from envbuilder.host import pyfinder
from envbuilder.lock import lockfile
from envbuilder.lock.record import record_artifact
from envbuilder.probe import build_zipapp
from envbuilder.probe.check_collectives import CHECK_COUNTS
from envbuilder.slurm import script as slurm_script
from envbuilder.slurm.run import write_script
from envbuilder.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu"
JOB_LABEL = "org.envbuilder.slurm-job"
SUBMITTED = re.compile(r"submitted job (\d+)")
# Slurm kills a job 60-90 s after its 1-minute limit (docs/cluster.md).
TIME_LIMIT_S = 200
# Only what a plain node has: no envbuilder, no Python venv of this checkout.
BARE_PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def copy_project(root: Path) -> Project:
    """A copy of the checkout's cpu env inputs (fails when the checkout lacks them)."""
    inputs = [ROOT / "environments.toml", ROOT / "lockfiles", ROOT / "dockerfiles" / ENV]
    missing = [str(p.relative_to(ROOT)) for p in inputs if not p.exists()]
    if missing:
        pytest.fail(f"the checkout lacks {', '.join(missing)} (run envbuilder lock/render)")
    shutil.copy(ROOT / "environments.toml", root / "environments.toml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    shutil.copytree(ROOT / "dockerfiles" / ENV, root / "dockerfiles" / ENV)
    return Project.from_spec(root / "environments.toml")


def need_shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        service_missing("no shellcheck on PATH (.ci/services.sh installs it)")
    return found


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return copy_project(tmp_path)


@pytest.fixture(scope="module")
def cluster_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return copy_project(tmp_path_factory.mktemp("slurm-project"))


@pytest.fixture(scope="module")
def pushed_image(docker_client: Any, registry: str, cluster_project: Project) -> str:
    """The cpu image, built (or found) and pushed; the script rendered with its digest."""
    assert in_project(cluster_project, "build", "--target", "docker", "--env", ENV) == 0
    assert (
        in_project(
            cluster_project, "push", "--env", ENV, "--registry", f"{registry}/envbuilder-slurm-test"
        )
        == 0
    )
    lock = lockfile.load_env_lock(cluster_project, ENV)
    assert lock is not None
    digest = lock.artifacts["docker"]["repo_digest"]
    assert "@sha256:" in digest
    assert in_project(cluster_project, "render", "--env", ENV) == 0
    return digest


@pytest.fixture
def slurm_env(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, cluster_project: Project
) -> Iterator[SlurmCluster]:
    """SLURM_CONF for the CLI; afterwards every job of this project's script is cancelled and
    no container of such a job is left."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.delenv("ENVBUILDER_PROBE_FAULT", raising=False)
    monkeypatch.delenv("ENVBUILDER_PROBE_FAULT_NODES", raising=False)
    yield slurm_cluster
    ours = our_jobs(slurm_cluster, cluster_project.root)
    if ours:
        slurm_cluster.run("scancel", *ours, timeout=30)


def our_jobs(cluster: SlurmCluster, root: Path) -> list[str]:
    """Queued jobs whose batch script lies under `root` (this test's project)."""
    result = cluster.run("squeue", "-h", "-o", "%i|%o", timeout=30)
    return [
        line.split("|")[0]
        for line in result.stdout.splitlines()
        if line.split("|")[-1].startswith(str(root))
    ]


def queued(cluster: SlurmCluster, job_id: str) -> bool:
    result = cluster.run("squeue", "-h", "-j", job_id, "-o", "%i", timeout=30)
    return job_id in result.stdout.split()


def job_state(cluster: SlurmCluster, job_id: str) -> str:
    result = cluster.run("scontrol", "show", "job", "-o", job_id, timeout=30)
    fields: dict[str, str] = dict(re.findall(r"(\w+)=(\S*)", result.stdout))
    return fields.get("JobState", "")


def containers_of(docker_client: Any, job_id: str) -> list[str]:
    found = docker_client.containers.list(all=True, filters={"label": f"{JOB_LABEL}={job_id}"})
    return [c.name for c in found]


def job_dir_from(stdout: str) -> Path:
    """The job folder named by the CLI's job line (<env> <target> job-<id> <state> <folder>)."""
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[2].startswith("job-"):
            assert Path(parts[4]).name == parts[2]
            return Path(parts[4])
    raise AssertionError(f"no job line in:\n{stdout}")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def check_entry(report: dict[str, Any], name: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(c for c in report["checks"] if c["name"] == name)
    return entry


# --------------------------------------------------------------------------- the script


def test_render_writes_checks_and_cleans_up_the_script(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    script = slurm_script.script_path(project, ENV)
    assert in_project(project, "render") == 0
    first = script.read_bytes()
    assert first.startswith(b"#!/bin/bash\n# validate.sbatch: generated by envbuilder")
    assert in_project(project, "render") == 0
    assert script.read_bytes() == first  # deterministic
    assert in_project(project, "render", "--check") == 0
    script.write_bytes(first.replace(b"--exclusive", b"--oversubscribe"))
    capsys.readouterr()
    assert in_project(project, "render", "--check") == 1
    assert "stale: slurm/cpu/validate.sbatch" in capsys.readouterr().out
    # a script of an env that is gone: removed when generated, kept when hand-written
    gone = slurm_script.slurm_root(project) / "oldenv" / "validate.sbatch"
    gone.parent.mkdir()
    gone.write_bytes(first)
    mine = slurm_script.slurm_root(project) / "mine.sbatch"
    mine.write_text("#!/bin/bash\necho mine\n")
    assert in_project(project, "render") == 0
    assert not gone.exists() and not gone.parent.exists()
    assert mine.read_text() == "#!/bin/bash\necho mine\n"
    assert script.read_bytes() == first


def test_only_render_with_the_docker_files(project: Project) -> None:
    assert in_project(project, "render", "--target", "wsl2") == 0
    assert not slurm_script.script_path(project, ENV).exists()
    assert in_project(project, "render", "--target", "docker") == 0
    assert slurm_script.script_path(project, ENV).exists()


def test_script_pins_the_pushed_digest(project: Project) -> None:
    spec = load_spec(project.spec_path)
    before = next(iter(slurm_script.render_script(project, spec, spec.env(ENV)).values()))
    assert b"IMAGE_DEFAULT=''" in before and b"# NOT PUSHED:" in before
    digest = "127.0.0.1:5000/team/cpu@sha256:" + "ab" * 32
    record_artifact(project, ENV, "docker", repo_digest=digest)
    after = next(iter(slurm_script.render_script(project, spec, spec.env(ENV)).values()))
    assert f"IMAGE_DEFAULT={digest}\n".encode() in after
    assert b"NOT PUSHED" not in after
    lock = lockfile.load_env_lock(project, ENV)
    assert lock is not None
    assert b"IMAGE_TARGET=docker\n" in after and b"VENV_TARGET=native\n" in after
    for target, kind in (("docker", "IMAGE"), ("native", "VENV")):
        sha = lock.targets[target].pylock_sha256
        assert f"{kind}_PYLOCK_SHA256={sha}\n".encode() in after


def test_gpu_flags_come_from_the_compat_data() -> None:
    """rocm714 (unlocked here: the flags do not depend on the lock) gets docker.toml's
    native-rocm flags and Apptainer's --rocm; cpu gets none."""
    rocm = (ROOT / "slurm" / "rocm714" / "validate.sbatch").read_text()
    flags = load_compat().device_flags("native-rocm")
    for device in flags.devices:
        assert f"--device={device}" in rocm
    assert f"DOCKER_GPU_GROUPS=({' '.join(flags.group_add)})" in rocm
    assert "APPTAINER_GPU_FLAGS=(--rocm)" in rocm
    assert "DEFAULT_RANKS=gpu" in rocm
    cpu = (ROOT / "slurm" / "cpu" / "validate.sbatch").read_text()
    assert "DOCKER_GPU_FLAGS=()" in cpu and "APPTAINER_GPU_FLAGS=()" in cpu


def test_committed_and_rendered_scripts_pass_shellcheck(project: Project) -> None:
    shellcheck = need_shellcheck()
    record_artifact(
        project, ENV, "docker", repo_digest="127.0.0.1:5000/team/cpu@sha256:" + "cd" * 32
    )
    spec = load_spec(project.spec_path)
    ((path, data),) = slurm_script.render_script(project, spec, spec.env(ENV)).items()
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    scripts = [path, *sorted((ROOT / "slurm").glob("*/validate.sbatch"))]
    assert len(scripts) >= 4
    result = subprocess.run(
        [shellcheck, *map(str, scripts)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def _script_function(script: Path, name: str) -> str:
    text = script.read_text()
    match = re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.MULTILINE | re.DOTALL)
    assert match, name
    return match.group(0)


@pytest.mark.parametrize(
    ("image", "enroot"),
    [
        (
            "127.0.0.1:5000/team/cpu@sha256:" + "ab" * 32,
            "127.0.0.1:5000#team/cpu:sha256:" + "ab" * 32,
        ),
        ("registry.example.com/ml/cpu:v1", "registry.example.com#ml/cpu:v1"),
        ("team/cpu:v1", "team/cpu:v1"),  # no registry part: enroot's default registry
        ("/shared/images/cpu.sqsh", "/shared/images/cpu.sqsh"),
        ("nvcr.io#nvidia/pytorch:24.01", "nvcr.io#nvidia/pytorch:24.01"),
    ],
)
def test_pyxis_image_names(image: str, enroot: str) -> None:
    function = _script_function(ROOT / "slurm" / ENV / "validate.sbatch", "pyxis_image")
    result = subprocess.run(
        ["bash", "-c", f'{function}\npyxis_image "$1"', "-", image],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == enroot


def test_venv_runtime_runs_commands_with_the_venvs_activation(tmp_path: Path) -> None:
    """The venv runtime gets the env's variables from the venv's activation (as `validate
    --target native` sets them), the script's `set -euo pipefail` in force: a real uv venv with
    envbuilder's activation block, and the script's own run_env."""
    venv = tmp_path / "venv"
    subprocess.run(
        [pyfinder.uv_bin(), "venv", "--no-project", "--python", sys.executable, str(venv)],
        check=True,
        capture_output=True,
        env=uv_venv_environment(),
    )
    value = "a b $(not run) 'q'"
    activate.write_activation(venv / "bin", {"ENVBUILDER_T": value, "NCCL_DEBUG": "WARN"}, False)
    function = _script_function(ROOT / "slurm" / ENV / "validate.sbatch", "run_env")
    shown = 'printf "%s|%s|%s" "$ENVBUILDER_T" "$NCCL_DEBUG" "$VIRTUAL_ENV"'
    result = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{function}\nrun_env n sh -c '{shown}'"],
        env={"PATH": os.environ["PATH"], "RUNTIME": "venv", "ENVBUILDER_VENV": str(venv)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{value}|WARN|{venv}"


def test_script_refuses_inputs_that_are_not_the_lock(tmp_path: Path) -> None:
    script = ROOT / "slurm" / ENV / "validate.sbatch"
    env = {
        "PATH": os.environ["PATH"],
        "ENVBUILDER_RUN_DIR": str(tmp_path),
        "ENVBUILDER_IMAGE": "example/cpu@sha256:" + "0" * 64,
    }
    outside = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, check=False
    )
    assert outside.returncode == 2
    assert "submit this script with sbatch" in outside.stderr
    build_zipapp(tmp_path / "probe.pyz")
    (tmp_path / "pylock.toml").write_bytes(
        (ROOT / "lockfiles" / "pylock.cpu-native.toml").read_bytes()
    )  # the other target's
    wrong = subprocess.run(
        ["bash", str(script)],
        env={**env, "SLURM_JOB_ID": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert wrong.returncode == 2
    assert "pylock.toml has sha256" in wrong.stderr and "not the locked" in wrong.stderr
    assert not list(tmp_path.glob("job-*"))  # refused before it made anything


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--nodes", "2"), "--nodes applies to a cluster run; add --slurm"),
        (
            ("--slurm", "--target", "wsl2"),
            "target wsl2 runs on no cluster; --slurm applies to docker and native",
        ),
        (
            ("--slurm", "--target", "native", "--runtime", "pyxis"),
            "the native target runs its venv",
        ),
        (("--slurm", "--time", "soon"), "--time 'soon'"),
        (("--slurm", "--nodes", "0"), "--nodes must be at least 1"),
    ],
)
def test_usage_errors(
    project: Project, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    target = () if "--target" in args else ("--target", "docker")
    assert in_project(project, "validate", "--env", ENV, *target, *args) == 2
    assert message in capsys.readouterr().err


def test_a_hand_written_script_is_never_overwritten(project: Project) -> None:
    script = slurm_script.script_path(project, ENV)
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/bash\n# our own\n")
    spec = load_spec(project.spec_path)
    with pytest.raises(RenderError, match="was not generated by envbuilder"):
        write_script(project, spec, spec.env(ENV), lambda *_: None)
    assert script.read_text() == "#!/bin/bash\n# our own\n"
    assert in_project(project, "validate", "--env", ENV, "--target", "docker", "--slurm") == 1
    assert script.read_text() == "#!/bin/bash\n# our own\n"
    assert MARKER not in script.read_text()


@pytest.mark.parametrize("present", [(), ("sbatch",)])
def test_missing_slurm_commands_are_named_before_anything_is_written(
    project: Project,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    present: tuple[str, ...],
) -> None:
    """With sbatch but no squeue a job was submitted and then left running unwatched (the
    bug): every command a run needs is looked up first, nothing written or submitted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in present:
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"no {name} on PATH: the Slurm client is not installed")
        (bin_dir / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("SLURM_CONF", raising=False)  # a regression then cannot submit a job
    assert in_project(project, "validate", "--env", ENV, "--target", "docker", "--slurm") == 1
    err = capsys.readouterr().err
    missing = [c for c in ("sbatch", "squeue", "scontrol", "scancel") if c not in present]
    assert f"error: {', '.join(missing)} are not on PATH ({bin_dir})" in err, err
    assert not (project.root / "reports").exists()
    assert not slurm_script.script_path(project, ENV).exists()


@pytest.mark.parametrize("option", ["--run-dir", "--path", "--spec"])
def test_an_empty_path_is_a_usage_error(
    project: Project, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """`--run-dir "$UNSET"`: Path("") is ".", so the job ran in the current folder (the bug)."""
    args = ["validate", "--env", ENV, "--target", "docker", "--slurm", option, ""]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert f"argument {option}: an empty path" in capsys.readouterr().err
    assert not (project.root / "reports").exists()


# --------------------------------------------------------------------------- on the cluster


@pytest.mark.slow
def test_cpu_image_on_two_nodes(
    slurm_env: SlurmCluster,
    pushed_image: str,
    cluster_project: Project,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The acceptance: both nodes validated, gloo collectives across them with right sums on
    every rank, two node reports and one fleet report."""
    code = in_project(
        cluster_project, "validate", "--env", ENV, "--target", "docker", "--slurm", "--nodes", "2"
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    job_dir = job_dir_from(out.out)
    assert f"{ENV} docker n1 pass" in out.out and f"{ENV} docker n2 pass" in out.out
    assert f"{ENV} docker all-nodes pass" in out.out
    lock = lockfile.load_env_lock(cluster_project, ENV)
    assert lock is not None
    for node in ("n1", "n2"):
        report = load(job_dir / "nodes" / f"{node}.json")
        assert report["status"] == "pass"
        assert report["labels"] == {
            "env": ENV,
            "target": "docker",
            "node": node,
            "slurm_job": job_dir.name.removeprefix("job-"),
        }
        assert report["fingerprint"]["lock_sha256"] == lock.targets["docker"].pylock_sha256
        statuses = {c["name"]: c["status"] for c in report["checks"]}
        # topology skips on the CPU (nothing is linked); every other check passes
        assert statuses.pop("topology") == "skip"
        assert set(statuses.values()) == {"pass"}
        # every node ran the pushed image, by digest
        assert (
            f"image {pushed_image}, built from lock"
            in (job_dir / "nodes" / f"{node}.log").read_text()
        )
    ranks = [
        load(job_dir / "collectives" / name)
        for name in ("all.json", "all.rank1.json", "all.rank2.json", "all.rank3.json")
    ]
    assert sorted(r["labels"]["node"] for r in ranks) == ["n1", "n1", "n2", "n2"]
    for rank, report in enumerate(ranks):
        entry = check_entry(report, "collectives")
        assert entry["status"] == "pass", entry
        details = entry["details"]
        assert (details["rank"], details["world_size"], details["backend"]) == (rank, 4, "gloo")
        assert details["mode"] == "torchrun"
        assert details["checked_counts"] == list(CHECK_COUNTS)
        assert details["ranks_wrong"] == 0
    busbw = [m for m in check_entry(ranks[0], "collectives")["metrics"] if m["name"] == "busbw"]
    assert len(busbw) >= 2 and all(m["value"] > 0 for m in busbw)
    fleet_json = load(job_dir / "fleet.json")
    assert fleet_json["status"] == "pass"
    assert [n["node"] for n in fleet_json["nodes"]] == ["n1", "n2"]
    cross = fleet_json["collectives_across_nodes"]
    assert (cross["status"], cross["world_size"]) == ("pass", 4)
    assert {b["size"] for b in cross["busbw"]} == {m["size"] for m in busbw}
    assert (job_dir / "fleet.md").read_text().startswith("# envbuilder fleet: cpu/docker")
    assert "<table>" in (job_dir / "fleet.html").read_text()


@pytest.mark.slow
def test_sbatch_runs_the_script_without_envbuilder(
    slurm_env: SlurmCluster, pushed_image: str, cluster_project: Project, tmp_path: Path
) -> None:
    """A team's own `sbatch validate.sbatch`: nodes see no envbuilder and no Python of ours,
    only the image (the script's default: the pushed digest) and the staged probe and pylock."""
    dirs = [d for d in BARE_PATH_DIRS if not (Path(d) / "envbuilder").exists()]
    bare_path = ":".join(dirs)
    assert shutil.which("envbuilder", path=bare_path) is None
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    build_zipapp(run_dir / "probe.pyz")
    shutil.copy(cluster_project.pylock(ENV, "docker"), run_dir / "pylock.toml")
    script = slurm_script.script_path(cluster_project, ENV)
    assert f"IMAGE_DEFAULT={pushed_image}\n" in script.read_text()
    env = {
        "PATH": bare_path,
        "SLURM_CONF": str(slurm_env.conf),
        "HOME": str(tmp_path),
        "ENVBUILDER_NODE_CHECKS": "--only matmul",
    }
    result = subprocess.run(
        ["sbatch", "--wait", "--parsable", "--output=slurm-%j.out", str(script)],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    job_id = result.stdout.strip().split(";")[0]
    output = (run_dir / f"slurm-{job_id}.out").read_text() if job_id else ""
    assert result.returncode == 0, result.stderr + output
    job_dir = run_dir / f"job-{job_id}"
    for node in ("n1", "n2"):
        report = load(job_dir / "nodes" / f"{node}.json")
        assert report["status"] == "pass" and report["labels"]["node"] == node
        assert check_entry(report, "matmul")["status"] == "pass"
    assert load(job_dir / "collectives" / "all.json")["status"] == "pass"
    assert main(["fleet", str(job_dir)]) == 0


@pytest.mark.slow
def test_a_failing_node_is_named(
    slurm_env: SlurmCluster,
    pushed_image: str,
    cluster_project: Project,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVBUILDER_PROBE_FAULT", "matmul-wrong")
    monkeypatch.setenv("ENVBUILDER_PROBE_FAULT_NODES", "n2")
    code = in_project(
        cluster_project,
        "validate",
        "--env",
        ENV,
        "--target",
        "docker",
        "--slurm",
        "--only",
        "matmul",
    )
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    errors = [line for line in out.err.splitlines() if line.startswith("error:")]
    assert errors == [line for line in errors if line.startswith("error: n2: matmul:")]
    assert errors
    assert f"{ENV} docker n2 fail" in out.out and f"{ENV} docker n1 pass" in out.out
    job_dir = job_dir_from(out.out)
    fleet_json = load(job_dir / "fleet.json")
    assert fleet_json["failed_nodes"] == ["n2"]
    assert fleet_json["nodes"][0]["node"] == "n2"  # failed nodes first


@pytest.mark.slow
def test_json_names_the_failing_node(
    slurm_env: SlurmCluster, pushed_image: str, cluster_project: Project
) -> None:
    """validate --slurm --json: one object on stdout, valid against cli.schema.json, with the
    job, each node and the failure (run as a user runs it: a subprocess)."""
    env = {
        **os.environ,
        "SLURM_CONF": str(slurm_env.conf),
        "ENVBUILDER_PROBE_FAULT": "matmul-wrong",
        "ENVBUILDER_PROBE_FAULT_NODES": "n1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "envbuilder",
            "-q",
            "validate",
            "--env",
            ENV,
            "--target",
            "docker",
            "--slurm",
            "--only",
            "matmul",
            "--json",
            "--spec",
            str(cluster_project.spec_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    obj = json.loads(proc.stdout)
    schema = json.loads((ROOT / "envbuilder" / "data" / "schemas" / "cli.schema.json").read_text())
    jsonschema.validate(obj, schema, cls=jsonschema.Draft202012Validator)
    slurm = obj["slurm"]
    assert (obj["ok"], slurm["state"]) == (False, "FAILED")  # the script exits 1: a node failed
    assert {n["node"]: n["status"] for n in slurm["nodes"]} == {"n1": "fail", "n2": "pass"}
    assert slurm["all_nodes"] == {"status": "not run", "report": None}  # --only matmul
    assert [f.split(":")[0] for f in slurm["failures"]] == ["n1"]
    assert sorted(r["status"] for r in obj["reports"]) == ["fail", "pass"]
    assert Path(slurm["job_dir"]).name == f"job-{slurm['job_id']}"
    assert json.loads(Path(slurm["fleet"]["json"]).read_text())["failed_nodes"] == ["n1"]


@pytest.mark.slow
def test_envbuilder_timeout_cancels_the_job(
    slurm_env: SlurmCluster,
    pushed_image: str,
    cluster_project: Project,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVBUILDER_PROBE_FAULT", "hang:matmul")
    code = in_project(
        cluster_project,
        "validate",
        "--env",
        ENV,
        "--target",
        "docker",
        "--slurm",
        "--only",
        "matmul",
        "--level",
        "standard",
        "--timeout",
        "25",
    )
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    job_dir = job_dir_from(out.out)
    job_id = job_dir.name.removeprefix("job-")
    assert not queued(slurm_env, job_id)
    assert job_state(slurm_env, job_id) == "CANCELLED"
    assert containers_of(docker_client, job_id) == []
    fleet_json = load(job_dir / "fleet.json")
    assert fleet_json["job"]["note"].startswith(
        "envbuilder cancelled the job: not finished after 25 s (--timeout)"
    )
    assert fleet_json["failed_nodes"] == ["n1", "n2"]
    assert "error: n1: no report: did not finish (job CANCELLED" in out.err


@pytest.mark.slow
def test_a_hanging_job_is_killed_at_its_time_limit(
    slurm_env: SlurmCluster,
    pushed_image: str,
    cluster_project: Project,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--time 1: Slurm ends the job (TIMEOUT) 60-90 s after it starts; the probe's own timeout
    (300 s at --level standard) is longer, so it is Slurm that stops the hang."""
    monkeypatch.setenv("ENVBUILDER_PROBE_FAULT", "hang:matmul")
    start = time.monotonic()
    code = in_project(
        cluster_project,
        "validate",
        "--env",
        ENV,
        "--target",
        "docker",
        "--slurm",
        "--only",
        "matmul",
        "--level",
        "standard",
        "--time",
        "1",
    )
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    assert time.monotonic() - start < TIME_LIMIT_S + 60
    job_dir = job_dir_from(out.out)
    job_id = job_dir.name.removeprefix("job-")
    assert job_state(slurm_env, job_id) == "TIMEOUT", out.out + out.err
    assert not queued(slurm_env, job_id)
    assert containers_of(docker_client, job_id) == []
    fleet_json = load(job_dir / "fleet.json")
    assert fleet_json["job"]["state"] == "TIMEOUT"
    assert fleet_json["job"]["note"].startswith("the job ended TIMEOUT")
    assert fleet_json["failed_nodes"] == ["n1", "n2"]
    assert "did not finish (job TIMEOUT" in out.err


@pytest.mark.slow
def test_ctrl_c_cancels_the_job(
    slurm_env: SlurmCluster, pushed_image: str, cluster_project: Project, docker_client: Any
) -> None:
    env = {**os.environ, "SLURM_CONF": str(slurm_env.conf), "ENVBUILDER_PROBE_FAULT": "hang:matmul"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envbuilder",
            "validate",
            "--env",
            ENV,
            "--target",
            "docker",
            "--slurm",
            "--only",
            "matmul",
            "--level",
            "standard",
            "--spec",
            str(cluster_project.spec_path),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        job_id = ""
        for line in proc.stderr:
            if match := SUBMITTED.search(line):
                job_id = match.group(1)
                break
        assert job_id, "envbuilder did not say which job it submitted"
        deadline = time.monotonic() + 300
        while len(containers_of(docker_client, job_id)) < 2:  # both nodes hang in matmul
            assert time.monotonic() < deadline, "the job's containers did not start"
            time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    assert f"interrupted: cancelling Slurm job {job_id}" in rest
    assert not queued(slurm_env, job_id)
    assert job_state(slurm_env, job_id) == "CANCELLED"
    assert containers_of(docker_client, job_id) == []


@pytest.mark.slow
def test_native_venv_on_a_shared_file_system(
    slurm_env: SlurmCluster, cluster_project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """--target native: both nodes run the venv (the project's folder: one file system here)."""
    assert in_project(cluster_project, "build", "--target", "native", "--env", ENV) == 0
    code = in_project(
        cluster_project,
        "validate",
        "--env",
        ENV,
        "--target",
        "native",
        "--slurm",
        "--only",
        "collectives",
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    job_dir = job_dir_from(out.out)
    for node in ("n1", "n2"):
        report = load(job_dir / "nodes" / f"{node}.json")
        assert report["labels"]["target"] == "native" and report["status"] == "pass"
    rank0 = load(job_dir / "collectives" / "all.json")
    assert check_entry(rank0, "collectives")["details"]["world_size"] == 4
    assert load(job_dir / "fleet.json")["status"] == "pass"


@pytest.mark.slow
def test_a_job_that_cannot_be_followed_is_cancelled(
    slurm_env: SlurmCluster,
    pushed_image: str,
    cluster_project: Project,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """squeue failing after the submission (slurmctld unreachable) left the job running with
    nobody watching it. The shared controller cannot be stopped here, so this `squeue` is a
    script that answers as squeue does when it cannot reach slurmctld; sbatch, scontrol and
    scancel are the real ones, and the real cluster says the job was cancelled."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "scontrol", "scancel"):
        found = shutil.which(name)
        assert found is not None, f"no {name} on PATH"
        (bin_dir / name).symlink_to(found)
    squeue = bin_dir / "squeue"
    squeue.write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller "
        "(connect failure)' >&2\nexit 1\n"
    )
    squeue.chmod(0o755)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(bin_dir))
    code = in_project(cluster_project, "validate", "--env", ENV, "--target", "docker", "--slurm")
    monkeypatch.setenv("PATH", path)
    err = capsys.readouterr().err
    assert code == 1, err
    match = re.search(r"error: job (\d+) was submitted, but envbuilder cannot follow it: ", err)
    assert match is not None, err
    job_id = match.group(1)
    assert "Unable to contact slurm controller" in err
    assert f"envbuilder cancelled job {job_id}" in err and "Traceback" not in err
    assert job_state(slurm_env, job_id) == "CANCELLED"

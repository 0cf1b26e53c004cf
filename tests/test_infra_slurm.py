"""The local two-node Slurm cluster of `.ci/services.sh` (docs/cluster.md), tried as a user would:
sinfo, srun, sbatch --wait, scancel and docker from inside jobs. That the cluster ends a job at
its time limit is shown through envbuilder itself: tests/slurm/test_slurm_validate.py's
test_a_hanging_job_is_killed_at_its_time_limit (issue 24 merged the two: a raw `sleep` job here
proved the same cluster behaviour again and cost 80 s of CI).

The cluster is shared by everyone on the machine, so a test waits for free nodes rather than
assuming them, and cancels every job it submitted, whatever happens.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SlurmCluster, service_missing

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "debian:bookworm-slim"
LOOPBACK = "127.0.0.1"


def wait_until(what: str, timeout: float, check: Callable[[], bool]) -> None:
    """Poll `check` twice a second until it is true; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)


def job_fields(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """`scontrol show job` as {key: value} (JobState, Reason, TimeLimit, NodeList, ...)."""
    result = cluster.run("scontrol", "show", "job", "-o", job_id, timeout=30)
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"(\w+)=(\S*)", result.stdout))


def node_fields(cluster: SlurmCluster, node: str) -> dict[str, str]:
    """`scontrol show node` as {key: value} (NodeAddr, CPUTot, State, ...)."""
    result = cluster.run("scontrol", "show", "node", "-o", node, timeout=30)
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"(\w+)=(\S*)", result.stdout))


def queued_job_ids(cluster: SlurmCluster) -> set[str]:
    """The jobs squeue lists by default: pending, running and completing ones."""
    result = cluster.run("squeue", "-h", "-o", "%i", timeout=30)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def sbatch(cluster: SlurmCluster, *args: str, cwd: Path) -> str:
    """Submit a batch job and return its id."""
    result = cluster.run("sbatch", "--parsable", *args, cwd=cwd, timeout=60)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().split(";")[0]
    assert job_id.isdigit(), result.stdout
    return job_id


@pytest.fixture
def job_ids(slurm_cluster: SlurmCluster) -> Iterator[list[str]]:
    """Ids of the jobs a test submits: all cancelled afterwards, so none outlives its test."""
    ids: list[str] = []
    yield ids
    if ids:
        slurm_cluster.run("scancel", *ids, timeout=30)


def wait_for_idle_nodes(cluster: SlurmCluster, timeout: float = 120) -> dict[str, str]:
    states: dict[str, str] = {}

    def all_idle() -> bool:
        nonlocal states
        states = cluster.node_states()
        return all(states.get(node) == "idle" for node in cluster.nodes)

    wait_until(f"nodes {cluster.nodes} idle (last seen: {states})", timeout, all_idle)
    return states


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on `port`, from /proc/net/tcp{,6}."""
    found: set[str] = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.add(_proc_net_address(address))
    return found


def _proc_net_address(hex_address: str) -> str:
    """/proc/net/tcp writes IPv4 addresses as one little-endian hex word, IPv6 as four."""
    if len(hex_address) == 8:
        return ".".join(str(b) for b in reversed(bytes.fromhex(hex_address)))
    words = [bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, 32, 8)]
    return b"".join(words).hex()


def conf_ports(conf: Path) -> list[int]:
    """SlurmctldPort and every node's Port from slurm.conf."""
    text = conf.read_text()
    ports = [int(p) for p in re.findall(r"^SlurmctldPort=(\d+)", text, re.MULTILINE)]
    ports += [int(p) for p in re.findall(r"^NodeName=\S+ .*\bPort=(\d+)", text, re.MULTILINE)]
    return ports


def test_sinfo_shows_both_nodes_idle(slurm_cluster: SlurmCluster) -> None:
    states = wait_for_idle_nodes(slurm_cluster)
    assert states == {"n1": "idle", "n2": "idle"}
    result = slurm_cluster.run("sinfo", "-h", "-o", "%P %a %D %N", timeout=30)
    assert result.stdout.split() == ["debug*", "up", "2", "n[1-2]"]


def test_nodes_and_daemons_stay_on_loopback(slurm_cluster: SlurmCluster) -> None:
    for node in slurm_cluster.nodes:
        fields = node_fields(slurm_cluster, node)
        assert fields["NodeAddr"] == LOOPBACK, fields
        assert fields["CPUTot"] == "2", fields
    ports = conf_ports(slurm_cluster.conf)
    assert len(ports) == 3, ports  # slurmctld, slurmd n1, slurmd n2
    for port in ports:
        assert listening_addresses(port) == {LOOPBACK}, f"port {port}"


def test_srun_runs_one_task_on_each_node(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.run(
        "srun", "-N2", "-n2", "--time=2", "bash", "-c", 'echo "$SLURMD_NODENAME $SLURM_PROCID"'
    )
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["n1", "n2"], result.stdout
    assert sorted(line.split()[1] for line in lines) == ["0", "1"], result.stdout


def test_sbatch_wait_writes_files_from_both_nodes(
    slurm_cluster: SlurmCluster, tmp_path: Path, job_ids: list[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH -N2 -n2 --time=2\n"
        "set -eu\n"
        f'srun bash -c \'echo "$SLURM_JOB_ID" > "{out}/$SLURMD_NODENAME"\'\n'
    )
    # --wait: sbatch returns when the job has ended, with its exit status.
    result = slurm_cluster.run(
        "sbatch",
        "--wait",
        "--parsable",
        "-o",
        str(tmp_path / "slurm-%j.out"),
        str(script),
        cwd=tmp_path,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    job_id = result.stdout.strip().split(";")[0]
    job_ids.append(job_id)
    assert sorted(p.name for p in out.iterdir()) == ["n1", "n2"]
    for written in out.iterdir():
        assert written.read_text() == f"{job_id}\n"
    assert job_fields(slurm_cluster, job_id)["JobState"] == "COMPLETED"


def test_scancel_removes_pending_and_running_jobs(
    slurm_cluster: SlurmCluster, tmp_path: Path, job_ids: list[str]
) -> None:
    running = sbatch(
        slurm_cluster, "--time=2", "-o", "/dev/null", "--wrap", "sleep 300", cwd=tmp_path
    )
    job_ids.append(running)
    # Held back by its begin time, so it pends however free the nodes are.
    pending = sbatch(
        slurm_cluster,
        "--time=2",
        "--begin=now+3600",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
        cwd=tmp_path,
    )
    job_ids.append(pending)
    wait_until(
        f"job {running} running",
        60,
        lambda: job_fields(slurm_cluster, running)["JobState"] == "RUNNING",
    )
    assert job_fields(slurm_cluster, pending)["JobState"] == "PENDING"
    assert {running, pending} <= queued_job_ids(slurm_cluster)

    result = slurm_cluster.run("scancel", running, pending, timeout=30)
    assert result.returncode == 0, result.stderr
    wait_until(
        f"jobs {running}, {pending} gone from squeue",
        60,
        lambda: not {running, pending} & queued_job_ids(slurm_cluster),
    )
    for job_id in (running, pending):
        assert job_fields(slurm_cluster, job_id)["JobState"] == "CANCELLED"


def test_docker_runs_from_jobs_on_both_nodes(
    slurm_cluster: SlurmCluster, docker_client: Any
) -> None:
    import docker.errors

    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        service_missing(f"{IMAGE} is not in the engine (.ci/services.sh seeds it)")
    # Each task runs a container on the host network, as a training job on a node would;
    # --pull never: the seeded image, no registry traffic from inside the job.
    result = slurm_cluster.run(
        "srun",
        "-N2",
        "-n2",
        "--time=2",
        "docker",
        "run",
        "--rm",
        "--network",
        "host",
        "--pull",
        "never",
        "-e",
        "SLURMD_NODENAME",
        IMAGE,
        "sh",
        "-c",
        'echo "$SLURMD_NODENAME $(cat /etc/debian_version)"',
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["n1", "n2"], result.stdout
    assert all(line.split()[1].startswith("12.") for line in lines), result.stdout


# --- the fixture's rule: skip locally, fail under CI, when the cluster is not there ---

_PROBE_TEST = """
def test_cluster(slurm_cluster):
    pass
"""


def _run_fixture_probe(tmp_path: Path, ci: str, slurm_conf: Path) -> str:
    """A child pytest whose one test uses `slurm_cluster`, with SLURM_CONF as given."""
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_probe.py").write_text(_PROBE_TEST)
    env = {**os.environ, "CI": ci, "SLURM_CONF": str(slurm_conf)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return f"exit={result.returncode}\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize(("ci", "expect"), [("", "exit=0"), ("true", "exit=1")])
def test_missing_cluster_skips_locally_and_fails_under_ci(
    tmp_path: Path, ci: str, expect: str
) -> None:
    output = _run_fixture_probe(tmp_path, ci, tmp_path / "absent" / "slurm.conf")
    assert output.startswith(expect), output
    assert "slurm.conf (SLURM_CONF) does not exist" in output or "no Slurm client" in output
    assert ".ci/services.sh" in output
    if ci:
        assert "CI=true requires it" in output
    else:
        assert "1 skipped" in output


@pytest.mark.slow
def test_cluster_without_a_controller_is_missing(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # The real slurm.conf, pointed at a port where no slurmctld listens (9: discard): what a
    # machine looks like after a reboot, before services.sh ran again.
    conf = tmp_path / "slurm.conf"
    text = slurm_cluster.conf.read_text()
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=\d+$", "SlurmctldPort=9", text))
    assert conf.read_text() != text
    output = _run_fixture_probe(tmp_path, "", conf)
    assert output.startswith("exit=0"), output
    assert "1 skipped" in output
    assert "is not up: sinfo says n1=absent, n2=absent" in output

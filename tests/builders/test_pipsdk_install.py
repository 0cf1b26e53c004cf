"""The pip SDK's `rocm` is an sdist (as AMD publishes it): an image or venv build must build it
offline, from the build context's wheels alone. Shown here with the real pip and uv on this
host, against the replica of AMD's index (tests/replica; the stand-in sdist declares the real
one's build requirement, `setuptools>=70.2.0`):

  * the exact pip command the rendered Dockerfile runs, in a fresh venv, on the wheelhouse
    `envbuilder build` assembles from the replica-locked pylock: the sdist is built with
    setuptools taken from the wheelhouse (`--find-links`), every file hash-checked; without
    `--find-links` the same command fails (pip's isolated build env has no index then);
  * the venv builders' `uv pip sync --offline --find-links` does the same;
  * `envbuilder lock` refuses a pylock whose sdist's build backend no wheel of it satisfies.

The host has Python 3.11 only, so the flagship spec is copied with `python = "3.11"` (the
replica's torch stand-ins have cp311 and cp312 wheels). Offline: nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replica.catalog import Catalog, load_catalog
from replica.distributions import BUILD_REQUIRES
from replica.server import ReplicaServer, serve

from envbuilder.builders.venvcommands import uv_sync_command
from envbuilder.commands._cli import main
from envbuilder.core.project import Project
from envbuilder.host import pyfinder
from envbuilder.image.oci.config import SPLIT_COMMENT
from envbuilder.lock import wheelcache
from envbuilder.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
AMD = "https://repo.amd.com/rocm/whl-multi-arch/"
FLAGSHIP_PYTHON = 'gfx1100: the lock holds device-gfx1100 only\npython = "3.12"\n'
# The Python this host has (the replica's stand-ins carry cp311 and cp312 tags).
HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture()
def replica(catalog: Catalog, tmp_path: Path) -> Iterator[ReplicaServer]:
    with serve(catalog, tmp_path / "replica", round_=3) as server:
        yield server


@pytest.fixture()
def project(replica: ReplicaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped spec, AMD's index mirrored by the replica, PyPI played by it, the flagship
    on this host's Python, the wheel cache in tmp_path."""
    if HOST_PYTHON not in ("3.11", "3.12"):
        pytest.skip(f"the replica's torch stand-ins are cp311/cp312; this is Python {HOST_PYTHON}")
    text = (REPO / "environments.toml").read_text(encoding="utf-8")
    old = f'url = "{AMD}"\n'
    assert text.count(old) == 1 and text.count(FLAGSHIP_PYTHON) == 1
    text = text.replace(old, f'{old}mirror = "{replica.url("amd")}"\n')
    text = text.replace(FLAGSHIP_PYTHON, FLAGSHIP_PYTHON.replace("3.12", HOST_PYTHON))
    if HOST_PYTHON != "3.12":  # ubuntu:24.04's python3 is 3.12; Debian 12's is 3.11
        text = text.replace(
            'targets = ["docker", "wsl2", "windows"]', 'targets = ["docker", "windows"]', 1
        )
        text = text.replace(
            "[env.rocm714.docker]\n", '[env.rocm714.docker]\nbase = "debian:bookworm-slim"\n', 1
        )
    root = tmp_path / "proj"
    root.mkdir()
    (root / "environments.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("ENVBUILDER_DEFAULT_INDEX", replica.url("pypi"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    return root / "environments.toml"


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No pip configuration of this host (its index or find-links settings) reaches pip."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, HOME=str(tmp_path / "home"))
    return env


def rendered_pip_command(dockerfile: str) -> str:
    """The Dockerfile's install-locked RUN, as one shell command (continuations joined, the
    context's removal dropped)."""
    m = re.search(
        r"^RUN (/opt/venv/bin/python -m pip install .*?)\n && rm -rf", dockerfile, re.S | re.M
    )
    assert m is not None, dockerfile
    return m.group(1).replace("\\\n", " ").rstrip(" \\")


def wheelhouse(spec: Path, target: str, context: Path) -> Path:
    """What `envbuilder build` puts in the image's build context (envbuilder/), here with the
    paths of this host: the locked files (hash-checked into the cache) and requirements.txt."""
    project = Project.from_spec(spec)
    env = load_spec(spec).env("rocm714")
    return wheelcache.write_wheelhouse(
        project, env, target, context, in_image_prefix=str(context / "wheels"), indexes=env.indexes
    )


def installed(venv: Path) -> dict[str, str]:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import importlib.metadata as m, json; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions()}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, str] = json.loads(out.stdout)
    return data


def test_rendered_pip_command_builds_the_locked_sdist_offline(
    project: Path, tmp_path: Path
) -> None:
    assert main(["lock", "--spec", str(project), "--env", "rocm714", "--no-base-digest"]) == 0
    assert main(["render", "--spec", str(project), "--env", "rocm714", "--target", "docker"]) == 0
    dockerfile = (project.parent / "dockerfiles" / "rocm714" / "Dockerfile").read_text()
    command = rendered_pip_command(dockerfile)
    assert command.split() == [
        "/opt/venv/bin/python",
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--require-hashes",
        "--find-links",
        "/tmp/envbuilder/wheels",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-r",
        "/tmp/envbuilder/requirements.txt",
    ]
    context = tmp_path / "context" / "envbuilder"
    requirements = wheelhouse(project, "docker", context)
    lines = requirements.read_text().splitlines()
    sdists = [line for line in lines if ".tar.gz " in line]
    assert len(sdists) == 1 and "/rocm-7.14.1.tar.gz --hash=sha256:" in sdists[0]
    assert any("/setuptools-80.9.0-py3-none-any.whl --hash=sha256:" in line for line in lines)
    env = clean_env(tmp_path)

    def run(cmd: str) -> subprocess.CompletedProcess[str]:
        venv = tmp_path / f"venv{len(list(tmp_path.glob('venv*')))}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
        here = cmd.replace("/opt/venv", str(venv)).replace("/tmp/envbuilder", str(context))
        return subprocess.run(
            shlex.split(here), capture_output=True, text=True, env=env, check=False
        )

    # control: without --find-links pip's isolated build env has no index and fails
    without = run(command.replace(" --find-links /tmp/envbuilder/wheels", ""))
    assert without.returncode != 0
    assert f"No matching distribution found for {BUILD_REQUIRES}" in without.stderr, without.stderr
    done = run(command)
    assert done.returncode == 0, done.stdout + done.stderr
    venv = tmp_path / "venv1"
    got = installed(venv)
    assert got["rocm"] == "7.14.1"  # built from the sdist, in this venv
    assert got["torch"] == "2.12.0+rocm7.14.1" and got["rocm-sdk-device-gfx1100"] == "7.14.1"
    assert "Building wheel for rocm" in done.stdout or "Building wheel for rocm" in done.stderr
    # every file hash-checked: a file that is not the locked one is refused
    victim = next(context.glob("wheels/filelock-*.whl"))
    victim.write_bytes(victim.read_bytes() + b"\0")
    tampered = run(command)
    assert (
        tampered.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in tampered.stderr
    ), tampered.stderr


def test_venv_builders_uv_sync_builds_the_locked_sdist_offline(
    project: Path, tmp_path: Path
) -> None:
    """builders/venv.py's sync command (native and windows targets) on the same files."""
    assert main(["lock", "--spec", str(project), "--env", "rocm714", "--no-base-digest"]) == 0
    context = tmp_path / "house"
    requirements = wheelhouse(project, "docker", context)  # docker's pylock: Linux wheels
    env = clean_env(tmp_path)
    uv = pyfinder.uv_bin()
    venv = tmp_path / "uvvenv"
    subprocess.run(
        [uv, "venv", "--no-project", "--python", sys.executable, str(venv)],
        check=True,
        env=env,
        capture_output=True,
    )
    python = venv / "bin" / "python"
    without = subprocess.run(
        uv_sync_command(uv, python, requirements),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert without.returncode != 0 and "setuptools" in without.stderr, without.stderr
    done = subprocess.run(
        uv_sync_command(uv, python, requirements, context / "wheels"),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert installed(venv)["rocm"] == "7.14.1"


def test_lock_refuses_an_sdist_whose_build_backend_is_not_locked(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An env that locks `rocm` without torch (whose dependencies bring setuptools): the pylock
    holds the sdist but no setuptools wheel, so no offline build could succeed."""
    text = project.read_text(encoding="utf-8") + (
        '\n[env.sdkonly]\naccelerator = "cpu"\npython = "' + HOST_PYTHON + '"\n'
        'packages = ["rocm==7.14.1", "rocm-sdk-core==7.14.1"]\n'
        'index_pins = { rocm = "amd-rocm", rocm-sdk-core = "amd-rocm" }\n'
        'targets = ["native"]\n'
    )
    project.write_text(text, encoding="utf-8")
    assert main(["lock", "--spec", str(project), "--env", "sdkonly"]) == 1
    err = capsys.readouterr().err
    assert (
        "env 'sdkonly', target native: rocm 7.14.1 is locked as an sdist "
        "(rocm-7.14.1.tar.gz)" in err
    ), err
    assert (
        f"its build backend needs {BUILD_REQUIRES}, which no wheel in this pylock satisfies" in err
    )
    assert not (project.parent / "lockfiles" / "pylock.sdkonly-native.toml").exists()
    # with the backend listed, the same env locks
    project.write_text(
        text.replace('"rocm-sdk-core==7.14.1"]', f'"rocm-sdk-core==7.14.1", "{BUILD_REQUIRES}"]'),
        encoding="utf-8",
    )
    assert main(["lock", "--spec", str(project), "--env", "sdkonly"]) == 0


def _with_native_target(project: Path) -> None:
    """The flagship spec with `native` among rocm714's targets."""
    text = project.read_text(encoding="utf-8")
    section = text.index("[env.rocm714]")
    start = text.index("targets = [", section)
    end = text.index("]", start)
    targets = text[start:end] + ', "native"'
    project.write_text(text[:start] + targets + text[end:], encoding="utf-8")


def _activated(venv: Path, name: str) -> str:
    """The value of `name` after sourcing the venv's bin/activate in bash."""
    proc = subprocess.run(
        ["bash", "-c", f'. {shlex.quote(str(venv / "bin" / "activate"))} && printf %s "${name}"'],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_native_venv_activation_sets_rocm_path_from_rocm_sdk(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pip-SDK venv's ROCm lives inside it: after the install the builder asks the venv's
    `rocm-sdk path --root` and writes the answer as ROCM_PATH; a rebuild finds it current."""
    _with_native_target(project)
    assert main(["lock", "--spec", str(project), "--env", "rocm714", "--no-base-digest"]) == 0
    venv = tmp_path / "venv"
    build = ["build", "--spec", str(project), "--env", "rocm714", "--target", "native"]
    assert main([*build, "--path", str(venv)]) == 0, capsys.readouterr().err
    asked = subprocess.run(
        [str(venv / "bin" / "rocm-sdk"), "path", "--root"], capture_output=True, text=True
    )
    assert asked.returncode == 0, asked.stderr
    root = asked.stdout.strip()
    site = venv / "lib" / f"python{HOST_PYTHON}" / "site-packages"
    assert Path(root) == site.resolve() / "_rocm_sdk_devel"
    assert _activated(venv, "ROCM_PATH") == root
    capsys.readouterr()
    assert main([*build, "--path", str(venv)]) == 0
    assert "venv is current" in capsys.readouterr().err

    # A venv whose rocm-sdk no longer answers is not current: the build syncs it again, which
    # puts the command back, and the activation keeps the same root.
    (venv / "bin" / "rocm-sdk").unlink()
    assert main([*build, "--path", str(venv)]) == 0
    assert "venv is current" not in capsys.readouterr().err
    assert (venv / "bin" / "rocm-sdk").is_file()
    assert _activated(venv, "ROCM_PATH") == root


def test_flagship_image_builds_from_the_replica_lock(
    project: Path,
    replica: ReplicaServer,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The whole docker path of a pip-SDK env, with the real engine: lock against the replica,
    render, build (the locked `rocm` sdist built offline inside the image, then ROCM_PATH linked
    from `rocm-sdk path --root`), and the image's venv answers from that root. (The stand-ins'
    modules are rocm_sdk and _<name>_standin: nothing of torch runs.)"""
    assert main(["lock", "--spec", str(project), "--env", "rocm714"]) == 0, capsys.readouterr()
    assert main(["render", "--spec", str(project), "--env", "rocm714"]) == 0
    capsys.readouterr()
    build = ["build", "--spec", str(project), "--env", "rocm714", "--target", "docker", "--json"]
    assert main(build) == 0, capsys.readouterr().err
    built = json.loads(capsys.readouterr().out)
    image = built["artifacts"][0]["reference"]
    try:
        out = docker_client.containers.run(
            image,
            [
                "sh",
                "-c",
                'printf "%s\\n" "$ROCM_PATH" "$(readlink /opt/venv/rocm)"; '
                "/opt/venv/bin/python -c 'import rocm_sdk, _torch_standin' && echo imported",
            ],
            remove=True,
        ).decode()
        rocm_path, link, imported = out.splitlines()
        assert rocm_path == "/opt/venv/rocm"
        assert link.startswith("/opt/venv/lib/python") and link.endswith("/_rocm_sdk_devel")
        assert imported == "imported"
        # The GPU env's image is reproducible too: a no-cache rebuild gives the same digest.
        # (--verify builds without any cache and fails unless the lock's recorded digest comes.)
        capsys.readouterr()
        assert main([*build, "--verify"]) == 0, capsys.readouterr().err
        again = json.loads(capsys.readouterr().out)["artifacts"][0]
        assert again["digest"] == built["artifacts"][0]["digest"]
        _a_bump_changes_one_layer(project, replica, docker_client, capsys, image)
    finally:
        docker_client.images.remove(image, force=True)


def _a_bump_changes_one_layer(
    project: Path,
    replica: ReplicaServer,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
    image: str,
) -> None:
    """Issue 31: bumping a small package (the replica's round 4 publishes filelock 3.22.0)
    changes that package's layer only; torch's and the ROCm SDK's stay byte-identical."""
    before = package_layers(docker_client, image)
    assert {"torch", "rocm-sdk-core", "filelock"} <= set(before), before
    replica.publish(4)
    lock = ["lock", "--spec", str(project), "--env", "rocm714", "--upgrade-package", "filelock"]
    assert main(lock) == 0, capsys.readouterr()
    assert main(["render", "--spec", str(project), "--env", "rocm714"]) == 0
    capsys.readouterr()
    build = ["build", "--spec", str(project), "--env", "rocm714", "--target", "docker", "--json"]
    assert main(build) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    bumped = json.loads(out)["artifacts"][0]["reference"]
    try:
        after = package_layers(docker_client, bumped)
        changed = {name for name in after if after[name] != before.get(name)}
        assert changed == {"filelock"}, (before, after)
        assert after["filelock"][0] == "3.22.0"
        assert re.search(r"\b1 of \d+ layers above the base are new against", err), err
    finally:
        docker_client.images.remove(bumped, force=True)


def package_layers(docker_client: Any, image: str) -> dict[str, tuple[str, str]]:
    """Distribution name -> (version, diff_id) of an image's layers by package (the history
    comments envbuilder writes; those layers are the image's top ones, in history order)."""
    history = docker_client.api.history(image)[::-1]  # the API lists the newest first
    comments = [h.get("Comment", "") for h in history]
    labels = [c.removeprefix(SPLIT_COMMENT) for c in comments if c.startswith(SPLIT_COMMENT)]
    diff_ids = docker_client.images.get(image).attrs["RootFS"]["Layers"][-len(labels) :]
    out = {}
    for label, diff_id in zip(labels, diff_ids, strict=True):
        name, _, version = label.partition(" ")
        out[name.replace("_", "-").lower()] = (version, diff_id)
    return out

"""Multi-env commands report every env (issue 33): `build`/`validate --env a --env b` with `a`
failing still run `b`, print and --json a result for both, and exit non-zero; an interrupt still
ends the whole run at once.

The envs are real: a spec of two envs that resolve offline from a folder of two wheels, of which
only `good` is locked. `broken` then fails cheaply and for real (its lock is missing), before
`good`, which is built into a native venv and validated by the probe (it has no torch, so the
probe runs and fails: `fail`, not an error).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_json import run_json
from test_lock_support import FAKE_INDEX_URL, make_wheel

ENV = """
[env.{name}]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==1.0+cpu", "tinydep==2.0"]
index_pins = {{ tinytorch = "fake", tinydep = "fake" }}
targets = ["native"]
"""
INDEX = """
[indexes.fake]
url = "{url}"
mirror = "{mirror}"
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(project folder, environment): envs `broken` (never locked) and `good` (locked)."""
    root = tmp_path_factory.mktemp("pair")
    mirror = root / "mirror"
    make_wheel(mirror, "tinytorch", "1.0+cpu", requires=("tinydep",))
    make_wheel(mirror, "tinydep", "2.0")
    project = root / "project"
    project.mkdir()
    (project / "environments.toml").write_text(
        INDEX.format(url=FAKE_INDEX_URL, mirror=mirror)
        + ENV.format(name="broken")
        + ENV.format(name="good"),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILDER_MIRROR_")}
    env["ENVBUILDER_CACHE"] = str(root / "cache")
    locked = run_json(project, "lock", "--env", "good", "--json", env=env)
    assert locked.code == 0, locked.stderr
    assert not (project / "lockfiles" / "broken.lock.toml").exists()
    return project, env


def _run(project: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuilder", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_build_goes_on_after_a_failed_env(pair: tuple[Path, dict[str, str]]) -> None:
    project, env = pair
    venv = project / ".envbuilder" / "venvs" / "good-native"
    argv = ("build", "--target", "native", "--env", "broken", "--env", "good")
    result = run_json(project, *argv, "--json", env=env)
    assert result.code == 1, result.stderr
    assert result.obj["ok"] is False
    broken, good = result.obj["artifacts"]
    assert broken["env"] == "broken" and broken["state"] == "failed"
    assert broken["error"]["kind"] == "LockError" and broken["error"]["exit_code"] == 1
    assert "broken.lock.toml" in broken["error"]["message"]
    assert good == {
        "env": "good",
        "target": "native",
        "reference": str(venv),
        "digest": None,
        "state": "built",
        "sbom": str(project / "reports" / "good.native.cdx.json"),
    }
    assert (venv / "bin" / "python").exists()  # built for real, after `broken` failed
    assert f"error: broken/native: {broken['error']['message']}" in result.stderr
    assert "1 of 2 envs failed (broken)" in result.stderr
    # Without --json: the built env's line on stdout, the failed env's error on stderr.
    text = _run(project, env, *argv)
    assert text.returncode == 1, text.stderr
    assert text.stdout == f"good native {venv} - (up to date)\n"
    assert "error: broken/native: " in text.stderr and "Traceback" not in text.stderr


def test_validate_goes_on_after_a_failed_env(pair: tuple[Path, dict[str, str]]) -> None:
    project, env = pair
    built = run_json(project, "build", "--target", "native", "--env", "good", "--json", env=env)
    assert built.code == 0, built.stderr
    argv = ("validate", "--target", "native", "--env", "broken", "--env", "good")
    result = run_json(project, *argv, "--json", env=env)
    assert result.code == 1 and result.obj["ok"] is False, result.stderr
    broken, good = result.obj["reports"]
    assert broken["env"] == "broken" and broken["status"] == "error"
    assert broken["error"]["message"] and "report" not in broken
    report = project / "reports" / "good.native.json"
    assert good == {"env": "good", "target": "native", "status": "fail", "report": str(report)}
    assert report.exists()  # the probe ran for `good`, after `broken` failed
    text = _run(project, env, *argv)
    assert text.returncode == 1
    assert text.stdout == f"good native fail {report}\n"
    assert "error: broken/native: " in text.stderr


def test_one_failed_env_alone_keeps_its_exit_code(pair: tuple[Path, dict[str, str]]) -> None:
    """One env: its error on stderr as before (no env prefix), its own exit code."""
    project, env = pair
    result = run_json(project, "build", "--target", "native", "--env", "broken", "--json", env=env)
    assert result.code == 1
    (entry,) = result.obj["artifacts"]
    assert entry["state"] == "failed"
    assert f"error: {entry['error']['message']}\n" in result.stderr
    assert "envs failed" not in result.stderr


_INTERRUPTED = """
import os, signal, sys, types, weakref
from envbuilder.core import interrupts
from envbuilder.core.ui import UI
from envbuilder.commands._targets import each_env

ran = []

class Thing:
    pass

def drop_a_sigint(_ref):
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(100000))  # the handler raises here, inside the callback, which drops it

def work(env):
    ran.append(env.name)
    if env.name == "a":
        if sys.argv[1] == "raised":
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100000))
        thing = Thing()
        ref = weakref.ref(thing, drop_a_sigint)
        del thing
    return env.name

interrupts.install()
envs = [types.SimpleNamespace(name=n) for n in ("a", "b")]
try:
    each_env(envs, "native", UI(), work)
    print("finished", ran)
except KeyboardInterrupt as exc:
    print("interrupted", interrupts.exit_code(exc), ran)
"""


@pytest.mark.parametrize("how", ["raised", "dropped"])
def test_an_interrupt_ends_the_whole_run(how: str) -> None:
    """Ctrl-C during env `a` stops the run: `b` never starts, also when Python dropped the
    interrupt where it could not raise it (a weakref callback) and `a`'s work ran on."""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED, how],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout == "interrupted 130 ['a']\n", done.stdout + done.stderr

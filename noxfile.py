"""nox sessions: thin wrappers over the `envbuilder` CLI, plus tests and lint.

    nox -s tests     the test suite (real Docker engine and registries, which CI starts)
    nox -s lint                  ruff check, ruff format --check, mypy --strict over the package,
                                 the tests and the benchmarks (`-- --fix`; `-- PATH ...` checks
                                 only those paths)
    nox -s render                re-render dockerfiles/, wsl/, windows/ (`-- --check` to only check)
    nox -s tests-floor           the lock tests with uv, packaging and pip at their declared floors
    nox -s package               build the sdist and wheel, check their metadata, install the
                                 wheel in a clean venv and run `envbuilder --version` and `check`

Extra arguments after `--` are passed through (session.posargs).

The sessions' Python: $ENVBUILDER_NOX_PYTHON when set (a version or a path), else python3.11
from PATH, else uv's 3.11 (fetched once where uv is installed), else a hint: session_python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
# A session whose Python is missing fails (nox's default is to skip it and exit 0, so the README's
# first command would "succeed" having built nothing).
nox.options.error_on_missing_interpreters = True

#: The Python the sessions prefer: Debian bookworm's, which the CPU image and CI's torch wheel
#: (cp311, in CI's find-links folder) share. envbuilder itself runs on 3.11 and newer.
PREFERRED_PYTHON = "3.11"

#: A user's choice of the sessions' Python: a version ("3.12") or an interpreter's path.
PYTHON_VARIABLE = "ENVBUILDER_NOX_PYTHON"


def session_python(
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[[list[str]], str | None] | None = None,
) -> str:
    """The Python the sessions run on: $ENVBUILDER_NOX_PYTHON; else python3.11 from PATH; else,
    where uv is installed, uv's 3.11 (`uv python find`, then `uv python install`, which downloads
    a standalone CPython once into uv's cache); else "3.11", after a hint on stderr (nox then
    fails the session: error_on_missing_interpreters)."""
    if chosen := environ.get(PYTHON_VARIABLE, "").strip():
        return chosen
    if which(f"python{PREFERRED_PYTHON}"):
        return PREFERRED_PYTHON
    uv = which("uv")
    if uv is not None:
        run = run or _output
        found = run([uv, "python", "find", PREFERRED_PYTHON])
        if found is None:
            sys.stderr.write(f"nox: python{PREFERRED_PYTHON} not found; uv fetches it (once)\n")
            run([uv, "python", "install", PREFERRED_PYTHON])
            found = run([uv, "python", "find", PREFERRED_PYTHON])
        if found:
            return found
    sys.stderr.write(python_hint(uv is not None))
    return PREFERRED_PYTHON


def python_hint(has_uv: bool) -> str:
    """What to do when no preferred Python can be had (said before nox fails)."""
    fetch = (
        f"uv could not fetch it (offline? `uv python install {PREFERRED_PYTHON}` says why)"
        if has_uv
        else "install uv (https://docs.astral.sh/uv/) and the sessions fetch it themselves"
    )
    return (
        f"nox: no python{PREFERRED_PYTHON} on PATH and {fetch}. Or install Python "
        f"{PREFERRED_PYTHON}, or run the sessions on another Python envbuilder supports (3.11 "
        f"or newer): {PYTHON_VARIABLE}=3.12 nox -s ... (the tests then fetch torch for it)\n"
    )


def _output(argv: list[str]) -> str | None:
    """The first line `argv` prints, None when it fails or prints nothing."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else None


PYTHON = session_python(os.environ)
# The CPU torch wheel the test suite imports; pip takes it from the machine's find-links folder
# when present (see docs/lock.md), otherwise from the default index.
TORCH = "torch==2.13.0"


def _install(session: nox.Session, *extras: str) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest options after --)."""
    _install(session, "test")
    session.install(TORCH)
    session.run("pytest", *test_workers(os.environ), *session.posargs)


def test_workers(environ: Mapping[str, str]) -> list[str]:
    """pytest-xdist options: ENVBUILDER_TEST_WORKERS workers (default 3; 0 runs in one process).

    Three on CI's two cores, because most of the suite waits on uv, pip, the engine or Slurm
    rather than computing; tests/conftest.py keeps the engine and Slurm tests on one worker.
    """
    workers = environ.get("ENVBUILDER_TEST_WORKERS", "3").strip()
    if not workers.isdigit():
        raise ValueError(f"ENVBUILDER_TEST_WORKERS={workers!r}: a number of workers (0: none)")
    if workers == "0":
        return []
    return ["-n", workers, "--dist", "loadgroup"]


# --- dependency floors (issue 22; docs/lock.md, "Dependency floors") ---

#: The tests of what the floors are declared for: uv's resolution and pylock output (uv),
#: Pylock.from_dict/select (packaging), pip installing a pylock (the test extra's pip).
FLOOR_TESTS = (
    "tests/lock/test_lock.py",
    "tests/lock/test_lock_model.py",
    "tests/lock/test_lock_changes.py",
    "tests/lock/test_safety_lock.py",
    "tests/lock/test_wheelcache.py",
    "tests/lock/test_mirror_config.py",
)


def declared_floors(pyproject: dict[str, Any]) -> list[str]:
    """`NAME==X` for each `NAME>=X` of envbuilder's dependencies, and for the test extra's pip
    (the pip that installs pylocks in the tests), read from pyproject.toml: the floors CI
    tests are the declared ones by construction."""
    from packaging.requirements import Requirement

    project = pyproject["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [
        r for r in map(Requirement, project["optional-dependencies"]["test"]) if r.name == "pip"
    ]
    floors = []
    for req in reqs:
        lowest = [s.version for s in req.specifier if s.operator == ">="]
        if len(lowest) != 1:
            raise ValueError(f"{req}: a dependency of envbuilder needs one `>=` floor")
        floors.append(f"{req.name}=={lowest[0]}")
    return floors


@nox.session(name="tests-floor", python=PYTHON)
def tests_floor(session: nox.Session) -> None:
    """The lock tests with uv, packaging and pip at the floors pyproject.toml declares."""
    import pathlib
    import tomllib

    floors = declared_floors(tomllib.loads(pathlib.Path("pyproject.toml").read_text("utf-8")))
    constraints = pathlib.Path(session.create_tmp()) / "floors.txt"
    constraints.write_text("".join(f"{f}\n" for f in floors), encoding="utf-8")
    session.install("-c", str(constraints), "-e", ".[test]")
    session.run("python", "-m", "pip", "freeze", silent=False)  # what was tested, in the log
    session.run("pytest", *FLOOR_TESTS, *session.posargs)


LINT_PATHS = ("envbuilder", "tests", "benchmarks", "noxfile.py", ".ci")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and mypy --strict (package, tests, benchmarks)."""
    import pathlib

    _install(session, "lint", "test")  # mypy reads the tests' imports (pytest, hypothesis, ...)
    # Arguments naming an existing file or folder are paths, for both tools; the rest are
    # ruff options, in their order (`--select E501` keeps its value).
    paths = [a for a in session.posargs if not a.startswith("-") and pathlib.Path(a).exists()]
    options = [a for a in session.posargs if a not in paths]
    session.run("ruff", "check", *options, *(paths or LINT_PATHS))
    if "--fix" not in options:  # a fixing run leaves formatting to `ruff format`
        session.run("ruff", "format", "--check", *(paths or LINT_PATHS))
    session.run("mypy", *paths)  # no paths: the files of [tool.mypy] (pyproject.toml)


# --- sessions added by feature owners below (keep one docstring line each) ---


# --- the distribution (issue 34; docs/install.md) ---


def _session_python(session: nox.Session) -> str:
    """The session venv's interpreter (the clean venv is made from the same Python)."""
    import pathlib

    return str(pathlib.Path(session.bin) / "python")


@nox.session(python=PYTHON)
def package(session: nox.Session) -> None:
    """Build the sdist and wheel, twine-check them, run the wheel from a clean venv."""
    import pathlib
    import shutil

    # uv builds (PEP 517, isolated) and makes the clean venv: seconds where pip takes a minute.
    session.install("twine", "uv")
    tmp = pathlib.Path(session.create_tmp()).resolve()  # absolute: the checks run from there
    dist, clean = tmp / "dist", tmp / "clean"
    shutil.rmtree(dist, ignore_errors=True)  # a stale wheel must not be the one installed
    session.run("uv", "build", "--quiet", "--out-dir", str(dist), ".")
    built = sorted([*dist.glob("*.whl"), *dist.glob("*.tar.gz")])
    session.run("twine", "check", "--strict", *map(str, built))
    wheel = next(dist.glob("*.whl"))
    session.run(
        "uv", "venv", "--quiet", "--clear", "--python", _session_python(session), str(clean)
    )
    python = str(clean / "bin" / "python")
    session.run("uv", "pip", "install", "--quiet", "--python", python, str(wheel))
    # From outside the checkout, so the installed package (not ./envbuilder) answers.
    exe = str(clean / "bin" / "envbuilder")
    spec = str(pathlib.Path("environments.toml").resolve())
    with session.chdir(tmp):
        session.run(exe, "--version", external=True)
        session.run(exe, "check", "--spec", spec, external=True)


# --- venv targets (issue 7; docs/venv.md) ---


def _venv_build_and_validate(session: nox.Session, target: str, default_env: str) -> None:
    """`-- ENV [ENV ...] [--path DIR] [validate options]`: each env is built, then validated."""
    args = list(session.posargs)
    first_opt = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    names, extra = args[:first_opt] or [default_env], args[first_opt:]
    path: list[str] = []
    if "--path" in extra:  # build takes --path too; the rest is for validate only
        i = extra.index("--path")
        path = extra[i : i + 2]
    path += [a for a in extra if a.startswith("--path=")]
    _install(session)
    for env in names:
        session.run("envbuilder", "build", "--target", target, "--env", env, *path)
        session.run("envbuilder", "validate", "--target", target, "--env", env, *extra)


@nox.session(name="build-native", python=PYTHON)
def build_native(session: nox.Session) -> None:
    """Build an env's Linux venv from its lock and validate it (`-- cpu`)."""
    import sys

    if sys.platform != "linux":
        session.error(
            f"build-native builds a Linux venv; this is {sys.platform}. "
            "On Windows use `nox -s build-windows -- ENV`."
        )
    _venv_build_and_validate(session, "native", "cpu")


@nox.session(name="build-windows", python=PYTHON)
def build_windows(session: nox.Session) -> None:
    """On Windows: build an env's venv (py launcher, AMD wheels) and validate it (`-- rocm714`)."""
    import sys

    if sys.platform != "win32":
        session.error(
            f"build-windows needs Windows (this is {sys.platform}): it creates the venv with "
            "the `py` launcher's Python and installs the env's Windows wheels. Run it on the "
            "Windows machine; here use `nox -s build-native -- ENV` (a Linux venv), "
            "build-docker or build-wsl2."
        )
    _venv_build_and_validate(session, "windows", "rocm714")


# --- docker target (issue 5; docs/docker.md) ---


#: Where the demo re-pins a base image this machine's registry does not serve (docs/docker.md,
#: "First command"): a scratch copy of the project; the committed lock is never rewritten.
DEMO_SCRATCH = "build/demo"


@nox.session(name="build-docker", python=PYTHON)
def build_docker(session: nox.Session) -> None:
    """Build envs' Docker images and validate the probe inside (`-- cpu [ENV ...] [--level L]`)."""
    import json
    import pathlib

    args = list(session.posargs)
    first_opt = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    names, extra = args[:first_opt] or ["cpu"], args[first_opt:]
    _install(session)
    marker = pathlib.Path(DEMO_SCRATCH) / ".envbuilder-scratch.json"
    for env in names:
        build = ("envbuilder", "build", "--target", "docker", "--env", env)
        session.run(*build, "--repin-base-into", DEMO_SCRATCH)
        # The build says when it re-pinned in the scratch copy; the image is then that copy's.
        repinned = marker.is_file() and env in json.loads(marker.read_text("utf-8"))["repinned"]
        spec = ["--spec", f"{DEMO_SCRATCH}/environments.toml"] if repinned else []
        session.run("envbuilder", "validate", "--target", "docker", "--env", env, *spec, *extra)
        if repinned:
            session.log(f"report: {DEMO_SCRATCH}/reports/{env}.docker.json (the scratch copy's)")


@nox.session(python=PYTHON)
def validate(session: nox.Session) -> None:
    """Run the probe inside built envs (`-- --target docker --env cpu --level standard`)."""
    _install(session)
    args = list(session.posargs)
    if not any(a == "--target" or a.startswith("--target=") for a in args):
        args = ["--target", "docker", *args]
    session.run("envbuilder", "validate", *args)


# --- compare (issue 8; docs/compare.md) ---


@nox.session(python=PYTHON)
def compare(session: nox.Session) -> None:
    """Validate an env in two or more targets (--repeat 3) and compare (`-- cpu docker native`)."""
    args = list(session.posargs)
    first_opt = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    words, extra = args[:first_opt], args[first_opt:]
    if len(words) < 3:
        session.error(
            "usage: nox -s compare -- ENV TARGET TARGET [...] [--no-build] "
            "[validate options]; e.g. nox -s compare -- cpu docker native"
        )
    env, targets = words[0], words[1:]
    build = "--no-build" not in extra
    extra = [a for a in extra if a != "--no-build"]
    if not any(a == "--repeat" or a.startswith("--repeat=") for a in extra):
        extra += ["--repeat", "3"]  # the spread over repeats is what the noise verdict needs
    _install(session, "html")  # the compare below writes the --html page
    for target in targets:
        if build:
            session.run("envbuilder", "build", "--target", target, "--env", env)
        session.run("envbuilder", "validate", "--target", target, "--env", env, *extra)
    out = f"reports/compare/{env}.{'-vs-'.join(targets)}"
    session.run(
        "envbuilder",
        "compare",
        *(f"reports/{env}.{t}.json" for t in targets),
        "--markdown",
        f"{out}.md",
        "--json",
        f"{out}.json",
        "--html",
        f"{out}",
    )


# --- render (issue 2; docs/render.md) ---


@nox.session(python=PYTHON)
def render(session: nox.Session) -> None:
    """Re-render dockerfiles/, wsl/, windows/ (`-- --check` verifies; `-- --update-golden`)."""
    args = list(session.posargs)
    update_golden = "--update-golden" in args
    args = [a for a in args if a != "--update-golden"]
    if update_golden:
        _install(session, "test")
    else:
        _install(session)
    session.run("envbuilder", "render", *args)
    if update_golden:
        # The golden files the render tests compare against (tests/data/render/): review the diff.
        session.run("pytest", "-q", "tests/builders/test_render.py", env={"UPDATE_GOLDEN": "1"})


# --- lock (issue 4; docs/lock.md) ---


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Lock envs into lockfiles/ (`-- --check` verifies, `-- --env cpu`, `-- --upgrade`)."""
    _install(session)
    session.run("envbuilder", "lock", *session.posargs)


# --- wsl2 target (issue 6; docs/wsl2.md) ---


@nox.session(name="build-wsl2", python=PYTHON)
def build_wsl2(session: nox.Session) -> None:
    """Build envs' .wsl distros and validate them (`-- cpu [ENV ...] [--replace] [--level L]`)."""
    args = list(session.posargs)
    first_opt = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    names, extra = args[:first_opt] or ["cpu"], args[first_opt:]
    env: dict[str, str] = {}
    if "--replace" in extra:  # Windows: unregister an existing distro of that name first
        extra.remove("--replace")
        env["ENVBUILDER_WSL_REPLACE"] = "1"
    _install(session)
    for name in names:
        session.run("envbuilder", "build", "--target", "wsl2", "--env", name, env=env)
        session.run("envbuilder", "validate", "--target", "wsl2", "--env", name, *extra, env=env)

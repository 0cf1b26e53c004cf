"""Issue 13, fault 10: `check` catches everything `render` and `lock` would refuse later, naming
the file and the key.

The property test generates one env at a time (random names, env and RCCL variables, distro
names, users, base images, packages, targets) and holds `check` against what comes later, with
independent judges of "later":

- render: `render_env` of every rendered target on an EnvSpec built straight from the generated
  values (no check in between), plus the activate blocks `build` writes for native and windows
  venvs;
- lock: the env's PEP 751 file names (`project.pylock_name`) as `packaging.pylock` judges them
  (the library pip vendors), its image repositories (`docker_engine.registry_repository`), and
  its folders on Windows (Microsoft's reserved device names).

If `check` passes, all of those succeed (and `render_all` writes the files into a temp project).
If one of them fails, `check` failed, and for every single generated value whose repair alone
makes it succeed, `check` named that value's key (an env whose name is unusable is not checked
further: then the name's key). Renders are in-process and never locked (the plan of a
never-locked env), so the test takes seconds.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.pylock import is_valid_pylock_path
from packaging.requirements import InvalidRequirement, Requirement

from envbuilder.builders.render import render_all, render_env, rendered_targets
from envbuilder.commands._cli import main
from envbuilder.core import activate
from envbuilder.core.errors import EnvbuilderError
from envbuilder.core.grammar import ENV_NAME_RE
from envbuilder.core.model import EnvSpec, Spec, TargetTable
from envbuilder.core.project import Project, pylock_name
from envbuilder.image import engine
from envbuilder.spec.load import check_spec
from envbuilder.targets import registry
from envbuilder.targets.docker import DockerTable, default_rocm_image
from envbuilder.targets.native import NativeTable
from envbuilder.targets.windows import WindowsTable
from envbuilder.targets.wsl2 import Wsl2Table

TARGETS = ("docker", "wsl2", "windows", "native")  # the built-in targets this model writes

SPEC_FILE = "environments.toml"
#: Microsoft, "Naming Files, Paths, and Namespaces": names no file or folder may have.
WINDOWS_DEVICE_NAMES = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"com{i}" for i in range(10)),
    *(f"lpt{i}" for i in range(10)),
}
#: Characters that some output language cannot carry, and some that every language can.
NASTY = [
    '"',
    "'",
    "\n",
    "\r",
    "\x00",
    "\u2028",
    "\x85",
    "\t",
    "$(id)",
    "`",
    "%PATH%",
    "!",
    "\\",
    "é",
    "\u2019",
    ";",
    " ",
]


@dataclasses.dataclass(frozen=True)
class Model:
    """One generated env: what is written into the spec (None: the key is left out)."""

    name: str
    accelerator: str
    rocm: str | None
    python: str
    targets: tuple[str, ...]
    description: str
    packages: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    rccl: tuple[tuple[str, str], ...]
    apt: tuple[str, ...]
    docker_base: str | None
    docker_user: str
    docker_python: str
    distro: str | None
    ubuntu: str | None
    wsl_base: str | None
    wsl_user: str
    hip_path: str | None

    def toml(self) -> str:
        table: dict[str, Any] = {
            "description": self.description,
            "accelerator": self.accelerator,
            "python": self.python,
            "targets": list(self.targets),
            "packages": list(self.packages),
            "env": dict(self.env),
            "rccl": dict(self.rccl),
            "apt": list(self.apt),
            "docker": _present(
                base=self.docker_base, user=self.docker_user, python=self.docker_python
            ),
            "wsl2": _present(
                distro=self.distro, ubuntu=self.ubuntu, base=self.wsl_base, user=self.wsl_user
            ),
            "windows": _present(python=self.python, hip_path=self.hip_path),
        }
        if self.rocm is not None:
            table["rocm"] = self.rocm
            table["gpu"] = "RX 7900 XTX"
        return tomlkit.dumps({"env": {self.name: table}})

    def env_spec(self) -> EnvSpec:
        """The EnvSpec these values make, built without any check (what render would get)."""
        base = self.docker_base or (default_rocm_image(self.rocm) if self.rocm else None)
        wsl_base = self.wsl_base or (f"ubuntu:{self.ubuntu}" if self.ubuntu else None)
        tables: dict[str, TargetTable] = {}
        if base and "docker" in self.targets:
            tables["docker"] = DockerTable(base, self.docker_user, self.docker_python)
        if wsl_base and "wsl2" in self.targets:
            tables["wsl2"] = Wsl2Table(
                distro=self.distro or f"envbuilder-{self.name}",
                base=wsl_base,
                ubuntu=self.ubuntu,
                user=self.wsl_user,
            )
        if "windows" in self.targets:
            tables["windows"] = WindowsTable(self.python, self.hip_path)
        if "native" in self.targets:
            tables["native"] = NativeTable(self.python)
        return EnvSpec(
            name=self.name,
            description=self.description,
            accelerator=self.accelerator,  # type: ignore[arg-type]  # generated: "cpu"/"rocm"
            python=self.python,
            packages=self.packages,
            index_pins={},
            targets=self.targets,
            rocm=self.rocm,
            gpu="RX 7900 XTX" if self.rocm else None,
            env=dict(self.env),
            rccl=dict(self.rccl),
            apt=self.apt,
            tables=tables,
        )


def _present(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


def _nasty_text(plain: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(plain),
        st.builds(
            lambda a, b, c: a + b + c,
            st.sampled_from(plain),
            st.sampled_from(NASTY),
            st.sampled_from(plain),
        ),
    )


VAR_NAMES = st.sampled_from(
    ["A", "PYTHONUNBUFFERED", "HIP_PATH", "ROCM_PATH", "_X", "HSA_OVERRIDE_GFX_VERSION"]
)
RCCL_NAMES = st.sampled_from(["NCCL_DEBUG", "NCCL_ALGO", "RCCL_MSCCL_ENABLE", "NCCL_SOCKET_IFNAME"])
VALUES = _nasty_text(["1", "ring", "a b", "x", "C:\\x", "$(id)", "'", "%PATH%"])


def _pairs(names: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    return st.dictionaries(names, VALUES, max_size=3).map(lambda d: tuple(d.items()))


#: Values that `check` accepts (for a cpu env on Python 3.11 or a rocm env on 3.12)...
GOOD: dict[str, st.SearchStrategy[Any]] = {
    "name": st.one_of(
        st.sampled_from(["cpu", "seed-6-1", "my_env", "a__b", "a--b", "a" * 53, "prn-1"]),
        st.from_regex(r"[a-z0-9]{1,6}([_-][a-z0-9]{1,6}){0,2}", fullmatch=True),
    ),
    "targets": st.lists(st.sampled_from(TARGETS), min_size=1, max_size=4, unique=True).map(tuple),
    "description": st.sampled_from(["", "a test env", 'it\'s "quoted" $(not) run']),
    "packages": st.lists(
        st.sampled_from(
            [
                "numpy",
                "numpy==2.1.0",
                "numpy<2; python_version < '3.13'",
                "x @ https://h.example/x-1.0-py3-none-any.whl",
            ]
        ),
        max_size=2,
        unique=True,
    ).map(tuple),
    "env": _pairs(VAR_NAMES),
    "rccl": _pairs(RCCL_NAMES),
    "apt": st.lists(st.sampled_from(["libnuma1", "curl", "g++"]), max_size=2, unique=True).map(
        tuple
    ),
    "docker_user": st.sampled_from(["envbuilder", "_x", "ml-user"]),
    "docker_python": st.sampled_from(["python3", "/usr/bin/python3"]),
    "distro": st.sampled_from([None, "envbuilder-x", "My.Distro_1"]),
    "wsl_user": st.sampled_from(["envbuilder", "ml"]),
    "hip_path": st.sampled_from([None, "C:\\ROCm\\", "D:\\a b\\"]),
}
#: ... and values that some step may refuse: up to two fields of a model get one of these.
BAD: dict[str, st.SearchStrategy[Any]] = {
    "name": st.sampled_from(
        [
            "seed-6.1",
            "a.b",
            "rocm.6",
            "con",
            "nul",
            "com1",
            "lpt9",
            "Bad",
            "x y",
            "b" * 54,
            "c" * 63,
            "d" * 64,
        ]
    ),
    "description": _nasty_text(["", "x"]),
    "packages": st.lists(
        st.sampled_from(
            ["x @ file:///tmp/x.whl", "numpy==", "y @ git+https://h/y", "z @ file:///tmp/z"]
        ),
        min_size=1,
        max_size=2,
        unique=True,
    ).map(tuple),
    "env": st.dictionaries(
        st.sampled_from(["A", "1A", "A-B", "HSA_OVERRIDE_GFX_VERSION"]),
        _nasty_text(["", "1"]),
        min_size=1,
        max_size=2,
    ).map(lambda d: tuple(d.items())),
    "rccl": st.dictionaries(RCCL_NAMES, _nasty_text(["1"]), min_size=1, max_size=2).map(
        lambda d: tuple(d.items())
    ),
    "apt": st.lists(st.sampled_from(["Bad", "a;b", "x"]), min_size=1, max_size=2, unique=True).map(
        tuple
    ),
    "docker_base": st.sampled_from(
        [
            "Debian:12",
            "debian",
            "debian:12\nRUN id",
            "a b:1",
            "127.0.0.1:5000/x/y:1",
            "x@sha256:" + "a" * 64,
        ]
    ),
    "docker_user": st.sampled_from(["root", "a b", "x" * 33, "é"]),
    "docker_python": st.sampled_from(["py thon", "python3;id"]),
    "distro": st.sampled_from(["my distro", "e" * 65, "-x", "Ü"]),
    "ubuntu": st.sampled_from([None, "20.04", "22.04"]),
    "wsl_base": st.sampled_from(["bad image", "ubuntu:24.04"]),
    "wsl_user": st.sampled_from(["root", "Bad"]),
    "hip_path": st.sampled_from(['C:\\x"y\\', "relative", "C:\\a\nb"]),
    "rocm": st.sampled_from(["6.3.3", "6.1.3", "7.0.2"]),
}


@st.composite
def all_models(draw: st.DrawFn) -> Model:
    """A cpu (Python 3.11, Debian bases) or rocm (Python 3.12, the release's own bases) env of
    good values, with up to two of them replaced by doubtful ones."""
    fields = {k: draw(v) for k, v in GOOD.items()}
    if draw(st.booleans()):
        fields.update(
            accelerator="cpu",
            rocm=None,
            python="3.11",
            docker_base="debian:bookworm-slim",
            wsl_base="debian:bookworm-slim",
            ubuntu=None,
        )
    else:
        fields.update(
            accelerator="rocm",
            rocm=draw(st.sampled_from(["6.4.1", "7.2.1"])),
            python="3.12",
            docker_base=None,
            wsl_base=None,
            ubuntu="24.04",
        )
    for key in draw(st.lists(st.sampled_from(sorted(BAD)), max_size=2, unique=True)):
        fields[key] = draw(BAD[key])
    return Model(**fields)


# --- the judges of "later" ----------------------------------------------------------------------


def _render_failure(env: EnvSpec, project: Project) -> str | None:
    """Why rendering `env` (or writing its venv's activate scripts) fails, or None."""
    spec = Spec(path=project.spec_path, envs={env.name: env}, indexes={})
    try:
        for target in rendered_targets():
            render_env(project, spec, env, target)
        for target in ("native", "windows"):
            if target in env.targets:
                variables = registry.get(target).variables(env)
                activate.script_blocks(
                    [
                        Path(n)
                        for n in ("activate", "activate.ps1", "activate.bat", "deactivate.bat")
                    ],
                    variables,
                    windows=target == "windows",
                )
    except EnvbuilderError as exc:
        return str(exc)
    return None


def _name_failure(name: str) -> str | None:
    """Why the names derived from env `name` are refused later, or None."""
    bad = [t for t in registry.names() if not is_valid_pylock_path(Path(pylock_name(name, t)))]
    if bad:
        return f"pip/uv refuse {pylock_name(name, bad[0])}"
    try:
        for repository in ("envbuilder", "envbuilder-wsl2", "127.0.0.1:5000/team"):
            engine.registry_repository(repository, name)
    except EnvbuilderError as exc:
        return str(exc)
    if name.lower() in WINDOWS_DEVICE_NAMES:
        return f"{name} is a reserved name on Windows"
    return None


def _lock_failure(packages: tuple[str, ...]) -> str | None:
    """Why `lock` refuses a package: a local file or a VCS checkout (uvrun.py records index
    artifacts and public URLs only)."""
    for spec in packages:
        try:
            url = Requirement(spec).url
        except InvalidRequirement as exc:
            return str(exc)
        if url is not None and not url.startswith(("https://", "http://")):
            return f"{spec}: not a public URL"
    return None


def _repairs(m: Model) -> dict[str, Callable[[Model], Model]]:
    """Key (relative to env.NAME) -> how to repair just that value, for every generated value
    that render reads."""
    r = dataclasses.replace
    out: dict[str, Callable[[Model], Model]] = {
        "description": lambda x: r(x, description=""),
        "apt": lambda x: r(x, apt=()),
        "docker.base": lambda x: r(x, docker_base="debian:bookworm-slim"),
        "docker.user": lambda x: r(x, docker_user="envbuilder"),
        "docker.python": lambda x: r(x, docker_python="python3"),
        "wsl2.distro": lambda x: r(x, distro="envbuilder-x"),
        "wsl2.ubuntu": lambda x: r(x, ubuntu="22.04"),  # every WSL release has it
        "wsl2.base": lambda x: r(x, wsl_base="ubuntu:24.04"),
        "wsl2.user": lambda x: r(x, wsl_user="envbuilder"),
        "windows.hip_path": lambda x: r(x, hip_path=None),
        "rocm": lambda x: r(x, rocm="6.4.1"),
    }
    for table in ("env", "rccl"):
        for name, _value in getattr(m, table):
            out[f"{table}.{name}"] = _dropping(table, name)
    return out


def _dropping(table: str, name: str) -> Callable[[Model], Model]:
    def drop(x: Model) -> Model:
        kept = tuple((k, v) for k, v in getattr(x, table) if k != name)
        return (
            dataclasses.replace(x, env=kept)
            if table == "env"
            else dataclasses.replace(x, rccl=kept)
        )

    return drop


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(all_models())
@example(
    Model(
        "seed-6.1",
        "cpu",
        None,
        "3.11",
        ("docker", "windows"),
        "",
        (),
        (("A", 'x"y'),),
        (),
        (),
        "debian:bookworm-slim",
        "envbuilder",
        "python3",
        None,
        None,
        None,
        "envbuilder",
        None,
    )
)  # the two cases
def test_check_passes_exactly_when_render_and_lock_would(model: Model) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / SPEC_FILE).write_text(model.toml(), encoding="utf-8")
        project = Project.from_spec(root / SPEC_FILE, cache=root / "cache")
        result = check_spec(project.spec_path)
        name_failure = _name_failure(model.name)
        lock_failure = _lock_failure(model.packages)
        render_failure = _render_failure(model.env_spec(), project)
        if result.ok:
            assert result.spec is not None
            assert (name_failure, lock_failure, render_failure) == (None, None, None)
            render_all(project, result.spec)  # and writes the files
            return
        prefix = f"env.{model.name}"
        errors = {f.key for f in result.errors}
        said = "\n".join(str(f) for f in result.errors)
        unusable = ENV_NAME_RE.fullmatch(model.name) is None or len(model.name) > 63
        if name_failure or unusable:
            # later refused for the name: check says so on the env's own key (and an env whose
            # name is not a Docker name is not checked further)
            assert prefix in errors, f"{name_failure}; check said:\n{said}"
            if unusable:
                return
        if lock_failure:
            assert f"{prefix}.packages" in errors, f"{lock_failure}; check said:\n{said}"
        if render_failure:
            # repairing exactly the values check named makes render succeed
            repairs = _repairs(model)
            repaired = model
            for key in errors:
                fix = repairs.get(key.removeprefix(prefix + "."))
                repaired = fix(repaired) if key.startswith(prefix + ".") and fix else repaired
            still = _render_failure(repaired.env_spec(), project)
            assert still is None, f"render refuses: {still}\ncheck said only:\n{said}"


# --- the examples, through the CLI --------------------------------------------------------


def _run_check(tmp_path: Path, text: str, capsys: Any) -> tuple[int, list[str]]:
    spec = tmp_path / SPEC_FILE
    spec.write_text(text, encoding="utf-8")
    code = main(["check", "--spec", str(spec)])
    return code, [line for line in capsys.readouterr().out.splitlines() if line]


CPU = """
[env.{name}]
accelerator = "cpu"
python = "3.11"
targets = {targets}
env = {{ A = '{value}' }}
[env.{name}.docker]
base = "debian:bookworm-slim"
"""


def test_dotted_env_name_is_an_error_naming_the_env(tmp_path: Path, capsys: Any) -> None:
    code, lines = _run_check(
        tmp_path, CPU.format(name='"seed-6.1"', targets='["docker"]', value="1"), capsys
    )
    assert code == 1
    assert lines[0].startswith(f"{tmp_path / SPEC_FILE}: env.seed-6.1: error: env name has a dot")
    assert lines[0].endswith("use 'seed-6-1'")
    # the suggested name is one pip accepts for every target, and check passes with it
    assert all(is_valid_pylock_path(Path(pylock_name("seed-6-1", t))) for t in registry.names())
    code, lines = _run_check(
        tmp_path, CPU.format(name="seed-6-1", targets='["docker"]', value="1"), capsys
    )
    assert code == 0, lines


def test_double_quote_in_a_value_is_refused_for_windows_only(tmp_path: Path, capsys: Any) -> None:
    code, lines = _run_check(
        tmp_path, CPU.format(name="w", targets='["docker", "windows"]', value='say "hi"'), capsys
    )
    assert code == 1
    assert lines[0].startswith(
        f"{tmp_path / SPEC_FILE}: env.w.env.A: error: value contains a double quote"
    )
    assert "windows target" in lines[0]
    # Dockerfile ENV carries it: without the windows target, check passes and render writes it
    code, lines = _run_check(
        tmp_path, CPU.format(name="w", targets='["docker"]', value='say "hi"'), capsys
    )
    assert code == 0, lines
    assert main(["-q", "render", "--spec", str(tmp_path / SPEC_FILE)]) == 0
    dockerfile = (tmp_path / "dockerfiles" / "w" / "Dockerfile").read_text()
    assert 'A="say \\"hi\\""' in dockerfile


def test_one_run_reports_every_later_refusal(tmp_path: Path, capsys: Any) -> None:
    # Values behind a missing one are still checked: a dotted name, a value cmd.exe cannot
    # carry, a root user behind a missing base image, a ROCm release without a WSL runtime.
    text = """
[env."seed-6.1"]
accelerator = "rocm"
rocm = "6.3.3"
gpu = "RX 7900 XTX"
python = "3.12"
targets = ["wsl2", "windows"]
env = { A = 'x"y' }
[env."seed-6.1".wsl2]
user = "root"
[env."seed-6.1".windows]
python = "3.12"
"""
    code, lines = _run_check(tmp_path, text, capsys)
    assert code == 1
    keys = {line.split(": ")[1] for line in lines if ": error: " in line}
    assert {
        "env.seed-6.1",
        "env.seed-6.1.env.A",
        "env.seed-6.1.wsl2.user",
        "env.seed-6.1.wsl2.ubuntu",
        "env.seed-6.1.rocm",
    } <= keys, lines


def test_a_bad_hip_path_does_not_hide_a_value_cmd_cannot_carry(tmp_path: Path, capsys: Any) -> None:
    """Found by the property test above in issue 30's loop: a line break in the windows table's
    hip_path made the target's variables raise, and check stopped checking the env's other
    values there, while render then refused A's double quote."""
    text = """
[env.cpu]
accelerator = "rocm"
rocm = "6.4.1"
python = "3.12"
targets = ["docker", "windows"]
env = { A = '1"1' }
[env.cpu.windows]
python = "3.12"
hip_path = "C:\\\\ROCm\\n"
"""
    code, lines = _run_check(tmp_path, text, capsys)
    assert code == 1
    keys = {line.split(": ")[1] for line in lines if ": error: " in line}
    assert {"env.cpu.windows.hip_path", "env.cpu.env.A"} <= keys, lines

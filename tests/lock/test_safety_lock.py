"""Lock integrity (issue 13, faults 2, 3, 5 and 7), through the real CLI on copies of real projects.

2. a path read from a lock must be the pylock's own bare name inside lockfiles/: `lock` removed
   `../precious.txt` (or an absolute path) that a lock named, and `lock --check` passed a lock
   naming `../environments.toml`;
3. `lock --upgrade --no-base-digest` dropped a known digest pin, and `lock --check` passed a lock
   that had lost its pin;
5. `build` and `render` used a lock older than the spec, or another env's lock;
7. a malformed pylock whose sha256 the lock records made `build` end in a traceback.

Each refusal is checked for its exit code, its message (file, key, what to run) and for leaving
every file as it was (the tree under tmp_path, wheel cache included, hashed before and after).
Nothing here needs the network or a Docker engine: DOCKER_HOST names a socket that does not exist
and uv runs with UV_OFFLINE=1 against a local mirror folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest
from clirun import captured
from shipped import project_parts
from test_lock_support import make_wheel, write_spec

from envbuilder.core.fsutil import sha256_bytes, sha256_file
from envbuilder.core.project import Project
from envbuilder.lock.lockfile import read_env_lock

REPO = Path(__file__).resolve().parents[2]
#: What a copy of the shipped project holds (the committed cpu lock, rendered files).
SHIPPED = project_parts()
PIN = "debian:bookworm-slim@sha256:" + "1" * 64


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No engine, no network for uv, the wheel cache inside tmp_path (hashed with the tree)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    for name in [n for n in os.environ if n.startswith("ENVBUILDER_MIRROR_")]:
        monkeypatch.delenv(name)


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under `root` -> sha256 of its bytes ("dir" for folders)."""
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else sha256_file(p)
        for p in sorted(root.rglob("*"))
    }


def shipped_copy(root: Path) -> Project:
    """A copy of the repository's project: spec, committed cpu lock and rendered files."""
    root.mkdir(parents=True)
    for name in SHIPPED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name)
        elif src.is_file():
            shutil.copy(src, root / name)
    return Project.from_spec(root / "environments.toml", cache=root.parent / "cache")


def edit(path: Path, old: str | bytes, new: str | bytes, count: int = 1) -> None:
    """Replace `old` by `new` in `path` (exactly `count` times: the test's premise holds)."""
    data = path.read_bytes()
    before = old.encode() if isinstance(old, str) else old
    after = new.encode() if isinstance(new, str) else new
    assert data.count(before) == count, f"{path.name}: {before!r} occurs {data.count(before)}x"
    path.write_bytes(data.replace(before, after))


def record_sha(project: Project, env: str, target: str) -> None:
    """Make `<env>.lock.toml` record the pylock's current sha256 (only its content is wrong)."""
    lock = project.env_lock(env)
    pylock = project.pylock(env, target)
    old = read_env_lock(lock).targets[target].pylock_sha256
    edit(lock, f'pylock_sha256 = "{old}"', f'pylock_sha256 = "{sha256_file(pylock)}"')


def tiny_project(
    root: Path, packages: str = '"tinytorch==1.0+cpu"', base: str = "debian:bookworm-slim"
) -> Project:
    """A spec with env `small` (docker and native) whose one package comes from a local mirror
    folder of an unreachable index: `lock` resolves it with uv offline."""
    mirror = root.parent / "mirror"
    if not mirror.is_dir():
        make_wheel(mirror, "tinytorch", "1.0+cpu")
    return write_spec(
        root,
        f"""
[indexes.fake]
url = "https://wheels.example.invalid/whl/fake"
mirror = "{mirror}"

[env.small]
accelerator = "cpu"
python = "3.11"
packages = [{packages}]
index_pins = {{ tinytorch = "fake" }}
targets = ["docker", "native"]

[env.small.docker]
base = "{base}"
""",
    )


# --- 2. paths read from a lock ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_lock_never_removes_a_file_a_lock_names_outside_lockfiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A lock's target the spec no longer has: `lock` removes that target's pylock. The lock named
    `../precious.txt` (or an absolute path) as that pylock: the file must survive."""
    project = shipped_copy(tmp_path / "proj")
    precious = (project.root if where == "relative" else tmp_path) / "precious.txt"
    precious.write_text("a week of work\n", encoding="utf-8")
    named = "../precious.txt" if where == "relative" else str(precious)
    with project.env_lock("cpu").open("a", encoding="utf-8") as fh:
        fh.write(
            f'\n[targets.windows]\nplatform = "x86_64-pc-windows-msvc"\npython = "3.11"\n'
            f'pylock = "{named}"\npylock_sha256 = "{sha256_file(precious)}"\n'
        )
    before = tree(tmp_path)

    code, out = captured(
        capsys, "lock", "--spec", str(project.spec_path), "--env", "cpu", "--no-base-digest"
    )

    assert code == 1, out
    assert precious.read_text(encoding="utf-8") == "a week of work\n"
    assert tree(tmp_path) == before
    assert "cpu.lock.toml" in out and "targets.windows.pylock" in out and repr(named) in out
    assert "'pylock.cpu-windows.toml'" in out  # what would be right
    assert "git checkout" in out and "envbuilder lock --env cpu" in out  # what to do


@pytest.mark.parametrize("named", ["../environments.toml", "ABSOLUTE", "pylock.cpu-wsl2.toml"])
def test_check_and_build_refuse_a_pylock_named_outside_its_own_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: str
) -> None:
    """The native target's pylock renamed to the spec (relative or absolute) or another target's
    pylock, with that file's sha256: `lock --check` passed it; it must fail, and build refuse."""
    project = shipped_copy(tmp_path / "proj")
    if named == "ABSOLUTE":
        named = str(project.spec_path)
    target_file = project.lockfiles / named
    lock = project.env_lock("cpu")
    native = read_env_lock(lock).targets["native"]
    edit(lock, f'pylock = "{native.pylock}"', f'pylock = "{named}"')
    edit(lock, native.pylock_sha256, sha256_file(target_file))
    before = tree(tmp_path)

    code, out = captured(capsys, "lock", "--spec", str(project.spec_path), "--check")
    assert code == 1, out
    assert f"lockfiles/cpu.lock.toml: targets.native.pylock = {named!r} is not allowed" in out
    assert "'pylock.cpu-native.toml'" in out

    code, out = captured(
        capsys, "build", "--spec", str(project.spec_path), "--env", "cpu", "--target", "native"
    )
    assert code == 1, out
    assert "targets.native.pylock" in out and "envbuilder lock --env cpu" in out
    assert tree(tmp_path) == before


# --- 3. digest pins -------------------------------------------------------------------------------


def test_upgrade_without_an_engine_keeps_the_known_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--help` says --no-base-digest keeps known digests; `--upgrade` must not drop one."""
    project = tiny_project(tmp_path / "proj")
    spec = str(project.spec_path)
    assert captured(capsys, "-q", "lock", "--spec", spec, "--no-base-digest")[0] == 0
    # The previous generation of the lock pinned the base (made where an engine answered), and
    # the apt versions on it (envbuilder.lock.apt).
    lock = project.env_lock("small")
    text = lock.read_text(encoding="utf-8")
    text = re.sub(
        r'base_image = "debian:bookworm-slim"\n(base_digest_missing = .*\n)?',
        f'base_image = "{PIN}"\n',
        text,
    )
    text += (
        '\n[targets.docker.apt.build]\npython3 = "1"\npython3-venv = "1"\n'
        '\n[targets.docker.apt.runtime]\npython3 = "1"\n'
    )
    lock.write_text(text, encoding="utf-8")

    code, out = captured(capsys, "lock", "--spec", spec, "--upgrade", "--no-base-digest")

    assert code == 0, out
    docker = read_env_lock(lock).targets["docker"]
    assert (docker.base_image, docker.base_digest_missing) == (PIN, None)
    assert docker.apt["runtime"] == {"python3": "1"}  # nor the apt pins
    code, out = captured(capsys, "lock", "--spec", spec, "--check")
    assert code == 0 and "not pinned" not in out, out


def test_check_fails_for_a_lock_that_lost_its_pin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed cpu lock with its docker base recorded by bare tag, as the old
    `lock --upgrade --no-base-digest` wrote it: nothing says why it has no digest."""
    project = shipped_copy(tmp_path / "proj")
    docker = read_env_lock(project.env_lock("cpu")).targets["docker"]
    assert docker.base_image is not None and "@sha256:" in docker.base_image
    edit(
        project.env_lock("cpu"),
        f'pylock_sha256 = "{docker.pylock_sha256}"\nbase_image = "{docker.base_image}"\n',
        f'pylock_sha256 = "{docker.pylock_sha256}"\nbase_image = "debian:bookworm-slim"\n',
    )
    before = tree(tmp_path)

    code, out = captured(capsys, "lock", "--spec", str(project.spec_path), "--check")

    assert code == 1, out
    assert (
        "stale: cpu/docker: base image debian:bookworm-slim is recorded without a digest and "
        "without base_digest_missing: its pin was lost"
    ) in out
    assert "envbuilder lock --env cpu --refresh-base" in out
    assert "cpu/wsl2" not in out  # its pin is intact
    assert tree(tmp_path) == before


def test_a_base_recorded_by_tag_on_purpose_says_why_and_only_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new base without an engine: `--no-base-digest` records the tag and the reason;
    `--check` notes it and passes; the same lock without the reason fails the check."""
    project = tiny_project(tmp_path / "proj")
    spec = str(project.spec_path)
    assert captured(capsys, "-q", "lock", "--spec", spec, "--no-base-digest")[0] == 0
    lock = project.env_lock("small")
    assert 'base_digest_missing = "no-base-digest"' in lock.read_text(encoding="utf-8")
    code, out = captured(capsys, "lock", "--spec", spec, "--check")
    assert code == 0 and "note: small/docker: base image debian:bookworm-slim is not pinned" in out
    edit(lock, 'base_digest_missing = "no-base-digest"\n', "")
    assert captured(capsys, "lock", "--spec", spec, "--check")[0] == 1
    # Recording the tag again on purpose restores the reason (and touches no pylock).
    pylock = project.pylock("small", "docker").read_bytes()
    assert captured(capsys, "-q", "lock", "--spec", spec, "--no-base-digest")[0] == 0
    assert 'base_digest_missing = "no-base-digest"' in lock.read_text(encoding="utf-8")
    assert project.pylock("small", "docker").read_bytes() == pylock


# --- 5. stale and foreign locks -------------------------------------------------------------------

STALE = "lockfiles/cpu.lock.toml: the lock is older than the spec: run `envbuilder lock --env cpu`"
SPEC_EDITS = {
    "package-added": (
        'packages = ["torch==2.13.0+cpu"]',
        'packages = ["torch==2.13.0+cpu", "six==1.16.0"]',
    ),
    "base-changed": (
        'base = "debian:bookworm-slim"   # the distribution',
        'base = "debian:trixie-slim"   # the distribution',
    ),
}


@pytest.mark.parametrize("change", list(SPEC_EDITS))
def test_render_and_build_refuse_a_lock_older_than_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    project = shipped_copy(tmp_path / "proj")
    spec = str(project.spec_path)
    assert captured(capsys, "render", "--spec", spec, "--check", "--env", "cpu")[0] == 0
    edit(project.spec_path, *SPEC_EDITS[change])
    before = tree(tmp_path)

    for argv in (
        ["render", "--check"],
        ["render"],
        ["build", "--target", "docker"],
        ["build", "--target", "wsl2"],
    ):
        code, out = captured(capsys, *argv, "--spec", spec, "--env", "cpu")
        assert code == 1, (argv, out)
        assert STALE in out, (argv, out)
        assert "up to date" not in out
    assert tree(tmp_path) == before


def test_native_build_refuses_a_lock_older_than_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Built for real from the old lock before the fix: the venv appeared; now nothing does."""
    project = tiny_project(tmp_path / "proj")
    spec = str(project.spec_path)
    assert captured(capsys, "-q", "lock", "--spec", spec, "--no-base-digest")[0] == 0
    tiny_project(project.root, packages='"tinytorch==1.0+cpu", "tinytorch-extra==1.0"')
    before = tree(tmp_path)

    code, out = captured(capsys, "build", "--spec", spec, "--env", "small", "--target", "native")

    assert code == 1, out
    assert (
        "lockfiles/small.lock.toml: the lock is older than the spec: run `envbuilder lock "
        "--env small`"
    ) in out
    assert tree(tmp_path) == before


def test_render_and_build_refuse_another_envs_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """env `cpu2` (a copy of cpu in the spec) given a copy of cpu's lock: its pylocks are cpu's
    files, so render and build must not take it."""
    project = shipped_copy(tmp_path / "proj")
    spec_text = project.spec_path.read_text(encoding="utf-8")
    cpu = spec_text[spec_text.index("[env.cpu]") : spec_text.index("# --- rocm714")]
    copy = cpu.replace("[env.cpu", "[env.cpu2").replace('"envbuilder-cpu"', '"envbuilder-cpu2"')
    project.spec_path.write_text(spec_text + "\n" + copy, encoding="utf-8")
    shutil.copy(project.env_lock("cpu"), project.env_lock("cpu2"))
    spec = str(project.spec_path)
    before = tree(tmp_path)

    for argv in (
        ["render"],
        ["render", "--check"],
        ["build", "--target", "docker"],
        ["build", "--target", "native"],
    ):
        code, out = captured(capsys, *argv, "--spec", spec, "--env", "cpu2")
        assert code == 1, (argv, out)
        assert (
            "lockfiles/cpu2.lock.toml: env = 'cpu': this is the lock of env 'cpu', not of 'cpu2'"
        ) in out, (argv, out)
        assert "envbuilder lock --env cpu2" in out
    assert tree(tmp_path) == before


# --- 7. malformed pylocks whose sha256 the lock records -------------------------------------------

TORCH_URL = (
    "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
)
TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
#: corruption -> (old bytes, new bytes, what the message must say)
CORRUPTIONS: dict[str, tuple[bytes, bytes, str]] = {
    "toml-syntax": (b'name = "torch"\n', b'name = "torch\n', "not valid TOML (Illegal character"),
    "not-utf8": (b"Do not edit:", b"Do not \xff edit:", "not UTF-8 text (byte"),
    "bad-wheel-name": (
        TORCH_URL.encode(),
        b"https://download.pytorch.org/whl/cpu/torch-latest.whl",
        "(torch).wheels[0]: 'torch-latest.whl' is not a wheel file name",
    ),
    "hashes-not-a-table": (
        f'hashes = {{ sha256 = "{TORCH_SHA}" }}'.encode(),
        f'hashes = "sha256:{TORCH_SHA}"'.encode(),
        "(torch).wheels[0].hashes must be a table like { sha256 = ",
    ),
    "size-not-an-integer": (
        b"size = 244559,",
        b'size = "244559",',
        "(filelock).wheels[0].size must be an integer, not '244559'",
    ),
    "index-not-a-url": (
        b'index = "https://download.pytorch.org/whl/cpu"',
        b'index = "/etc/passwd"',
        "(torch).index must be the http(s) URL of the package's index, not '/etc/passwd'",
    ),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_build_refuses_a_malformed_pylock_whose_hash_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], corruption: str
) -> None:
    project = shipped_copy(tmp_path / "proj")
    old, new, what = CORRUPTIONS[corruption]
    edit(project.pylock("cpu", "native"), old, new)
    record_sha(project, "cpu", "native")
    spec = str(project.spec_path)
    before = tree(tmp_path)

    code, out = captured(capsys, "build", "--spec", spec, "--env", "cpu", "--target", "native")

    assert code == 1, out
    assert "error: lockfiles/pylock.cpu-native.toml: " in out and what in out, out
    assert "Traceback" not in out
    assert "envbuilder lock --env cpu" in out  # what to do
    code, out = captured(capsys, "lock", "--spec", spec, "--check")
    assert code == 1 and "stale: cpu/native: lockfiles/pylock.cpu-native.toml: " in out, out
    assert tree(tmp_path) == before


def test_the_committed_lock_still_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control for the tests above: the unedited copy checks, and its pylocks' hashes are
    the recorded ones."""
    project = shipped_copy(tmp_path / "proj")
    code, out = captured(capsys, "lock", "--spec", str(project.spec_path), "--check")
    assert code == 0, out
    lock = read_env_lock(project.env_lock("cpu"))
    for target, entry in lock.targets.items():
        data = project.pylock("cpu", target).read_bytes()
        assert sha256_bytes(data) == entry.pylock_sha256 == hashlib.sha256(data).hexdigest()

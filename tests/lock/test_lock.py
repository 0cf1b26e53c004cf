"""`envbuilder lock` for real: uv resolves small packages from the default index and a tiny wheel
from a local mirror folder of an unreachable index; base digests come from the local registry;
pip and uv install the resulting pylock and refuse it once a hash is changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_lock_support import FAKE_INDEX_URL, make_wheel, small_spec, write_spec

from envbuilder.commands._cli import main
from envbuilder.core.project import Project
from envbuilder.host.pyfinder import uv_bin
from envbuilder.lock.lockfile import read_env_lock

pytestmark = pytest.mark.network


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    make_wheel(tmp_path / "mirror", "tinytorch", "1.0+cpu", requires=("six",))
    return tmp_path / "mirror"


@pytest.fixture(autouse=True)
def _no_machine_mirrors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ENVBUILDER_MIRROR_"):
            monkeypatch.delenv(name)


def _lock(project: Project, *args: str) -> int:
    return main(["-q", "lock", "--spec", str(project.spec_path), *args])


def _packages(pylock: Path) -> dict[str, str]:
    """name -> its whole [[packages]] block, to compare entries byte for byte."""
    blocks = pylock.read_text(encoding="utf-8").split("[[packages]]")[1:]
    return {re.search(r'name = "([^"]+)"', b).group(1): b for b in blocks}  # type: ignore[union-attr]


def _files(project: Project) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(project.lockfiles.iterdir())
    }


def test_lock_check_relock_and_stale_spec(
    tmp_path: Path, mirror: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = write_spec(tmp_path / "proj", small_spec(mirror))
    assert _lock(project) == 0
    pylock = project.pylock("small", "native")
    text = pylock.read_text(encoding="utf-8")
    # The mirror served the file; the lock names the canonical URL and nothing of this machine.
    assert f'url = "{FAKE_INDEX_URL}/tinytorch-1.0%2Bcpu-py3-none-any.whl"' in text
    assert str(tmp_path) not in text and "file:" not in text
    assert set(_packages(pylock)) == {"idna", "six", "tinytorch"}
    lock = read_env_lock(project.env_lock("small"))
    assert lock.targets["native"].pylock == "pylock.small-native.toml"
    assert lock.source_date_epoch > 1_600_000_000  # six 1.15.0 / idna 3.4 upload times
    assert _lock(project, "--check") == 0

    # Nothing changed: every file keeps its bytes and its mtime (old mtimes make a rewrite show).
    for path in project.lockfiles.iterdir():
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = _files(project)
    assert _lock(project) == 0
    assert _files(project) == before

    # Editing the env's packages makes --check fail, naming the env.
    capsys.readouterr()
    project.spec_path.write_text(small_spec(mirror, '"six==1.15.0", "idna==3.3"'), encoding="utf-8")
    assert _lock(project, "--check") == 1
    assert "stale: small: environments.toml changed" in capsys.readouterr().out
    assert _lock(project) == 0 and _lock(project, "--check") == 0
    assert 'version = "3.3"' in _packages(pylock)["idna"]


def test_upgrade_package_changes_only_that_package(tmp_path: Path, mirror: Path) -> None:
    project = write_spec(tmp_path / "proj", small_spec(mirror))
    assert _lock(project) == 0
    pylock = project.pylock("small", "native")
    pinned = _packages(pylock)
    # Unpinning keeps every locked version (uv prefers what the lock holds)...
    project.spec_path.write_text(small_spec(mirror, '"six", "idna"'), encoding="utf-8")
    assert _lock(project) == 0
    assert _packages(pylock) == pinned
    # ...until a package is upgraded by name: only its entry changes.
    assert _lock(project, "--upgrade-package", "six") == 0
    after = _packages(pylock)
    assert after["six"] != pinned["six"] and 'version = "1.15.0"' not in after["six"]
    assert {k: v for k, v in after.items() if k != "six"} == {
        k: v for k, v in pinned.items() if k != "six"
    }
    assert _lock(project, "--check") == 0


def test_missing_mirror_folder_falls_back_to_the_canonical_url(
    tmp_path: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = write_spec(tmp_path / "proj", small_spec(mirror))
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", str(tmp_path / "no-such-folder"))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # the canonical host does not exist
    assert _lock(project) == 1  # the canonical index does not exist
    err = capsys.readouterr().err
    assert "no-such-folder" in err and "does not exist" in err
    assert "ENVBUILDER_MIRROR_FAKE" in err
    assert not project.lockfiles.exists()  # nothing written on failure


def _install_spec(tmp_path: Path) -> Project:
    body = """
[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["six==1.16.0", "idna==3.4"]
targets = ["native"]
"""
    return write_spec(tmp_path / "proj", body)


def _fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


@pytest.mark.slow
def test_pip_and_uv_install_the_pylock_and_refuse_a_changed_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _install_spec(tmp_path)
    assert _lock(project) == 0
    pylock = project.pylock("small", "native")
    # pip >= 26 (this venv's, aimed at a fresh venv with --python) and uv, each in a fresh venv.
    pip = [sys.executable, "-m", "pip", "--python"]
    for installer in ("pip", "uv"):
        python = _fresh_venv(tmp_path / f"venv-{installer}")
        cmd = (
            [*pip, str(python), "install", "--no-cache-dir", "-r", str(pylock)]
            if installer == "pip"
            else [uv_bin(), "pip", "install", "--python", str(python), "-r", str(pylock)]
        )
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        check = subprocess.run(
            [str(python), "-c", "import six, idna; print(six.__version__)"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert check.stdout.strip() == "1.16.0"
    # One changed hash: both installers refuse, and lock --check names the pylock.
    text = pylock.read_text(encoding="utf-8")
    good = re.search(
        r'six-1\.16\.0-py2\.py3-none-any\.whl", .*?sha256 = "([0-9a-f]{64})"', text
    ).group(1)  # type: ignore[union-attr]
    pylock.write_text(text.replace(good, "0" * 64), encoding="utf-8")
    for installer in ("pip", "uv"):
        python = _fresh_venv(tmp_path / f"venv2-{installer}")
        cmd = (
            [*pip, str(python), "install", "--no-cache-dir", "-r", str(pylock)]
            if installer == "pip"
            else [
                uv_bin(),
                "pip",
                "install",
                "--no-cache",
                "--python",
                str(python),
                "-r",
                str(pylock),
            ]
        )
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert done.returncode != 0, f"{installer} accepted a wrong hash"
        assert "hash" in (done.stdout + done.stderr).lower()
    capsys.readouterr()
    assert _lock(project, "--check") == 1
    assert "pylock.small-native.toml was changed by hand" in capsys.readouterr().out


def test_base_image_digest_comes_from_the_registry(
    tmp_path: Path, registry: str, docker_client: object
) -> None:
    import urllib.request

    base = f"{registry}/library/debian:bookworm-slim"
    body = f"""
[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["six==1.16.0"]
targets = ["docker"]

[env.small.docker]
base = "{base}"
"""
    project = write_spec(tmp_path / "proj", body)
    assert _lock(project) == 0
    pinned = read_env_lock(project.env_lock("small")).targets["docker"].base_image
    accept = ", ".join(
        [
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.oci.image.manifest.v1+json",
        ]
    )
    request = urllib.request.Request(
        f"http://{registry}/v2/library/debian/manifests/bookworm-slim",
        method="HEAD",
        headers={"Accept": accept},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        digest = response.headers["Docker-Content-Digest"]
    assert pinned == f"{base}@{digest}"
    assert _lock(project, "--check") == 0


def test_base_digest_without_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def spec(base: str, six: str) -> str:
        return f"""
[env.small]
accelerator = "cpu"
python = "3.11"
packages = ["six=={six}"]
targets = ["docker"]

[env.small.docker]
base = "{base}"
"""

    known = "debian:bookworm-slim@sha256:" + "1" * 64
    project = write_spec(tmp_path / "proj", spec(known, "1.16.0"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert _lock(project) == 0  # a base written with its digest needs no engine
    # A new tag needs the engine: a clear error, nothing written...
    project.spec_path.write_text(spec("debian:trixie-slim", "1.16.0"), encoding="utf-8")
    before = _files(project)
    capsys.readouterr()
    assert _lock(project) == 1
    err = capsys.readouterr().err
    assert "debian:trixie-slim" in err and "--no-base-digest" in err
    assert _files(project) == before
    # ...unless --no-base-digest: the tag is recorded unpinned and --check notes it.
    assert _lock(project, "--no-base-digest") == 0
    assert read_env_lock(project.env_lock("small")).targets["docker"].base_image == (
        "debian:trixie-slim"
    )
    capsys.readouterr()
    assert main(["lock", "--spec", str(project.spec_path), "--check"]) == 0
    assert "not pinned by digest" in capsys.readouterr().err


TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
TORCH_SHA256 = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"


@pytest.mark.slow
def test_lock_the_shipped_cpu_env(
    tmp_path: Path,
    docker_client: object,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Acceptance 1 on a copy of the shipped spec: torch from this machine's mirror folder (a
    machine setting, ENVBUILDER_MIRROR_PYTORCH_CPU), the rest from the default index, base
    images pinned through the engine; then --check passes with the unlockable ROCm envs as
    notes."""
    if not TORCH_WHEEL.is_file():
        pytest.skip(f"{TORCH_WHEEL} (this machine's copy of the locked torch) is not here")
    monkeypatch.setenv("ENVBUILDER_MIRROR_PYTORCH_CPU", str(TORCH_WHEEL.parent))
    root = Path(__file__).resolve().parents[2]
    project = write_spec(tmp_path / "proj", (root / "environments.toml").read_text("utf-8"))
    assert _lock(project, "--env", "cpu") == 0
    for target in ("docker", "wsl2", "native"):
        torch = _packages(project.pylock("cpu", target))["torch"]
        assert (
            'url = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-'
            f'manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{TORCH_SHA256}" }}'
        ) in torch
    lock = read_env_lock(project.env_lock("cpu"))
    assert lock.targets["docker"].base_image.startswith(  # type: ignore[union-attr]
        "debian:bookworm-slim@sha256:"
    )
    assert lock.targets["native"].base_image is None
    before = _files(project)
    assert _lock(project, "--env", "cpu") == 0
    assert _files(project) == before
    capsys.readouterr()
    assert main(["lock", "--check", "--spec", str(project.spec_path)]) == 0
    err = capsys.readouterr().err
    assert "note: rocm714: not locked" in err and "note: mi300x: not locked" in err


def test_one_env_failing_does_not_stop_the_others(
    tmp_path: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = (
        small_spec(mirror)
        + """
[env.broken]
accelerator = "cpu"
python = "3.11"
packages = ["tinytorch==9.9"]
index_pins = { tinytorch = "fake" }
targets = ["native"]
"""
    )
    project = write_spec(tmp_path / "proj", body)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    assert _lock(project) == 1
    assert "error: broken: uv could not resolve" in capsys.readouterr().err
    assert project.env_lock("small").is_file() and not project.env_lock("broken").exists()
    assert main(["lock", "--spec", str(project.spec_path), "--check", "--upgrade"]) == 2


def test_windows_and_linux_targets_resolve_for_their_platforms(tmp_path: Path) -> None:
    from envbuilder.lock.wheelcache import locked_files

    project = write_spec(
        tmp_path / "proj",
        """
[env.win]
accelerator = "cpu"
python = "3.12"
packages = ["click==8.1.7", "markupsafe==3.0.2"]
targets = ["windows", "native"]

[env.win.windows]
python = "3.12"
""",
    )
    assert _lock(project) == 0
    lock = read_env_lock(project.env_lock("win"))
    assert lock.targets["windows"].platform == "x86_64-pc-windows-msvc"
    windows = project.pylock("win", "windows")
    assert "sys_platform == 'win32' and platform_machine == 'AMD64'" in windows.read_text("utf-8")
    picked = {f.name: f.filename for f in locked_files(windows, "x86_64-pc-windows-msvc", "3.12")}
    assert picked["markupsafe"] == "MarkupSafe-3.0.2-cp312-cp312-win_amd64.whl"
    assert "colorama" in picked  # click needs it on Windows only
    native = {
        f.name: f.filename
        for f in locked_files(project.pylock("win", "native"), "x86_64-manylinux_2_28", "3.12")
    }
    assert "colorama" not in native and native["markupsafe"].endswith("x86_64.whl")
    assert "manylinux" in native["markupsafe"]

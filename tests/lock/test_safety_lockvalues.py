"""Every value of `<env>.lock.toml` is covered by a digest or a check (issue 21, fault 4).

Before: a downgraded `openssl` pin or 2000 extra pins in lockfiles/cpu.lock.toml passed
`lock --check`, were rendered into the Dockerfile, and `render --check` agreed; `[artifacts]`
for targets without artifacts or unknown ones, `layers = ""`, `repro_format = "999"`, unknown
artifact keys, `source_date_epoch = -5` or `99999999999999999999` (written into `ARG
SOURCE_DATE_EPOCH`) and a non-hex `pylock_sha256` (rendered into validate.sbatch) were
accepted. Now `lock --check`, `render --check` and `render` refuse each, naming the key, and
write nothing. Each edit is made to a copy of the shipped project's lock, as a hand or a pull
request would make it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from shipped import project_parts

from envbuilder.commands._cli import main

REPO = Path(__file__).resolve().parents[2]
COPIED = project_parts()


def project_copy(tmp_path: Path) -> Path:
    for name in COPIED:
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    return tmp_path


def _sub(pattern: str, replacement: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        changed, n = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
        assert n == 1, pattern
        return changed

    return edit


def _extra_pins(text: str) -> str:
    pins = "".join(f'extra-package-{i} = "1.0-{i}"\n' for i in range(2000))
    return text.replace("[targets.docker.apt.runtime]\n", "[targets.docker.apt.runtime]\n" + pins)


def _artifacts(table: str) -> Callable[[str], str]:
    return lambda text: text + f"\n{table}\n"


EDITS = [
    pytest.param(
        _sub(r'^(openssl = ")3\.0\.22-1~deb12u2(")', r"\g<1>3.0.11-1~deb12u2\g<2>"),
        "the apt pins of targets.docker do not match targets.docker.apt_sha256",
        id="openssl-downgraded",
    ),
    pytest.param(
        _extra_pins,
        "the apt pins of targets.docker do not match targets.docker.apt_sha256",
        id="2000-extra-pins",
    ),
    pytest.param(
        _sub(r'^(image_id = "sha256:)[0-9a-f]{4}', r"\g<1>fade"),
        "the [artifacts.docker] of targets.docker do not match targets.docker.artifacts_sha256",
        id="artifact-value",
    ),
    pytest.param(
        _artifacts('[artifacts.native]\ntag = "x"'),
        "[artifacts.native]: target 'native' records no artifacts",
        id="artifacts-of-a-venv-target",
    ),
    pytest.param(
        _artifacts('[artifacts.windows]\ntag = "x"'),
        "[artifacts.windows]: target 'windows' is not locked here",
        id="artifacts-of-an-unlocked-target",
    ),
    pytest.param(
        _artifacts('[artifacts.nosuch]\ntag = "x"'),
        "[artifacts.nosuch]: target 'nosuch' is not locked here",
        id="artifacts-of-an-unknown-target",
    ),
    pytest.param(  # "" is what an image with no layer above its base records: the digest
        _sub(r'^layers = "sha256:[^"]+"', 'layers = ""'),
        "the [artifacts.docker] of targets.docker do not match targets.docker.artifacts_sha256",
        id="layers-emptied",
    ),
    pytest.param(
        _sub(r'^repro_format = "[0-9]+"', 'repro_format = "999"'),
        "artifacts.docker.repro_format = '999' is not a format this envbuilder knows",
        id="repro-format-999",
    ),
    pytest.param(
        _sub(r'^(tag = "envbuilder/cpu)', 'colour = "blue"\n\\g<1>'),
        "artifacts.docker: unknown key 'colour'",
        id="unknown-artifact-key",
    ),
    pytest.param(
        _sub(r"^source_date_epoch = \d+", "source_date_epoch = -5"),
        "source_date_epoch = -5 is not a time from 0 to 4294967295",
        id="epoch-negative",
    ),
    pytest.param(
        _sub(r"^source_date_epoch = \d+", "source_date_epoch = 99999999999999999999"),
        "source_date_epoch = 99999999999999999999 is not a time",
        id="epoch-huge",
    ),
    pytest.param(
        _sub(r'^(pylock_sha256 = ")006af2e9', r"\g<1>$(id)e9"),
        "targets.docker.pylock_sha256 = '$(id)e9",
        id="pylock-sha256-not-hex",
    ),
    pytest.param(
        _sub(r'^(platform = ")x86_64-manylinux_2_28', r"\g<1>x86_64-pc-windows-msvc"),
        "targets.docker.platform = 'x86_64-pc-windows-msvc' is not the target's platform",
        id="platform",
    ),
    pytest.param(
        _sub(r'^python = "3\.11"', 'python = "3.11; rm -rf ~"'),
        "targets.docker.python = '3.11; rm -rf ~' is not a Python version",
        id="python",
    ),
]


@pytest.mark.parametrize(("edit", "message"), EDITS)
def test_an_edited_lock_value_is_refused(
    edit: Callable[[str], str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = project_copy(tmp_path)
    lock = project / "lockfiles" / "cpu.lock.toml"
    lock.write_text(edit(lock.read_text()))
    spec = str(project / "environments.toml")
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    for argv in (["lock", "--check"], ["render", "--check"], ["render"]):
        code = main([*argv, "--spec", spec])
        out, err = capsys.readouterr()
        assert code == 1, (argv, out, err)
        assert message in out + err, (argv, out + err)
        assert "Traceback" not in err
        assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before, argv


def test_a_lock_without_digests_is_upgraded_by_lock_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock an envbuilder before the digests wrote: `lock --check` says to run `lock`, which
    adds them without resolving anything again (the pylocks and every pin stay), and then
    every check passes."""
    project = project_copy(tmp_path)
    lock = project / "lockfiles" / "cpu.lock.toml"
    current = lock.read_text()
    old = re.sub(r"^(apt|artifacts)_sha256 = .*\n", "", current, flags=re.MULTILINE)
    assert old != current
    lock.write_text(old)
    pylocks = {p: p.read_bytes() for p in (project / "lockfiles").glob("pylock.*")}
    spec = str(project / "environments.toml")
    assert main(["lock", "--check", "--spec", spec]) == 1
    assert "adds it without resolving anything again" in capsys.readouterr().out
    assert main(["lock", "--env", "cpu", "--spec", spec]) == 0
    assert lock.read_text() == current
    assert {p: p.read_bytes() for p in (project / "lockfiles").glob("pylock.*")} == pylocks
    assert main(["lock", "--check", "--spec", spec]) == 0
    assert main(["render", "--check", "--spec", spec]) == 0


def test_the_format_numbers_are_those_the_writers_use() -> None:
    from envbuilder.image import wsl
    from envbuilder.image.oci.writer import REPRO_FORMAT
    from envbuilder.lock.artifacts import ARTIFACT_FORMATS

    assert {"repro_format": int(REPRO_FORMAT), "format": int(wsl.FORMAT)} == ARTIFACT_FORMATS

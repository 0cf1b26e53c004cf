"""`envbuilder lock` says what it changed: each package whose pin moved (`name old -> new`), was
added or removed, on stdout and in `--json` (envbuilder.lock.diff). Real uv, offline: every
package comes from a mirror folder of a named index (tests/test_lock_support.py's tiny wheels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lock_support import FAKE_INDEX_URL, make_wheel

from envbuilder.lock.diff import env_changes

SPEC = """
[indexes.fake]
url = "{url}"

[env.pair]
description = "two pinned packages"
accelerator = "cpu"
python = "3.11"
packages = [{packages}]
index_pins = {{ tinytorch = "fake", tinyextra = "fake", filelock = "fake" }}
targets = ["native"]
"""


def _spec(path: Path, packages: str) -> None:
    path.write_text(SPEC.format(url=FAKE_INDEX_URL, packages=packages), encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVBUILDER_MIRROR_FAKE", str(tmp_path / "mirror"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("ENVBUILDER_CACHE", str(tmp_path / "cache"))
    for name in ("filelock", "tinyextra"):
        make_wheel(tmp_path / "mirror", name, "1.0")
    spec = tmp_path / "proj" / "environments.toml"
    spec.parent.mkdir()
    _spec(spec, '"filelock>=1.0", "tinyextra>=1.0"')
    return spec


def test_upgrade_package_lists_the_change_on_stdout_and_in_json(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envbuilder.commands._cli import main

    assert main(["-q", "lock", "--spec", str(project)]) == 0
    capsys.readouterr()
    make_wheel(tmp_path / "mirror", "filelock", "1.1")
    make_wheel(tmp_path / "mirror", "tinyextra", "1.1")

    assert main(["lock", "--spec", str(project), "--upgrade-package", "filelock", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["envs"]
    assert entry["changes"] == [
        {
            "kind": "package",
            "name": "filelock",
            "change": "changed",
            "old": "1.0",
            "new": "1.1",
            "targets": ["native"],
        }
    ]
    # tinyextra 1.1 is there too, but was not asked for: it keeps its pin and is not listed.

    _spec(project, '"filelock>=1.0", "tinytorch>=1.0"')
    make_wheel(tmp_path / "mirror", "tinytorch", "1.0")
    assert main(["lock", "--spec", str(project)]) == 0
    out = capsys.readouterr().out
    assert "pair: added tinytorch 1.0 (native)" in out, out
    assert "pair: removed tinyextra 1.0 (native)" in out, out
    assert "filelock" not in out.replace("pylock", ""), out  # unchanged: not listed

    assert main(["lock", "--spec", str(project), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["envs"]
    assert entry["status"] == "current" and entry["changes"] == []


def test_changes_fold_targets_and_name_base_digests() -> None:
    def pylock(**versions: str) -> bytes:
        body = "".join(
            f'[[packages]]\nname = "{n}"\nversion = "{v}"\n\n' for n, v in versions.items()
        )
        return f'lock-version = "1.0"\ncreated-by = "uv"\n\n{body}'.encode()

    old = {"docker": pylock(filelock="4.3.1"), "native": pylock(filelock="4.3.1")}
    new = {"docker": pylock(filelock="4.3.2"), "native": pylock(filelock="4.3.2", six="1.17.0")}
    base = "debian:bookworm-slim@sha256:"
    changes = env_changes(
        old, new, {"docker": base + "a" * 64, "native": None}, {"docker": base + "b" * 64}
    )
    assert [c.line() for c in changes] == [
        f"debian:bookworm-slim sha256:{'a' * 64} -> sha256:{'b' * 64} (docker)",
        "filelock 4.3.1 -> 4.3.2 (docker, native)",
        "added six 1.17.0 (native)",
    ]

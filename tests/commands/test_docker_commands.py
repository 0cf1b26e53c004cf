"""The generic build/validate/push/pull commands: selection, option checks, exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rich.progress import Progress

from envbuilder.builders.lookup import builder_for
from envbuilder.commands import build as build_command
from envbuilder.commands import pull as pull_command
from envbuilder.commands import push as push_command
from envbuilder.commands._cli import main
from envbuilder.commands._targets import install_options
from envbuilder.commands.validate import report_status
from envbuilder.core.errors import ValidationError
from envbuilder.core.ui import UI, ProgressView
from envbuilder.targets import registry
from envbuilder.targets.base import BuildOptions, InstallOptions, RegistryBuilder

SPEC = str(Path(__file__).resolve().parents[2] / "environments.toml")


def _run(*args: str) -> int:
    return main([*args, "--spec", SPEC])


def test_unknown_env_is_a_usage_error() -> None:
    assert _run("build", "--target", "docker", "--env", "nosuch") == 2


def test_env_without_the_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("validate", "--target", "native", "--env", "rocm714") == 2
    assert "has no target 'native'" in capsys.readouterr().err


def test_path_is_only_for_venv_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("build", "--target", "docker", "--env", "cpu", "--path", "/tmp/x") == 2
    assert "--path applies to the venv targets" in capsys.readouterr().err


def test_no_cache_is_only_for_image_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("build", "--target", "native", "--env", "cpu", "--no-cache") == 2
    assert "--no-cache applies to the image targets (docker, wsl2), not native" in (
        capsys.readouterr().err
    )


def test_verify_is_only_for_targets_whose_lock_predicts_an_image(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run("build", "--target", "native", "--env", "cpu", "--verify") == 2
    assert (
        "--verify applies to the targets whose lock predicts an image (docker, wsl2), not native"
    ) in capsys.readouterr().err
    args = argparse.Namespace(
        target="docker",
        path=None,
        env=["cpu"],
        no_cache=False,
        force=False,
        verify=True,
        repin_base_into=None,
    )
    assert build_command.build_options(args) == BuildOptions(verify=True)


@pytest.mark.parametrize("target", registry.with_capability("no_cache"))
def test_no_cache_reaches_image_targets(target: str) -> None:
    """The option passes for docker and wsl2 (the targets with the no_cache capability), as
    the typed BuildOptions their builders take."""
    assert registry.with_capability("no_cache") == ("docker", "wsl2")
    args = argparse.Namespace(
        target=target,
        path=None,
        env=["cpu"],
        no_cache=True,
        force=False,
        verify=False,
        repin_base_into=None,
    )
    assert build_command.build_options(args) == BuildOptions(no_cache=True)


def test_install_options_come_typed_from_the_cli_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented variables (docs/wsl2.md) are read by the command, not by the builder, and
    reach the builders of targets with the `install` capability as typed InstallOptions."""
    assert registry.with_capability("install") == ("wsl2",)
    monkeypatch.setenv("ENVBUILDER_WSL_REPLACE", "1")
    monkeypatch.setenv("ENVBUILDER_WSL_LOCATION", r"D:\\distros")
    want = InstallOptions(replace=True, location=Path(r"D:\\distros"))
    for target, install in (("wsl2", want), ("docker", InstallOptions())):
        args = argparse.Namespace(
            target=target,
            path=None,
            env=["cpu"],
            no_cache=False,
            force=False,
            verify=False,
            repin_base_into=None,
        )
        assert build_command.build_options(args) == BuildOptions(install=install), target
    monkeypatch.setenv("ENVBUILDER_WSL_REPLACE", "0")
    monkeypatch.setenv("ENVBUILDER_WSL_LOCATION", "")
    assert install_options("wsl2") == InstallOptions()


def test_push_needs_a_registry() -> None:
    with pytest.raises(SystemExit) as exit_:
        _run("push", "--env", "cpu")
    assert exit_.value.code == 2


def test_push_refuses_a_url_with_a_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("push", "--env", "cpu", "--registry", "https://127.0.0.1:5000/x") == 2
    assert "without a scheme" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["push", "pull"])
def test_push_pull_help_names_the_targets_that_have_them(command: str) -> None:
    """Each target with the push/pull capability (and a builder that has the methods) is in the
    help and description, the others are named as having no registry."""
    module = push_command if command == "push" else pull_command
    with_registry = list(registry.with_capability("push" if command == "push" else "pull"))
    assert with_registry == ["docker", "wsl2"]
    for name in registry.names():
        assert isinstance(builder_for(registry.get(name)), RegistryBuilder) == (
            name in with_registry
        )
    assert "(docker, wsl2)" in module.HELP
    for name in with_registry:
        assert f"\n  {name} " in module.DESCRIPTION
    assert "(native, windows) have no registry" in module.DESCRIPTION


@pytest.mark.parametrize("command", ["push", "pull"])
def test_push_pull_refuse_venv_targets(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--registry", "127.0.0.1:5000/x"] if command == "push" else []
    assert _run(command, "--target", "native", "--env", "cpu", *extra) == 2
    assert f"{command} applies to docker and wsl2" in capsys.readouterr().err


def test_repeat_must_be_positive() -> None:
    assert _run("validate", "--target", "docker", "--env", "cpu", "--repeat", "0") == 2


def test_report_status(tmp_path: Path) -> None:
    good = tmp_path / "r.json"
    good.write_text(json.dumps({"status": "fail"}))
    assert report_status(good) == "fail"
    good.write_text("not json")
    with pytest.raises(ValidationError, match="not a probe report"):
        report_status(good)


def test_progress_view_keeps_one_bar_per_transfer() -> None:
    with Progress(disable=True) as prog:
        view = ProgressView(prog, UI(quiet=True))
        view("step 1/3: FROM x", 1, 3)
        view("step 2/3: RUN y", 2, 3)
        view("pull abc", 10, 100)
        view("pull abc", 100, 100)
        view("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", 5, 50)
        view("a line of output", 1, None)
        tasks = {t.description: (t.completed, t.total) for t in prog.tasks}
    assert tasks == {
        "step 2/3: RUN y": (2, 3),
        "pull abc": (100, 100),
        "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl": (5, 50),
    }

"""The target registry and descriptors: the one list of targets, declared capabilities, typed
options, and the usage errors for what a target cannot do (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.builders.lookup import builder_for
from envbuilder.commands._cli import main
from envbuilder.core.errors import EnvbuilderError, UsageError
from envbuilder.spec.load import load_spec
from envbuilder.targets import registry
from envbuilder.targets.base import Capability, RegistryBuilder
from envbuilder.targets.docker import DockerTable

SPEC = str(Path(__file__).resolve().parents[2] / "environments.toml")


def test_the_builtin_targets_in_their_order() -> None:
    assert registry.names() == ("docker", "wsl2", "windows", "native")
    assert registry.rendered() == ("docker", "wsl2", "windows")


@pytest.mark.parametrize(
    ("capability", "targets"),
    [
        ("push", ("docker", "wsl2")),
        ("pull", ("docker", "wsl2")),
        ("path", ("windows", "native")),
        ("no_cache", ("docker", "wsl2")),
        ("verify", ("docker", "wsl2")),
        ("cluster", ("docker", "native")),
        ("needs_docker", ("docker", "wsl2")),
        ("build", ("docker", "wsl2", "windows", "native")),
        ("run", ("docker", "wsl2", "windows", "native")),
        ("install", ("wsl2",)),
    ],
)
def test_capabilities_are_declared(capability: Capability, targets: tuple[str, ...]) -> None:
    assert registry.with_capability(capability) == targets


def test_every_builder_keeps_its_descriptors_promises() -> None:
    for descriptor in registry.all():
        builder = builder_for(descriptor)
        assert callable(builder.build) and callable(builder.validate)
        assert isinstance(builder, RegistryBuilder) == descriptor.capabilities.push


def test_unknown_target_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(
        UsageError,
        match=r"unknown target 'dokcer' \(did you mean 'docker'\?\); "
        r"choose one of: docker, wsl2, windows, native",
    ):
        registry.get("dokcer")


def test_a_second_target_with_a_taken_name_is_refused() -> None:
    import dataclasses

    clone = dataclasses.replace(registry.get("docker"), summary="another docker")
    with pytest.raises(EnvbuilderError, match="two targets are called 'docker'"):
        registry.register(clone)
    assert registry.get("docker").summary != "another docker"


def test_typed_table_access() -> None:
    env = load_spec(SPEC).env("cpu")
    docker = env.table(DockerTable)
    assert docker is not None and docker.base == "debian:bookworm-slim"
    assert set(env.tables) == set(env.targets)
    assert env.python_for("native") == "3.11"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["build", "--target", "native", "--env", "cpu", "--no-cache"],
            "--no-cache applies to the image targets (docker, wsl2), not native",
        ),
        (
            ["build", "--target", "docker", "--env", "cpu", "--force"],
            "--force applies to the venv targets (native, windows), not docker",
        ),
        (
            ["validate", "--target", "wsl2", "--env", "cpu", "--path", "/tmp/x"],
            "--path applies to the venv targets (native, windows), not wsl2",
        ),
        (
            ["pull", "--target", "native", "--env", "cpu"],
            "target native has no registry; pull applies to docker and wsl2",
        ),
    ],
)
def test_a_capability_the_target_lacks_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--spec", SPEC]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err

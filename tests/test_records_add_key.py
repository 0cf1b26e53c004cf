"""Adding a key to a record is one declaration (issue 33): a record extended by one optional
`key(...)` field, and nothing else, is read, refused, listed and carried by everything built
from the declarations. One test per kind of record: a target table, the probe's options (and
the context its checks get), the release check's expectation. The env lock's is in
tests/test_lock_model.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder.core.model import Finding
from envbuilder.core.records import key
from envbuilder.spec.load import check_spec
from envbuilder.targets import docker, registry
from envbuilder.targets.base import TableContext, table_keys
from envbuilder.targets.docker import DockerTable


@dataclasses.dataclass(frozen=True)
class ShmDockerTable(DockerTable):
    """[env.NAME.docker] with one key more, declared once."""

    shm_size: str | None = key("the container's /dev/shm size", default=None)


def _parse_shm(ctx: TableContext) -> ShmDockerTable:
    return ShmDockerTable(**ctx.values(ShmDockerTable))


@pytest.fixture
def shm_docker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The docker target with ShmDockerTable as its table, for this test only."""
    descriptor = dataclasses.replace(
        docker.DESCRIPTOR, table=ShmDockerTable, keys=table_keys(ShmDockerTable), parse=_parse_shm
    )
    monkeypatch.setitem(registry._DESCRIPTORS, "docker", descriptor)
    yield


def _spec(tmp_path: Path, docker_table: str) -> Path:
    spec = tmp_path / "environments.toml"
    spec.write_text(
        '[env.cpu]\naccelerator = "cpu"\npython = "3.11"\npackages = ["torch"]\n'
        f'targets = ["docker"]\n\n[env.cpu.docker]\nbase = "debian:bookworm-slim"\n{docker_table}',
        encoding="utf-8",
    )
    return spec


def _errors(findings: tuple[Finding, ...] | list[Finding]) -> list[str]:
    return [f"{f.key}: {f.message}" for f in findings if f.severity == "error"]


def test_the_key_schema_of_a_target_table_is_its_declarations() -> None:
    assert table_keys(DockerTable) == {"base": "str", "user": "str", "python": "str"}
    assert docker.DESCRIPTOR.keys == table_keys(DockerTable)
    assert table_keys(ShmDockerTable) == {**table_keys(DockerTable), "shm_size": "str"}


@pytest.mark.usefixtures("shm_docker")
def test_a_key_added_to_a_target_table_is_read_with_its_default(tmp_path: Path) -> None:
    written = check_spec(_spec(tmp_path, 'shm_size = "8g"\n'))
    assert _errors(written.findings) == []
    assert written.spec is not None
    assert written.spec.env("cpu").table(ShmDockerTable) == ShmDockerTable(
        base="debian:bookworm-slim", shm_size="8g"
    )
    left_out = check_spec(_spec(tmp_path, ""))
    assert left_out.spec is not None
    table = left_out.spec.env("cpu").table(ShmDockerTable)
    assert table is not None
    assert (table.shm_size, table.user, table.python) == (None, "envbuilder", "python3")


@pytest.mark.usefixtures("shm_docker")
def test_a_key_added_to_a_target_table_is_refused_when_wrong(tmp_path: Path) -> None:
    assert _errors(check_spec(_spec(tmp_path, "shm_size = 8\n")).findings) == [
        "env.cpu.docker.shm_size: must be a string, not an integer; quote it: \"8\""
    ]
    assert _errors(check_spec(_spec(tmp_path, 'shm = "8g"\n')).findings) == [
        "env.cpu.docker.shm: unknown key; "
        "known keys here: base, user, python, shm_size"
    ]


def test_without_the_key_the_target_table_refuses_it(tmp_path: Path) -> None:
    assert _errors(check_spec(_spec(tmp_path, 'shm_size = "8g"\n')).findings) == [
        "env.cpu.docker.shm_size: unknown key; known keys here: base, user, python"
    ]

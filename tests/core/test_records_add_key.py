"""Adding a key to a record is one declaration (issue 33): a record extended by one optional
`key(...)` field, and nothing else, is read, refused, listed and carried by everything built
from the declarations. One test per kind of record: a target table, the probe's options (and
the context its checks get), the release check's expectation. The env lock's is in
tests/lock/test_lock_model.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuilder.core import records
from envbuilder.core.model import Finding
from envbuilder.core.records import key
from envbuilder.probe.cli import add_argument, add_probe_arguments, options_from_args
from envbuilder.probe.common import Context
from envbuilder.probe.options import ProbeOptions
from envbuilder.spec.load import check_spec
from envbuilder.targets import docker, registry
from envbuilder.targets.base import TableContext, table_keys
from envbuilder.targets.docker import DockerTable


@dataclasses.dataclass(frozen=True)
class ShmDockerTable(DockerTable):
    """[env.NAME.docker] with one key more, declared once."""

    shm_size: str | None = key(
        "the container's /dev/shm size",
        default=None,
        pattern=r"[0-9]+[kmg]",
        form="a size like '8g'",
    )


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
        'env.cpu.docker.shm_size: must be a string, not an integer; quote it: "8"'
    ]
    assert _errors(check_spec(_spec(tmp_path, 'shm_size = "lots"\n')).findings) == [
        "env.cpu.docker.shm_size: 'lots' is not a size like '8g'"
    ]
    assert _errors(check_spec(_spec(tmp_path, 'shm = "8g"\n')).findings) == [
        "env.cpu.docker.shm: unknown key; known keys here: base, user, python, shm_size"
    ]


def test_without_the_key_the_target_table_refuses_it(tmp_path: Path) -> None:
    assert _errors(check_spec(_spec(tmp_path, 'shm_size = "8g"\n')).findings) == [
        "env.cpu.docker.shm_size: unknown key; known keys here: base, user, python"
    ]


# --- the probe's options ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmupOptions(ProbeOptions):
    """The probe's options with one more, declared once."""

    warmup: int = key(
        "untimed iterations before each measurement",
        default=3,
        minimum=0,
        flag="--warmup",
        metavar="N",
        arg_type=int,
    )


def _parser(options: type[ProbeOptions]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="probe", exit_on_error=False)
    for k in records.fields_of(options):
        add_argument(parser, k)
    return parser


def test_a_key_added_to_the_probe_options_is_a_flag_json_and_argv() -> None:
    args = _parser(WarmupOptions).parse_args(["--expect", "cpu", "--warmup", "5"])
    assert (args.level, args.expect, args.warmup) == ("quick", "cpu", 5)
    options = WarmupOptions(level="quick", expect="cpu", warmup=5, labels={"env": "cpu"})
    assert records.to_argv(options) == [
        "--level", "quick", "--expect", "cpu", "--label", "env=cpu", "--warmup", "5",
    ]  # fmt: skip
    assert records.to_json(options)["warmup"] == 5
    assert records.from_json(WarmupOptions, records.to_json(options)) == options
    assert "warmup" in records.schema_properties(records.fields_of(WarmupOptions))
    # its default is left out of the command line, as --repeat 1 is
    assert "--warmup" not in records.to_argv(dataclasses.replace(options, warmup=3))
    with pytest.raises(SystemExit):
        _parser(ProbeOptions).parse_args(["--expect", "cpu", "--warmup", "5"])


def test_the_probe_parser_is_its_declarations() -> None:
    """Every declared option is a flag of the probe's parser, read back into the same record."""
    parser = argparse.ArgumentParser(prog="probe")
    add_probe_arguments(parser)
    argv = [
        "--level", "standard", "--expect", "rocm", "--expect-rocm", "7.14.1",
        "--expect-hip", "7.14", "--expect-gfx", "gfx1100", "--label", "env=x", "--repeat", "3",
        "--only", "device", "--skip", "train", "--timeout", "9.5", "--find-batch",
    ]  # fmt: skip
    options = options_from_args(parser.parse_args(argv))
    assert records.to_argv(options) == argv
    flags = {k.flag for k in records.fields_of(ProbeOptions)}
    assert flags == {a.option_strings[0] for a in parser._actions if a.dest not in ("help", "json")}


def test_a_context_carries_every_option_to_the_checks() -> None:
    """Context extends ProbeOptions: an option added there reaches the checks' JSON context."""
    assert {k.name for k in records.fields_of(ProbeOptions)} < {
        k.name for k in records.fields_of(Context)
    }
    ctx = Context(level="quick", expect="rocm", expect_gfx=("gfx1100",), device_facts={"a": 1})
    assert Context.from_json(json.loads(json.dumps(ctx.to_json()))) == ctx

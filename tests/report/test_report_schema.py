"""The probe report's published schema: its record parts are generated from the probe's records
(envbuilder.report.reportschema), and real reports hold to it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envbuilder.core import records
from envbuilder.core.records import key
from envbuilder.probe.expectation import Expectation
from envbuilder.probe.options import ProbeOptions
from envbuilder.probe.runner import options_json
from envbuilder.report import reportschema

REPORTS = sorted((Path(__file__).parents[1] / "data" / "probe").glob("*.json"))


def _shipped() -> dict[str, Any]:
    shipped: dict[str, Any] = json.loads(reportschema.SCHEMA_FILE.read_text(encoding="utf-8"))
    return shipped


def test_the_schema_file_is_generated_from_the_records() -> None:
    assert reportschema.SCHEMA_FILE.read_text(encoding="utf-8") == reportschema.text(
        reportschema.generated(_shipped())
    ), "probe-report.schema.json drifted: run python -m envbuilder.report.reportschema"


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name)
def test_a_real_report_holds_to_the_schema(report: Path) -> None:
    validator = jsonschema.Draft202012Validator(_shipped())
    errors = [e.message for e in validator.iter_errors(json.loads(report.read_text()))]
    assert errors == []


def test_the_options_a_run_writes_hold_to_the_schema_and_a_wrong_one_does_not() -> None:
    schema = reportschema.options_schema()
    options = ProbeOptions(level="quick", expect="rocm", expect_gfx=("gfx1100",), lock="/l")
    jsonschema.validate(options_json(options), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**options_json(options), "expect_hip": "seven"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**options_json(options), "only": ["nope"]}, schema)


def test_a_key_added_to_the_expectation_is_in_the_schema_and_its_json() -> None:
    @dataclasses.dataclass(frozen=True)
    class CudaExpectation(Expectation):
        cuda: str | None = key("--expect-cuda: the CUDA release the env locks", default=None)

    exp = CudaExpectation(accelerator="cuda", cuda="12.8")
    assert records.to_json(exp) == {
        "accelerator": "cuda", "rocm": None, "hip": None, "gfx": [], "cuda": "12.8",
    }  # fmt: skip
    keys = records.fields_of(CudaExpectation)
    properties = records.schema_properties(keys, nulls=True)
    jsonschema.validate(records.to_json(exp), {"type": "object", "properties": properties})
    assert properties["cuda"]["type"] == ["string", "null"]
    assert records.from_json(CudaExpectation, records.to_json(exp)) == exp

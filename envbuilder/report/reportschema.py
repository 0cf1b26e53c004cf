"""The probe report's JSON Schema, `envbuilder/data/schemas/probe-report.schema.json`: the parts
that are records of the probe come from their declarations (envbuilder.core.records), so a key
added to a record is in the published schema with no other edit; the rest is written by hand in
the file. tests/report/test_report_schema.py holds the file equal to `generated(file)`; write it
again
with `python -m envbuilder.report.reportschema`.

Generated: `options` (envbuilder.probe.options.ProbeOptions, but `labels`, the report's own
object), the release check's `expected` (envbuilder.probe.expectation.Expectation) and a
check's metric (envbuilder.probe.common.Metric).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from envbuilder.core import records
from envbuilder.probe.common import Metric
from envbuilder.probe.expectation import Expectation
from envbuilder.probe.options import ProbeOptions

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "data" / "schemas" / "probe-report.schema.json"


def options_schema() -> dict[str, Any]:
    """The report's `options`: every key of ProbeOptions but `labels`; open to keys a newer
    probe adds (a report is read by an older envbuilder too)."""
    keys = tuple(k for k in records.fields_of(ProbeOptions) if k.name != "labels")
    return {
        "type": "object",
        "required": records.schema_required(keys),
        "properties": records.schema_properties(keys, nulls=True),
    }


def expected_schema() -> dict[str, Any]:
    """The release check's `expected`: Expectation's JSON form, every key written."""
    return _every_key_written(Expectation)


def metric_schema() -> dict[str, Any]:
    """A check's metric: Metric's JSON form, every key written."""
    return _every_key_written(Metric)


def _every_key_written(record: type) -> dict[str, Any]:
    """The schema of a record's JSON form where every key is written (None as null)."""
    keys = records.fields_of(record)
    return {
        "type": "object",
        "required": [k.name for k in keys],
        "additionalProperties": False,
        "properties": records.schema_properties(keys, nulls=True),
    }


def generated(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (the file's) with its generated parts made from the records."""
    out = copy.deepcopy(schema)
    out["$defs"]["metric"] = metric_schema()
    out["properties"]["options"] = options_schema()
    out["$defs"]["release"]["properties"]["expected"] = expected_schema()
    return out


def text(schema: dict[str, Any]) -> str:
    """The file's bytes for `schema`."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    """Write the file again, its generated parts from the records."""
    shipped = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    SCHEMA_FILE.write_text(text(generated(shipped)), encoding="utf-8")


if __name__ == "__main__":
    main()

"""A run request enqueued in DBOS-py's pickle, as portable JSON (pure): what it can hold converts as DBOS-py's
own portable encoding writes it (checked against it here); what cannot is named with its place
(tests/worker/test_interop.py checks DBOS-py's real client end to end)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from dbos import DBOSPortableJSONSerializer

from fireflow_contract.js_encoding import UndecodableValueError
from fireflow_contract.py_encoding import portable_value


def test_should_write_what_a_request_can_hold_as_dbos_py_s_portable_encoding_does() -> None:
    request = {
        "flow_ref": "greet",
        "inputs": {
            "when": datetime(2026, 12, 3, 9, 0, tzinfo=timezone(timedelta(hours=1))),
            "naive": datetime(2026, 12, 3, 8, 0, 0, 123456),
            "day": date(2026, 12, 3),
            "price": Decimal("12.50"),
            "pair": ("a", 1),
            "tags": {"x"},
            "n": 2**70,
            "ratio": 0.5,
            "flag": True,
            "none": None,
        },
    }
    converted = portable_value(request)
    assert converted["inputs"] == {
        "when": "2026-12-03T08:00:00.000Z",
        "naive": "2026-12-03T08:00:00.123Z",
        "day": "2026-12-03",
        "price": "12.50",
        "pair": ["a", 1],
        "tags": ["x"],
        "n": 2**70,
        "ratio": 0.5,
        "flag": True,
        "none": None,
    }
    assert DBOSPortableJSONSerializer().deserialize(DBOSPortableJSONSerializer().serialize(request)) == converted


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"inputs": {"blob": b"\x00"}}, "inputs.blob is a Python bytes, which a run request cannot carry"),
        ({"inputs": {"x": float("nan")}}, "inputs.x is a Python float nan (not a JSON number)"),
        ({"inputs": {"x": [1, float("inf")]}}, "inputs.x.1 is a Python float inf (not a JSON number)"),
        ({"inputs": {1: "a"}}, "inputs is a Python mapping with keys that are not strings"),
        ({"inputs": {"at": UTC}}, "inputs.at is a Python timezone"),
        (object(), "the request is a Python object"),
    ],
)
def test_should_name_a_value_with_no_json_form_and_where_it_is(value: Any, named: str) -> None:
    with pytest.raises(UndecodableValueError, match=f"^{re.escape(named)}"):
        portable_value(value)

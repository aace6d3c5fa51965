"""The TypeScript SDK's `js_superjson` and legacy encodings of a workflow's arguments, decoded to JSON (pure).
The texts are as superjson 1.x writes them (tests/worker/test_interop.py checks the real SDK end to end)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fireflow_contract.js_encoding import UndecodableValueError, decode_arguments


def _superjson(values: list[Any], meta: dict[str, Any] | None = None) -> str:
    return json.dumps({"json": values, "meta": meta or {}, "__dbos_serializer": "superjson"})


def test_should_decode_dates_bigints_sets_maps_and_undefined_as_the_portable_encoding_writes_them() -> None:
    request = {
        "flow_ref": "f", "inputs": {"when": "2026-12-04T10:00:00.000Z", "big": "12345678901234567890",
                                    "gone": None, "tags": ["a", "b"], "by": [["x", 1], ["y", 2]]},
        "list": [1, None, 3],
    }  # fmt: skip
    meta = {"values": {"0.inputs.when": ["Date"], "0.inputs.big": ["bigint"], "0.inputs.gone": ["undefined"],
                       "0.inputs.tags": ["set"], "0.inputs.by": ["map"], "0.list.1": ["undefined"]}}  # fmt: skip
    (decoded,) = decode_arguments(_superjson([request], meta))
    assert decoded == {
        "flow_ref": "f",
        "inputs": {"when": "2026-12-04T10:00:00.000Z", "big": "12345678901234567890", "tags": ["a", "b"],
                   "by": {"x": 1, "y": 2}},
        "list": [1, None, 3],
    }  # fmt: skip


def test_should_find_keys_that_hold_dots() -> None:
    # An `undefined` is dropped: the field is gone only if the path found it.
    (decoded,) = decode_arguments(
        _superjson([{"inputs": {"a.b": 1, "c": 2}}], {"values": {"0.inputs.a.b": ["undefined"]}})
    )
    assert decoded == {"inputs": {"c": 2}}
    (escaped,) = decode_arguments(
        _superjson([{"inputs": {"a.b": 1, "c": 2}}], {"values": {"0.inputs.a\\.b": ["undefined"]}})
    )
    assert escaped == {"inputs": {"c": 2}}


@pytest.mark.parametrize(
    ("annotation", "value", "named"),
    [
        (["number"], "NaN", "inputs.x is a JavaScript number NaN (not a JSON number)"),
        (["regexp"], "/a/", "inputs.x is a JavaScript RegExp"),
        (["Error"], {"name": "Error"}, "inputs.x is a JavaScript Error"),
        ([["class", "Point"]], {}, "inputs.x is a JavaScript Point (class)"),
        ([["custom", "Buffer"]], "", "inputs.x is a JavaScript Buffer (custom)"),
    ],
)
def test_should_name_a_value_without_a_json_form_and_where_it_is(annotation: Any, value: Any, named: str) -> None:
    with pytest.raises(UndecodableValueError) as caught:
        decode_arguments(_superjson([{"inputs": {"x": value}}], {"values": {"0.inputs.x": annotation}}))
    assert str(caught.value).startswith(named)


def test_should_refuse_a_circular_structure_and_a_map_with_other_keys() -> None:
    with pytest.raises(UndecodableValueError, match="circular structure"):
        decode_arguments(_superjson([{"inputs": {"me": None}}], {"referentialEqualities": {"0": ["0.inputs.me"]}}))
    with pytest.raises(UndecodableValueError, match="Map with keys that are not strings"):
        decode_arguments(_superjson([{"inputs": {"m": [[1, "a"]]}}], {"values": {"0.inputs.m": ["map"]}}))


def test_should_decode_the_legacy_tagged_json_of_older_sdks() -> None:
    text = json.dumps([{"inputs": {"when": {"dbos_type": "dbos_Date", "dbos_data": "2026-01-01T00:00:00.000Z"},
                                   "n": {"dbos_type": "dbos_BigInt", "dbos_data": "7"}}}])  # fmt: skip
    assert decode_arguments(text) == [{"inputs": {"when": "2026-01-01T00:00:00.000Z", "n": "7"}}]
    with pytest.raises(UndecodableValueError, match=r"inputs\.b is a JavaScript Buffer"):
        decode_arguments(json.dumps([{"inputs": {"b": {"type": "Buffer", "data": [1]}}}]))


def test_should_refuse_a_type_map_naming_what_is_not_there_and_arguments_that_are_not_a_list() -> None:
    with pytest.raises(ValueError, match=r"names '0\.inputs\.nope'"):
        decode_arguments(_superjson([{"inputs": {}}], {"values": {"0.inputs.nope": ["bigint"]}}))
    with pytest.raises(ValueError, match="not a list"):
        decode_arguments(json.dumps({"flow_ref": "f"}))

"""A run request from DBOS-py's pickle, as portable JSON (pure).

DBOS-py's `DBOSClient` enqueues, by default, in its own encoding (`py_pickle`): Python objects, which no
other SDK reads. A run request is JSON data, so what it can hold converts the way DBOS-py's own portable
encoding writes it: a `datetime` its RFC 3339 UTC string (naive: taken as UTC), a `date` its ISO date, a
`Decimal` its digits, a tuple or a set a list. Anything else (bytes, a class instance, a mapping with keys
that are not strings, NaN or an infinity) has no JSON form: `UndecodableValueError` names it and where it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from fireflow_contract.js_encoding import UndecodableValueError


def portable_value(value: Any, path: list[str] | None = None) -> Any:
    """`value` (a workflow argument; `path` its place, the argument's index first) as plain JSON data."""
    where = path if path is not None else ["0"]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UndecodableValueError(f"float {value} (not a JSON number)", where, "Python")
        return value
    if isinstance(value, datetime):
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, list | tuple | set | frozenset):
        return [portable_value(item, [*where, str(index)]) for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise UndecodableValueError("mapping with keys that are not strings", where, "Python")
        return {key: portable_value(item, [*where, key]) for key, item in value.items()}
    raise UndecodableValueError(type(value).__name__, where, "Python")

"""Decoding the TypeScript SDK's own encoding of a workflow's arguments (pure).

`@dbos-inc/dbos-sdk` stores a workflow's arguments, by default, as `js_superjson`: the JSON text
`{"json": <the values>, "meta": <a type map>, "__dbos_serializer": "superjson"}` (superjson 1.x), or, written
by older SDKs, the legacy JSON where a Date is `{"dbos_type": "dbos_Date", "dbos_data": ISO}` and a BigInt
`{"dbos_type": "dbos_BigInt", "dbos_data": digits}`. A run request is JSON data, so what it can hold decodes
to plain JSON the way the SDK's own portable encoding writes it: a Date becomes its ISO string, a BigInt its
decimal string, `undefined` an absent field (null in an array), a Set a list, a Map with string keys an object.
Anything else (NaN, a RegExp, an Error, a class instance, a Buffer, a typed array, a Symbol) has no JSON
form: `UndecodableValueError` names it and where it is.
"""

from __future__ import annotations

import json
from typing import Any

MARKER_KEY = "__dbos_serializer"
MARKER_VALUE = "superjson"
_ABSENT = object()


class UndecodableValueError(ValueError):
    """A value of the request that has no JSON form; the message names its type and where it is."""

    def __init__(self, kind: str, path: list[str], language: str = "JavaScript") -> None:
        where = ".".join(path[1:]) if len(path) > 1 else "the request"  # path[0] is the argument's index
        super().__init__(f"{where} is a {language} {kind}, which a run request cannot carry")
        self.kind = kind


def decode_arguments(text: str) -> list[Any]:
    """The positional arguments of a workflow stored as `js_superjson` (or the legacy JSON), as plain JSON."""
    parsed = json.loads(text)
    if isinstance(parsed, dict) and parsed.get(MARKER_KEY) == MARKER_VALUE and "json" in parsed:
        meta = parsed.get("meta") or {}
        if meta.get("referentialEqualities") and _circular(meta["referentialEqualities"]):
            raise UndecodableValueError("circular structure", ["0"])
        values = _apply(parsed["json"], meta.get("values"), [])
    else:
        values = _legacy(parsed, [])
    if not isinstance(values, list):
        raise ValueError("the stored arguments are not a list")
    return values


def _circular(equalities: Any) -> bool:
    """superjson writes a repeated object in full at each place (so a copy needs nothing), but a cycle as null.
    Its map is `{target: [places]}`, or `[places]` for the root itself."""
    if isinstance(equalities, list):
        return True  # the root refers to itself
    if not isinstance(equalities, dict):
        return False
    for target, places in equalities.items():
        for place in places if isinstance(places, list) else []:
            if isinstance(place, str) and place.startswith(f"{target}."):
                return True
    return False


def _apply(value: Any, annotations: Any, path: list[str]) -> Any:
    """`value` with superjson's type annotations applied: a leaf `[type]` / `[type, inner]`, or a tree
    `{"path.to.x": annotation}` of dotted paths (a literal dot escaped as `\\.`)."""
    if annotations is None:
        return value
    if isinstance(annotations, list):
        return _annotated(value, annotations, path)
    if not isinstance(annotations, dict):
        raise ValueError("the superjson type map is malformed")
    # Deepest first, so that dropping an `undefined` field never moves a path not yet applied.
    for dotted, annotation in sorted(annotations.items(), key=lambda item: -len(_split(item[0]))):
        keys = _resolve(value, _split(dotted))
        if keys is None:
            raise ValueError(f"the superjson type map names {dotted!r}, which is not there")
        value = _at(value, keys, annotation, path)
    return value


def _resolve(value: Any, segments: list[str]) -> list[str] | None:
    """The keys `segments` lead through inside `value`. superjson 1.x does not escape every dot of a key, so
    a key may span several segments: each dot is first taken as a separator, then as part of a key."""
    if not segments:
        return []
    for width in range(1, len(segments) + 1):
        key = ".".join(segments[:width])
        if isinstance(value, dict) and key in value:
            inner = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            inner = value[int(key)]
        else:
            continue
        rest = _resolve(inner, segments[width:])
        if rest is not None:
            return [key, *rest]
    return None


def _at(value: Any, keys: list[str], annotation: Any, path: list[str]) -> Any:
    """`value` with the annotation applied at `keys` inside it."""
    if not keys:
        return _annotated(value, annotation, path)
    key, rest = keys[0], keys[1:]
    if isinstance(value, dict):
        inner = _at(value[key], rest, annotation, [*path, key])
        if inner is _ABSENT:
            return {k: v for k, v in value.items() if k != key}
        return {**value, key: inner}
    index = int(key)
    inner = _at(value[index], rest, annotation, [*path, key])
    return [*value[:index], None if inner is _ABSENT else inner, *value[index + 1 :]]


def _annotated(value: Any, annotation: Any, path: list[str]) -> Any:
    kind = annotation[0] if isinstance(annotation, list) and annotation else annotation
    inner = annotation[1] if isinstance(annotation, list) and len(annotation) > 1 else None
    if kind == "Date":
        return value  # superjson's json part holds the ISO string, as the portable encoding writes a Date
    if kind == "bigint":
        return str(value)  # the portable encoding's `toString(10)`: an integer past 2^53 stays exact everywhere
    if kind == "undefined":
        return _ABSENT
    if kind == "set":
        return _apply(value, inner, path)
    if kind == "map":
        pairs = _apply(value, inner, path)
        if not all(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
            raise UndecodableValueError("Map with keys that are not strings", path)
        return {key: item for key, item in pairs if item is not _ABSENT}
    if kind == "number":
        raise UndecodableValueError(f"number {value} (not a JSON number)", path)
    names = {"regexp": "RegExp", "Error": "Error", "symbol": "Symbol"}
    if isinstance(kind, list) and kind:  # ["class", name], ["custom", "Buffer"], ["typed-array", name], ...
        raise UndecodableValueError(f"{kind[-1]} ({kind[0]})", path)
    raise UndecodableValueError(names.get(str(kind), str(kind)), path)


def _split(dotted: str) -> list[str]:
    """superjson's path: segments separated by `.`, a literal dot written `\\.`."""
    segments, current, escaped = [], "", False
    for char in dotted:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ".":
            segments.append(current)
            current = ""
        else:
            current += char
    segments.append(current)
    return [] if segments == [""] else segments


def _legacy(value: Any, path: list[str]) -> Any:
    """The legacy DBOSJSON: plain JSON, but for the SDK's tagged Date, BigInt and Buffer objects."""
    if isinstance(value, dict):
        tag = value.get("dbos_type")
        if tag == "dbos_Date" and isinstance(value.get("dbos_data"), str):
            return value["dbos_data"]
        if tag == "dbos_BigInt" and isinstance(value.get("dbos_data"), str):
            return value["dbos_data"]
        if value.get("type") == "Buffer" and isinstance(value.get("data"), list):
            raise UndecodableValueError("Buffer", path)
        return {key: _legacy(item, [*path, key]) for key, item in value.items()}
    if isinstance(value, list):
        return [_legacy(item, [*path, str(index)]) for index, item in enumerate(value)]
    return value

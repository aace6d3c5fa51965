"""References inside node params: `${inputs.NAME.path}`, `${nodes.ID.path}`, and `$${` for a literal `${`.

A string that is exactly one reference becomes the referenced value, keeping its JSON type; a reference
inside a longer string is interpolated as text (strings as they are, anything else as JSON).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

# Escape first, so that `$${x}` is never read as `$` + a reference; a lone `${` is reported as unclosed.
_TOKEN = re.compile(r"\$\$\{|\$\{(?P<body>[^{}]*)\}|\$\{")
_BODY = re.compile(r"(?P<root>inputs|nodes)\.(?P<name>[A-Za-z_][A-Za-z0-9_-]{0,63})(?P<path>(?:\.[A-Za-z0-9_-]+)*)")

Loc = tuple[str | int, ...]


class ReferenceSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Reference:
    root: Literal["inputs", "nodes"]
    name: str
    path: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "${" + ".".join((self.root, self.name, *self.path)) + "}"


Part = str | Reference


def parse(text: str) -> list[Part]:
    """Split a string into literal text and references; raises ReferenceSyntaxError."""
    parts = _split(text)
    for part in parts:
        if isinstance(part, ReferenceSyntaxError):
            raise part
    return [part for part in parts if not isinstance(part, ReferenceSyntaxError)]


def _split(text: str) -> tuple[Part | ReferenceSyntaxError, ...]:
    """Like parse, but a malformed reference becomes an error item, so that the others are still seen."""
    if "${" not in text:
        return (text,)
    if len(text) > _MEMO_MAX_CHARS:
        return _split_text(text)
    return _split_memo(text)


def _split_text(text: str) -> tuple[Part | ReferenceSyntaxError, ...]:
    parts: list[Part | ReferenceSyntaxError] = []
    literal = ""
    pos = 0
    for match in _TOKEN.finditer(text):
        literal += text[pos : match.start()]
        pos = match.end()
        if match.group(0) == "$${":
            literal += "${"
            continue
        if literal:
            parts.append(literal)
            literal = ""
        body = match.group("body")
        if body is None:
            parts.append(
                ReferenceSyntaxError(
                    f"'${{' at position {match.start()} has no closing '}}' (write '$${{' for a literal '${{')"
                )
            )
        else:
            parts.append(_parse_body(body))
    literal += text[pos:]
    if literal:
        parts.append(literal)
    return tuple(parts)


# A worker resolves the same params' strings run after run: their parts are remembered (immutable tuples).
_MEMO_MAX_CHARS = 4096
_split_memo = functools.lru_cache(maxsize=4096)(_split_text)


def _parse_body(body: str) -> Reference | ReferenceSyntaxError:
    match = _BODY.fullmatch(body)
    if match is None:
        return ReferenceSyntaxError(
            f"malformed reference '${{{body}}}': expected ${{inputs.NAME}} or ${{nodes.ID}}, "
            "optionally followed by .field or .index parts"
        )
    root: Literal["inputs", "nodes"] = "inputs" if match["root"] == "inputs" else "nodes"
    path = tuple(match["path"].split(".")[1:])
    return Reference(root, match["name"], path)


def scan(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, Reference | ReferenceSyntaxError]]:
    """Every reference (or syntax error) in the strings of a JSON value, with where it was found.

    Mapping keys are literal and never scanned.
    """
    if isinstance(value, str):
        for part in _split(value):
            if not isinstance(part, str):
                yield loc, part
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from scan(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from scan(item, (*loc, index))


def has_reference(text: str) -> bool:
    """Whether a string's value is only known at run time (a malformed one counts: it is reported apart)."""
    return any(not isinstance(part, str) for part in _split(text))


Lookup = Callable[[Reference], Any]
# A JSON value with references, compiled: called with a lookup, it builds a fresh copy with them replaced.
Template = Callable[[Lookup], Any]


def compile_template(value: Any) -> Template:
    """`value` as a Template, which builds a copy of it with every reference replaced by `lookup(reference)`;
    its strings are parsed once, so that a node's params cost each run only the copy and the lookups. A
    malformed reference raises its ReferenceSyntaxError when the template is used."""
    if isinstance(value, str):
        return _string_template(value)
    if isinstance(value, dict):
        items = [(key, compile_template(item)) for key, item in value.items()]
        return lambda lookup: {key: item(lookup) for key, item in items}
    if isinstance(value, list):
        elements = [compile_template(item) for item in value]
        return lambda lookup: [element(lookup) for element in elements]
    return lambda _lookup: value  # a number, a boolean or null: nothing to copy


def _string_template(text: str) -> Template:
    try:
        parts = parse(text)
    except ReferenceSyntaxError as err:
        problem = str(err)

        def malformed(_lookup: Lookup) -> Any:
            raise ReferenceSyntaxError(problem)

        return malformed
    if len(parts) == 1 and isinstance(parts[0], Reference):
        whole = parts[0]
        return lambda lookup: lookup(whole)
    if all(isinstance(part, str) for part in parts):
        literal = "".join(part for part in parts if isinstance(part, str))
        return lambda _lookup: literal
    return lambda lookup: "".join(part if isinstance(part, str) else as_text(lookup(part)) for part in parts)


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_path(text: str) -> tuple[str, ...]:
    """`a.b.0` -> ("a", "b", "0"); the empty string is the value itself."""
    return tuple(text.split(".")) if text else ()


def lookup_path(value: Any, path: tuple[str, ...]) -> Any:
    """Follow object keys and list indexes; raises LookupError saying where the path stopped."""
    for depth, segment in enumerate(path):
        if isinstance(value, dict):
            if segment not in value:
                raise LookupError(f"{_where(path, depth)} has no field {segment!r}")
            value = value[segment]
        elif isinstance(value, list):
            if not (segment.isascii() and segment.isdigit()) or int(segment) >= len(value):
                raise LookupError(f"{_where(path, depth)} is a list of {len(value)} items; {segment!r} is not an index")
            value = value[int(segment)]
        else:
            raise LookupError(f"{_where(path, depth)} is {json_kind(value)}, it has no field {segment!r}")
    return value


def _where(path: tuple[str, ...], depth: int) -> str:
    return ".".join(path[:depth]) or "the value"


def json_kind(value: Any) -> str:
    """'a string', 'an object', ... for messages about a value of the wrong kind."""
    if value is None:
        return "null"
    # bool before int: True is an int in Python but not a number in JSON.
    for kind, name in ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "a list")):
        if isinstance(value, kind):
            return name
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"

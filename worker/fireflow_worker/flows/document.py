"""Reading a flow document (YAML or JSON text) into plain JSON data, with one-line errors."""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from fireflow_worker.flows.limits import MAX_NESTING_DEPTH

Loc = tuple[str | int, ...]


class DocumentError(ValueError):
    """The text is not a readable YAML/JSON document; the message is one line."""


class _FlowLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, aliases and deep nesting, and keeps dates as strings.

    A flow is JSON data, which has no aliases: refusing them removes the "billion laughs" expansion, where
    a few hundred bytes of nested aliases stand for billions of values. Nesting is bounded while composing,
    before PyYAML's recursion could reach Python's recursion limit.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event: yaml.AliasEvent = self.peek_event()  # type: ignore[no-untyped-call]
            problem = f"aliases (*{event.anchor}) are not allowed in a flow; write the value out"
            mark: yaml.Mark | None = event.start_mark  # type: ignore[assignment]
            raise yaml.composer.ComposerError(None, None, problem, mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING_DEPTH + 1:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"the document is nested more than {MAX_NESTING_DEPTH} levels deep", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_FlowLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _mapping_without_duplicates(loader: _FlowLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    # PyYAML silently keeps the last of two equal keys; two nodes with one id must not pass unnoticed.
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_FlowLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DocumentError(f"JSON: duplicate key {key!r}")
        result[key] = value
    return result


def parse_text(text: str) -> Any:
    """YAML or JSON text -> data. Text starting with `{` is read as JSON first, for JSON's clearer errors."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text, object_pairs_hook=_object_without_duplicates)
        except json.JSONDecodeError:
            pass  # YAML flow style also starts with "{"; report YAML's error if both fail
        except RecursionError:
            raise DocumentError(f"the document is nested more than {MAX_NESTING_DEPTH} levels deep") from None
        except DocumentError:
            raise
        except ValueError as exc:  # e.g. an integer beyond Python's 4300-digit conversion limit
            raise DocumentError(f"JSON: {exc}") from None
    try:
        return yaml.load(text, Loader=_FlowLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise DocumentError(f"the document is nested more than {MAX_NESTING_DEPTH} levels deep") from None
    except ValueError as exc:  # a constructor's conversion failed (huge integer)
        raise DocumentError(f"YAML: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1} column {exc.problem_mark.column + 1}" if exc.problem_mark else ""
        context = f" ({exc.context})" if exc.context else ""
        raise DocumentError(f"YAML/JSON syntax error{where}: {exc.problem}{context}") from exc
    except yaml.YAMLError as exc:
        raise DocumentError(f"YAML/JSON syntax error: {exc}") from exc


def loc_text(loc: Loc) -> str:
    """('params', 'ops', 0, 'pick') -> 'params.ops[0].pick'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def json_problems(value: Any, loc: Loc = ()) -> list[str]:
    """Why a value is not plain JSON data (string keys; null, bool, number, string, list, object)."""
    where = loc_text(loc) or "the document"
    if value is None or isinstance(value, bool | int | str):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{where}: {value} is not a JSON number"]
    if isinstance(value, list):
        return [problem for index, item in enumerate(value) for problem in json_problems(item, (*loc, index))]
    if isinstance(value, dict):
        problems: list[str] = []
        for key, item in value.items():
            if isinstance(key, str):
                problems += json_problems(item, (*loc, key))
            else:
                problems.append(f"{where}: key {key!r} is not a string (quote it)")
        return problems
    return [f"{where}: a {type(value).__name__} is not JSON data"]

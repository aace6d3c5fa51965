"""Writes the reference tables of docs/ from the code's own models, so the pages cannot drift from them.

    .venv/bin/python -m tests.docs.generate          # rewrite the generated blocks
    .venv/bin/python -m tests.docs.generate --check  # exit 1 naming each page that differs

The pages are docs/configuration.md, docs/crd-reference.md and the chart's README (its values). A generated
block sits between `<!-- BEGIN GENERATED: <name> -->` and `<!-- END GENERATED: <name> -->` in a
page; everything outside the markers is written by hand. The sources:

- the worker's environment: `fireflow_worker.config.WorkerConfig` (aliases, defaults, ranges);
- the operator's environment: `fireflow_operator.settings.OperatorSettings`;
- the chart's values: `charts/fireflow-operator/values.yaml` (its `# --` comments, its defaults) and
  `values.schema.json` (types and ranges);
- the CRD's fields: the OpenAPI schema in `crds/` (itself generated from the operator's pydantic model).

The sentences of the two environment tables live in `descriptions.py`; a variable without one is an error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fireflow_contract import worker_variables
from fireflow_contract.executor_ids import MAX_PROCESSES
from fireflow_contract.queues import ALL_QUEUES
from fireflow_operator.settings import OperatorSettings
from fireflow_worker.config import APP_NAME_PATTERN, WorkerConfig
from tests.docs import descriptions

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
ROOT = REPO_ROOT  # where the pages are (a test points it elsewhere)
CHART_DIR = REPO_ROOT / "charts" / "fireflow-operator"
CRD_FILE = REPO_ROOT / "crds" / "fireflow.persistent.ai_fireflowworkerpools.yaml"
COMMAND = ".venv/bin/python -m tests.docs.generate"
Json = dict[str, Any]


class GenerateError(Exception):
    """The sources and the descriptions disagree; the message names what to add or remove."""


# --- tables -------------------------------------------------------------------------------------------------


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def code(value: str) -> str:
    return f"`{value}`"


# --- environment variables from pydantic models ---------------------------------------------------------------


def _bound(info: FieldInfo, name: str) -> Any:
    return next((getattr(m, name) for m in info.metadata if hasattr(m, name)), None)


def _number(value: Any) -> str:
    return f"{value:,}".replace(",", " ") if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def _plain(annotation: Any) -> list[Any]:
    """The annotation's alternatives without None."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return [arg for arg in get_args(annotation) if arg is not type(None)]
    return [annotation]


def accepted(info: FieldInfo) -> str:
    """What a variable accepts, from its type and its constraints."""
    kinds = _plain(info.annotation)
    kind = kinds[0] if kinds else str
    low, high = _bound(info, "ge"), _bound(info, "le")
    if get_origin(kind) is Literal:
        return ", ".join(code(str(arg)) for arg in get_args(kind))
    if kind is bool:
        return "`true` or `false`"
    if kind in (int, float):
        word = "integer" if kind is int else "number"
        if low is not None and high is not None:
            return f"{word} {_number(low)} to {_number(high)}"
        return word
    if get_origin(kind) is list:
        return "comma-separated list"
    if get_origin(kind) is dict:
        return "comma-separated `key=value` labels"
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return "JSON object"
    shortest, longest = _bound(info, "min_length"), _bound(info, "max_length")
    if longest is not None:
        return f"string of {shortest or 0} to {longest} characters"
    return "string"


def default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, list | dict):
        return code(",".join(map(str, value))) if value else "empty"
    if isinstance(value, BaseModel):
        return code(json.dumps(value.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":")))
    if value == "":
        return "empty"
    return code(str(value))


def env_rows(
    model: type[BaseModel],
    sentences: Mapping[str, str],
    *,
    where: str,
    accepted_overrides: Mapping[str, str] | None = None,
) -> list[list[str]]:
    """One row per variable of `model`, in the model's order."""
    overrides = accepted_overrides or {}
    names = [info.alias for info in model.model_fields.values() if info.alias]
    if missing := [name for name in names if name not in sentences]:
        raise GenerateError(f"no description of {', '.join(missing)}: add one to tests/docs/descriptions.py ({where})")
    if stale := sorted(set(sentences) - set(names)):
        raise GenerateError(f"{', '.join(stale)} described in tests/docs/descriptions.py ({where}) but not read")
    rows = []
    for info in model.model_fields.values():
        assert info.alias is not None
        rows.append([code(info.alias), default(info), overrides.get(info.alias, accepted(info)), sentences[info.alias]])
    return rows


def worker_env() -> str:
    overrides = {
        worker_variables.APPLICATION_NAME: f"matches `{APP_NAME_PATTERN.pattern}`",
        worker_variables.PROCESSES: f"`auto` or integer 1 to {MAX_PROCESSES}",
        worker_variables.QUEUES: "`all` or a comma-separated list of " + ", ".join(map(code, ALL_QUEUES)),
        worker_variables.DATABASE_URL: "a `postgresql://` URL (percent-encode `@ : / ? #` in the password)",
    }
    rows = env_rows(WorkerConfig, descriptions.WORKER_ENV, where="WORKER_ENV", accepted_overrides=overrides)
    aliases = {
        worker_variables.WORKER_ID: worker_variables.WORKER_ID_ALIAS,
        worker_variables.APPLICATION_VERSION: worker_variables.APPLICATION_VERSION_ALIAS,
    }
    for row in rows:
        name = row[0].strip("`")
        if name in aliases:
            row[0] += f" (alias {code(aliases[name])})"
    return table(["variable", "default", "accepted", "what it does"], rows)


def operator_env() -> str:
    rows = env_rows(OperatorSettings, descriptions.OPERATOR_ENV, where="OPERATOR_ENV")
    return table(["variable", "default", "accepted", "what it does"], rows)


# --- chart values ---------------------------------------------------------------------------------------------

KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][A-Za-z0-9_]*):")
DOC_START = re.compile(r"^ *# -- ?(?P<text>.*)$")
DOC_MORE = re.compile(r"^ *# ?(?P<text>.*)$")


def documented_values(text: str) -> Iterator[tuple[str, str]]:
    """(dotted path, its `# --` comment) for every documented key of a values.yaml, in file order."""
    stack: list[tuple[int, str]] = []
    doc: list[str] | None = None
    for line in text.splitlines():
        if start := DOC_START.match(line):
            doc = [start["text"]]
        elif doc is not None and (more := DOC_MORE.match(line)):
            doc.append(more["text"])
        elif key := KEY_LINE.match(line):
            indent = len(key["indent"])
            stack = [(depth, name) for depth, name in stack if depth < indent] + [(indent, key["key"])]
            if doc is not None:
                yield ".".join(name for _, name in stack), " ".join(doc).strip()
            doc = None
        elif not line.strip().startswith("- "):
            doc = None


def _schema_at(schema: Json, path: list[str]) -> Json:
    node = schema
    for name in path:
        node = _resolve(schema, node).get("properties", {}).get(name, {})
    return _resolve(schema, node)


def _resolve(schema: Json, node: Json) -> Json:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        return {
            **schema["definitions"][ref.removeprefix("#/definitions/")],
            **{k: v for k, v in node.items() if k != "$ref"},
        }
    return node


def constraints(node: Json) -> str:
    """A schema node's type and limits in a few words."""
    kinds = node.get("type")
    parts = ["/".join(kinds) if isinstance(kinds, list) else str(kinds)] if kinds else []
    if "enum" in node:
        parts = ["one of " + ", ".join(code(json.dumps(v) if not isinstance(v, str) else v) for v in node["enum"])]
    parts += _range(node.get("minimum"), node.get("maximum"), "")
    parts += _range(node.get("minLength"), node.get("maxLength"), " characters")
    parts += _range(node.get("minItems"), node.get("maxItems"), " items")
    if node.get("pattern"):
        parts.append(f"matches `{node['pattern']}`")
    return ", ".join(parts)


def _range(low: Any, high: Any, unit: str) -> list[str]:
    if low is not None and high is not None:
        return [f"{_number(low)} to {_number(high)}{unit}"]
    if low == 1 and unit:
        return ["non-empty"]
    if low is not None:
        return [f"at least {_number(low)}{unit}"]
    if high is not None:
        return [f"at most {_number(high)}{unit}"]
    return []


def _flow(value: Any) -> str:
    if value in ("", None):
        return "empty" if value == "" else "unset"
    if isinstance(value, str):
        return code(value)
    return code(json.dumps(value, separators=(", ", ": "), ensure_ascii=False))


def _leaves(values: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def chart_values() -> str:
    text = (CHART_DIR / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    documented = dict(documented_values(text))
    undocumented = [
        leaf for leaf in _leaves(values)
        if not any(leaf == path or leaf.startswith(path + ".") for path in documented)
    ]  # fmt: skip
    if undocumented:
        raise GenerateError(f"values.yaml has no `# --` comment for {', '.join(undocumented)}")
    rows = []
    for path, sentence in documented.items():
        value: Any = values
        for name in path.split("."):
            value = value[name]
        rows.append([code(path), _flow(value), constraints(_schema_at(schema, path.split("."))), sentence])
    return table(["value", "default", "accepted", "what it does"], rows)


# --- CRD fields -----------------------------------------------------------------------------------------------


def crd_rows(node: Json, path: str, *, required: bool = False) -> Iterator[list[str]]:
    default_value = node.get("default")
    kind = constraints({k: v for k, v in node.items() if k != "pattern"}) or "any"
    yield [
        code(path),
        kind + (", required" if required else ""),
        "" if default_value is None else _flow(default_value),
        node.get("description", ""),
    ]
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return
    for name, child in (node.get("properties") or {}).items():
        yield from crd_rows(child, f"{path}.{name}", required=name in node.get("required", ()))
    items = node.get("items")
    if isinstance(items, dict) and items.get("properties"):
        for name, child in items["properties"].items():
            yield from crd_rows(child, f"{path}[].{name}", required=name in items.get("required", ()))


def _crd_schema() -> Json:
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema: Json = version["schema"]["openAPIV3Schema"]
    return schema


def crd_fields(part: str) -> str:
    rows = list(crd_rows(_crd_schema()["properties"][part], part))
    return table(["field", "type", "default", "description"], rows)


# --- pages ----------------------------------------------------------------------------------------------------

# (page, block, what writes it); pages relative to the repository.
BLOCKS: list[tuple[str, str, Callable[[], str]]] = [
    ("docs/configuration.md", "worker-env", worker_env),
    ("docs/configuration.md", "operator-env", operator_env),
    ("docs/configuration.md", "chart-values", chart_values),
    ("docs/crd-reference.md", "crd-spec", lambda: crd_fields("spec")),
    ("docs/crd-reference.md", "crd-status", lambda: crd_fields("status")),
    ("charts/fireflow-operator/README.md", "chart-values", chart_values),
]


def render_page(text: str, blocks: Mapping[str, str], page: str) -> str:
    """The page with each named block's content replaced."""
    for name, content in blocks.items():
        begin = f"<!-- BEGIN GENERATED: {name} ({COMMAND}) -->"
        end = f"<!-- END GENERATED: {name} -->"
        start, finish = text.find(begin), text.find(end)
        if start < 0 or finish < start:
            raise GenerateError(f"{page} has no block {begin!r} ... {end!r}")
        text = f"{text[:start]}{begin}\n{content}\n{text[finish:]}"
    return text


def generated_pages() -> dict[str, str]:
    """Page name -> its text as the generator writes it."""
    by_page: dict[str, dict[str, str]] = {}
    for page, name, build in BLOCKS:
        by_page.setdefault(page, {})[name] = build()
    return {page: render_page((ROOT / page).read_text(), blocks, page) for page, blocks in by_page.items()}


def stale_pages() -> list[str]:
    return [page for page, text in generated_pages().items() if (ROOT / page).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docs.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page differs")
    args = parser.parse_args(argv)
    try:
        pages = generated_pages()
    except GenerateError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = [page for page, text in pages.items() if (ROOT / page).read_text() != text]
    if args.check:
        for page in stale:
            print(f"{page} differs from what the code says; regenerate it with: {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for page in stale:
        (ROOT / page).write_text(pages[page])
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

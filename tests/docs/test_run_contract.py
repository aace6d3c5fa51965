"""The run contract's page says what the code does: its TypeScript example is the tested caller's own lines,
its events table is the contract's events, and the examples' callers name the workflow, queue and stream as
the contract does."""

from __future__ import annotations

import re
import textwrap

from fireflow_contract import events, queues, run_request
from tests.docs.generate import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "run-contract.md"
CALLER = REPO_ROOT / "examples" / "interop" / "typescript" / "fireflow-run.js"
PYTHON_CALLER = REPO_ROOT / "examples" / "interop" / "python_client.py"


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_should_quote_the_typescript_caller_s_own_lines() -> None:
    blocks = re.findall(r"^( *)```js\n(.*?)^\1```", _section("Examples"), re.MULTILINE | re.DOTALL)
    assert blocks, "the page quotes no TypeScript"
    for _, block in blocks:
        assert textwrap.dedent(block) in CALLER.read_text(), f"not fireflow-run.js's own lines:\n{block}"


def test_should_document_every_event_with_the_fields_it_has_event_first_and_at_ms_last() -> None:
    rows = re.findall(r"^\| `([a-z.]+)` \| (.*) \|$", _section("Events"), re.MULTILINE)
    built = [
        events.run_started("f", 0),
        events.node_started("n", "t", 1, 0),
        events.node_finished("n", 1, 0, 0),
        events.node_failed("n", 1, "e", 0, 0),
        events.run_finished(0),
        events.run_failed("e", 0),
    ]
    assert [event[events.EVENT] for event in built] == list(events.EVENT_NAMES)
    assert all(next(iter(event)) == events.EVENT and list(event)[-1] == events.AT_MS for event in built)
    documented = {name: re.findall(r"`([a-z_]+)`", fields) for name, fields in rows}
    assert documented == {
        event[events.EVENT]: [key for key in event if key not in (events.EVENT, events.AT_MS)] for event in built
    }


def test_should_name_the_workflow_queue_and_stream_in_the_examples_as_the_contract_does() -> None:
    caller = CALLER.read_text()
    constants = dict(re.findall(r"^const ([A-Z_]+) = '([^']*)';$", caller, re.MULTILINE))
    expected = {
        "WORKFLOW_NAME": run_request.WORKFLOW_NAME,
        "EXECUTIONS_QUEUE": queues.EXECUTIONS,
        "EVENTS_STREAM": run_request.EVENTS_STREAM,
    }
    assert constants == expected
    python = dict(re.findall(r'^([A-Z_]+) = "([^"]*)"$', PYTHON_CALLER.read_text(), re.MULTILINE))
    assert python == expected

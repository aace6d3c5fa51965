"""The trivial functions of the benchmark's steps: the raw DBOS-py baseline's three steps call them, and so do
the three `python` nodes of the FireFlow flow `bench-3-python` (the workers allow this module), so that the
effectful flow and its peers compute the same thing at the same cost."""

from __future__ import annotations

from typing import Any


def greet_text(who: str) -> str:
    return f"Hello, {who}!"


def card_value(greeting: str, who: str) -> dict[str, Any]:
    value = {"greeting": greeting, "to": who, "draft": True}
    value = {key: item for key, item in value.items() if key != "draft"}
    return {("recipient" if key == "to" else key): item for key, item in value.items()}


def summary_text(value: dict[str, Any]) -> str:
    return f"{value['greeting']} (to {value['recipient']})"

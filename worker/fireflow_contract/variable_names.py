"""The nearest known name to a misspelt environment variable, for the warnings of every program (pure): a
misspelt setting is otherwise ignored without a word and its default silently used."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Family prefixes, longest first: names are compared without them.
FAMILY_PREFIXES = ("FIREFLOW_OPERATOR_", "DBOS__", "FIREFLOW_", "DBOS_")
# How alike a known name must be to be offered (difflib's ratio).
CLOSEST = 0.6


def _stem(name: str) -> str:
    """The name without its family prefix: `FIREFLOW_WORKER_CONCURENCY` and `DBOS_WORKER_CONCURRENCY` are
    compared as WORKER_CONCURENCY and WORKER_CONCURRENCY."""
    for prefix in FAMILY_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name whose stem is most like `name`'s (the whole name breaking ties); None: none is close."""
    by_stem: dict[str, list[str]] = {}
    for candidate in known:
        by_stem.setdefault(_stem(candidate), []).append(candidate)
    stems = difflib.get_close_matches(_stem(name), list(by_stem), n=1, cutoff=CLOSEST)
    if not stems:
        return None
    return max(by_stem[stems[0]], key=lambda c: difflib.SequenceMatcher(None, name, c).ratio())

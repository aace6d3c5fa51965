"""Every metric a worker exposes has its row in docs/monitoring.md's metrics table, and the table names none
the worker does not have."""

from __future__ import annotations

import re

from fireflow_worker import metrics
from tests.docs.generate import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "monitoring.md"


def _documented_worker_metrics() -> set[str]:
    """The names in the first column of the table's worker rows; `_x_total` after a full name shares its prefix."""
    names: set[str] = set()
    for first, source in re.findall(r"^\| (`fireflow_[^|]*) \| (\w+) \|", PAGE.read_text(), re.MULTILINE):
        if source != "worker":
            continue
        full = ""
        for name in re.findall(r"`([a-z_]+)`", first):
            if name.startswith("_"):
                names.add("_".join(full.split("_")[: -(name.count("_"))]) + name)
            else:
                full = name
                names.add(name)
    return names


def _exposed_worker_metrics() -> set[str]:
    exposed = set()
    for family in metrics.REGISTRY.collect():
        if family.name.startswith("fireflow_"):
            exposed.add(family.name + ("_total" if family.type == "counter" else ""))
    return exposed


def test_should_document_every_metric_the_worker_exposes_and_no_other() -> None:
    assert _documented_worker_metrics() == _exposed_worker_metrics()

"""The hot path's metric updates (metrics.HotCounter, HotHistogram) give the samples the client's own `inc` and
`observe` give: they reach into prometheus-client's values, so a client release that moves them fails here."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from fireflow_worker import metrics
from fireflow_worker.metrics import HotCounter, HotHistogram

AMOUNTS = (0.0, 0.004, 0.005, 0.0051, 0.3, 1, 2.5, 899.9, 3600, 3600.5, 1e9)


def _samples(registry: CollectorRegistry, label: str) -> dict[str, float]:
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.labels.get("how") == label and not sample.name.endswith("_created"):
                bucket = sample.labels.get("le", "")
                found[f"{sample.name}{{{bucket}}}"] = sample.value
    return found


def test_should_count_and_observe_as_the_client_does() -> None:
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["how"], registry=registry)
    histogram = Histogram("h", "h", ["how"], buckets=(0.005, 0.01, 1, 2.5, 900, 3600), registry=registry)
    for amount in AMOUNTS:
        counter.labels("public").inc(amount)
        HotCounter(counter.labels("hot")).inc(amount)
        histogram.labels("public").observe(amount)
        HotHistogram(histogram.labels("hot")).observe(amount)
    public, hot = _samples(registry, "public"), _samples(registry, "hot")
    assert len(public) == 1 + 2 + 7  # the counter; the histogram's count and sum, and its 7 buckets
    assert hot == public


def test_should_move_a_gauge_both_ways() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("g", "g", registry=registry)
    hot = HotCounter(gauge)
    hot.inc(1)
    hot.inc(1)
    hot.inc(-1)
    assert registry.get_sample_value("g") == 1


def test_should_keep_the_engine_children_in_the_worker_registry() -> None:
    before = metrics.REGISTRY.get_sample_value(
        "fireflow_node_duration_seconds_count", {"type": "hot-metrics-test", "outcome": "succeeded"}
    )
    metrics.node_duration("hot-metrics-test", "succeeded").observe(0.02)
    after = metrics.REGISTRY.get_sample_value(
        "fireflow_node_duration_seconds_count", {"type": "hot-metrics-test", "outcome": "succeeded"}
    )
    assert (before or 0.0) + 1 == after
    assert metrics.node_duration("hot-metrics-test", "succeeded") is metrics.node_duration(
        "hot-metrics-test", "succeeded"
    )


def test_should_give_every_flow_past_the_bound_the_one_other_child(monkeypatch: pytest.MonkeyPatch) -> None:
    # One hot child per label: two, each under its own lock, could lose each other's updates.
    monkeypatch.setattr(metrics, "MAX_FLOW_LABELS", len(metrics._run_durations))
    first, second = metrics.run_duration("hot-metrics-flow-a"), metrics.run_duration("hot-metrics-flow-b")
    assert first is second is metrics.run_duration("hot-metrics-flow-a")
    before = metrics.REGISTRY.get_sample_value("fireflow_run_duration_seconds_count", {"flow": metrics.OTHER_FLOWS})
    first.observe(0.1)
    second.observe(0.2)
    after = metrics.REGISTRY.get_sample_value("fireflow_run_duration_seconds_count", {"flow": metrics.OTHER_FLOWS})
    assert (before or 0.0) + 2 == after
    assert "hot-metrics-flow-a" not in metrics._run_durations

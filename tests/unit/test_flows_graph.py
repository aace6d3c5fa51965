"""The dependency graph: dependencies from references and `after`, layers, terminal nodes, cycles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fireflow_worker.flows.graph import (
    dependencies,
    dependents,
    find_cycles,
    output_nodes,
    terminal_nodes,
    topological_layers,
)
from fireflow_worker.flows.model import Flow, NodeSpec
from fireflow_worker.flows.validate import validate_flow


def flow(nodes: dict[str, Any], outputs: list[str] | None = None) -> Flow:
    # Built straight from the model: these helpers must work on any structurally valid Flow.
    return Flow.model_validate({"name": "g", "nodes": nodes, "outputs": outputs})


def t(template: str = "x", after: list[str] | None = None) -> dict[str, Any]:
    return {"type": "template", "params": {"template": template}, "after": after or []}


DIAMOND = {
    "src": t(),
    "left": t("${nodes.src}"),
    "right": {"type": "transform", "params": {"value": {"deep": ["${nodes.src.a.0}"]}}},
    "join": t("${nodes.left} ${nodes.right}"),
    "audit": t(after=["src"]),
}


def test_should_depend_on_referenced_nodes_and_on_after() -> None:
    assert dependencies(flow(DIAMOND)) == {
        "src": set(),
        "left": {"src"},
        "right": {"src"},
        "join": {"left", "right"},
        "audit": {"src"},
    }


def test_should_ignore_input_references_and_escaped_text_when_finding_dependencies() -> None:
    f = flow({"a": t("${inputs.x} $${nodes.b}"), "b": t()})
    assert dependencies(f) == {"a": set(), "b": set()}


def test_should_list_dependents() -> None:
    assert dependents(flow(DIAMOND))["src"] == {"left", "right", "audit"}


def test_should_group_independent_nodes_into_layers_in_declaration_order() -> None:
    assert topological_layers(flow(DIAMOND)) == [["src"], ["left", "right", "audit"], ["join"]]


def test_should_place_a_node_after_its_deepest_dependency() -> None:
    f = flow({"late": t("${nodes.b} ${nodes.a}"), "a": t(), "b": t("${nodes.a}")})
    assert topological_layers(f) == [["a"], ["b"], ["late"]]


def test_should_refuse_to_layer_a_flow_with_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        topological_layers(flow({"a": t("${nodes.b}"), "b": t("${nodes.a}")}))


def test_should_find_terminal_nodes_when_nothing_depends_on_them() -> None:
    assert terminal_nodes(flow(DIAMOND)) == ["join", "audit"]


def test_should_use_declared_outputs_over_terminal_nodes() -> None:
    assert output_nodes(flow(DIAMOND)) == ["join", "audit"]
    assert output_nodes(flow(DIAMOND, outputs=["left", "src"])) == ["left", "src"]


@pytest.mark.parametrize(
    ("deps", "cycles"),
    [
        ({"a": set(), "b": {"a"}}, []),
        ({"a": {"a"}}, [["a", "a"]]),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
        ({"x": set(), "a": {"c"}, "b": {"a"}, "c": {"b"}}, [["a", "c", "b", "a"]]),
        ({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}, [["a", "b", "a"], ["a", "c", "a"]]),
        ({"a": {"ghost"}}, []),
    ],
)
def test_should_name_each_cycle_path_once(deps: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert find_cycles(deps) == (cycles, len(cycles))


def test_should_keep_a_few_cycles_and_count_them_all_when_there_are_many() -> None:
    deps = {"hub": {f"s{i}" for i in range(500)}} | {f"s{i}": {"hub"} for i in range(500)}
    kept, found = find_cycles(deps, limit=3)
    assert found == 500
    assert kept == [["hub", "s0", "hub"], ["hub", "s1", "hub"], ["hub", "s2", "hub"]]


def test_should_find_a_cycle_in_a_long_chain_without_recursion() -> None:
    size = 5000
    deps = {f"n{i}": {f"n{i + 1}"} for i in range(size - 1)} | {f"n{size - 1}": {"n0"}}
    (cycle,), found = find_cycles(deps)
    assert (len(cycle), found) == (size + 1, 1)


class CountingId(str):
    """A node id that counts how often it is hashed or compared: a measure of work that no clock skews."""

    operations = 0

    def __hash__(self) -> int:
        CountingId.operations += 1
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        CountingId.operations += 1
        return str.__eq__(self, other)


def _chain(size: int) -> Flow:
    """n0 <- n1 <- ... : each node waits for the previous one through `after` (ids that count their use)."""
    ids = [CountingId(f"n{i}") for i in range(size)]
    nodes = {
        node_id: NodeSpec.model_construct(
            type="template", params={"template": "x"}, after=[ids[i - 1]] if i else [], retry=None
        )
        for i, node_id in enumerate(ids)
    }
    return Flow.model_construct(name="chain", nodes=nodes, inputs={}, outputs=None)


def _operations(work: Callable[[Flow], object], size: int) -> int:
    chain = _chain(size)
    CountingId.operations = 0
    work(chain)
    return CountingId.operations


@pytest.mark.parametrize(
    "work",
    [
        topological_layers,
        lambda f: find_cycles(dependencies(f)),
        validate_flow,
    ],
    ids=["topological_layers", "find_cycles", "validate_flow"],
)
def test_should_do_linear_work_on_a_long_chain(work: Callable[[Flow], object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_MAX_FLOW_NODES", "2000")
    # Four times the nodes must cost about four times the operations (a quadratic pass costs sixteen).
    small, large = _operations(work, 500), _operations(work, 2000)
    assert large <= 5 * small, (small, large)

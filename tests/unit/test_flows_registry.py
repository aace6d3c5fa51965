"""The node-type registry: built-ins plus real entry points from distributions found on sys.path.

Each plugin is a real module plus a `*.dist-info` directory (METADATA + entry_points.txt) in a temporary
directory put on sys.path, which is what importlib.metadata reads for an installed distribution.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fireflow_worker.flows.nodetype import NodeContext, parse_params, run_node
from fireflow_worker.flows.registry import (
    ENTRY_POINT_GROUP,
    NodeRegistry,
    RegistryError,
    builtin_registry,
    default_registry,
    load_registry,
)
from fireflow_worker.flows.validate import FlowValidationError, load_flow

PLUGIN = """
from typing import Any

from pydantic import BaseModel, ConfigDict

from fireflow_worker.flows.model import RetryPolicy
from fireflow_worker.flows.nodetype import NodeContext, NodeType


class ShoutParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class ShoutNode(NodeType[ShoutParams]):
    name = "shout"
    Params = ShoutParams
    retry = RetryPolicy(max_attempts=4)

    def run(self, params: ShoutParams, ctx: NodeContext) -> Any:
        return params.text.upper() + "!"


class Template(ShoutNode):
    name = "template"


class Abstract(NodeType[ShoutParams]):
    name = "abstract"
    Params = ShoutParams


class NoParams(ShoutNode):
    name = "no-params"
    Params = dict  # type: ignore[assignment]


class BadName(ShoutNode):
    name = "Bad Name"


def not_a_class() -> None:
    pass
"""


def install_plugin(
    root: Path, monkeypatch: pytest.MonkeyPatch, dist: str, entry_points: dict[str, str], source: str = PLUGIN
) -> str:
    """A distribution `dist` 1.0 whose entry points name `{module}:ATTR`; returns the module name."""
    directory = root / dist
    directory.mkdir()
    module = f"ffplugin_{uuid.uuid4().hex[:12]}"  # unique: sys.modules outlives the test
    (directory / f"{module}.py").write_text(source)
    info = directory / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {module}:{attr}\n" for name, attr in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    monkeypatch.syspath_prepend(str(directory))
    return module


def registry_error(message: str) -> str:
    with pytest.raises(RegistryError) as caught:
        load_registry()
    assert message in str(caught.value), str(caught.value)
    return str(caught.value)


def test_should_hold_the_builtins() -> None:
    assert builtin_registry().names() == ["fail", "http", "python", "sleep", "template", "transform"]


def test_should_load_a_node_type_from_an_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch, "shout-nodes", {"shout": "ShoutNode"})
    registry = load_registry()
    assert "shout" in registry
    assert "template" in registry
    shout = registry.get("shout")
    assert shout.retry.max_attempts == 4
    ctx = NodeContext(run_id="r", node_id="n", sleeper=time.sleep)
    assert run_node(shout, parse_params(shout, {"text": "hi"}), ctx) == "HI!"


def test_should_validate_a_flow_against_a_plugin_params_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch, "shout-nodes", {"shout": "ShoutNode"})
    registry = load_registry()
    flow = {"name": "f", "nodes": {"a": {"type": "shout", "params": {"text": "x"}}}}
    assert load_flow(flow, registry).nodes["a"].type == "shout"
    with pytest.raises(FlowValidationError, match=r"node 'a': params.txt: is not a known field \(known: text\)"):
        load_flow({"name": "f", "nodes": {"a": {"type": "shout", "params": {"txt": "x"}}}}, registry)
    with pytest.raises(FlowValidationError, match="unknown node type 'shout'"):
        load_flow(flow, builtin_registry())


def test_should_fail_clearly_when_an_entry_point_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = install_plugin(
        tmp_path, monkeypatch, "broken-nodes", {"boom": "ShoutNode"}, source="raise OSError('gone')"
    )
    registry_error(f"cannot load entry point 'boom' = '{module}:ShoutNode' of broken-nodes 1.0: OSError: gone")


def test_should_refuse_to_start_a_worker_with_a_broken_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start, before the database: not at its first run, in each of its run threads."""
    install_plugin(tmp_path, monkeypatch, "broken-nodes", {"boom": "ShoutNode"}, source="raise OSError('gone')")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FIREFLOW_", "DBOS_"))}
    env |= {
        "PYTHONPATH": str(tmp_path / "broken-nodes"),
        "DATABASE_URL_EXECUTIONS": "postgresql://fireflow@127.0.0.1:1/nowhere",  # never reached
        "FIREFLOW_HEALTH_HOST": "127.0.0.1",
        "FIREFLOW_HEALTH_PORT": "0",
        "FIREFLOW_WORKER_PROCESSES": "1",
    }
    worker = subprocess.run(
        [str(Path(sys.executable).with_name("fireflow-worker"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 1, worker.stderr
    said = worker.stdout + worker.stderr
    assert "cannot start: cannot load entry point 'boom'" in said, said
    assert "OSError: gone; fix or uninstall the package that declares it" in said
    assert "nothing accepts connections" not in said and "Traceback" not in said


def test_should_fail_clearly_when_an_entry_point_names_a_missing_attribute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(tmp_path, monkeypatch, "typo-nodes", {"shout": "ShoutNod"})
    registry_error("cannot load entry point 'shout'")
    registry_error("AttributeError")


@pytest.mark.parametrize(
    ("entry_points", "message"),
    [
        ({"fn": "not_a_class"}, "is <function not_a_class"),
        ({"fn": "not_a_class"}, "not a NodeType subclass"),
        ({"abstract": "Abstract"}, ": Abstract is abstract (does it implement run()?)"),
        ({"no-params": "NoParams"}, "Params must be a pydantic BaseModel subclass"),
        ({"Bad Name": "BadName"}, "name 'Bad Name' must match"),
        ({"loud": "ShoutNode"}, "the entry point's name must be the node type's name 'shout'"),
    ],
)
def test_should_fail_clearly_when_an_entry_point_is_not_a_usable_node_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: dict[str, str], message: str
) -> None:
    install_plugin(tmp_path, monkeypatch, "odd-nodes", entry_points)
    assert "of odd-nodes 1.0" in registry_error(message)


def test_should_fail_when_a_plugin_reuses_a_builtin_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = install_plugin(tmp_path, monkeypatch, "clash-nodes", {"template": "Template"})
    registry_error(
        f"node type 'template' is defined twice: by built-in and by entry point 'template' = '{module}:Template'"
        " of clash-nodes 1.0"
    )


def test_should_fail_when_two_plugins_define_one_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch, "first-nodes", {"shout": "ShoutNode"})
    install_plugin(tmp_path, monkeypatch, "second-nodes", {"shout": "ShoutNode"})
    message = registry_error("node type 'shout' is defined twice: by entry point 'shout'")
    assert "first-nodes 1.0" in message
    assert "second-nodes 1.0" in message


def test_should_refuse_a_duplicate_when_registering_by_hand() -> None:
    registry = builtin_registry()
    with pytest.raises(RegistryError, match="'sleep' is defined twice: by built-in and by test"):
        registry.register(registry.get("sleep"), "test")


def test_should_name_the_known_types_when_a_lookup_fails() -> None:
    with pytest.raises(KeyError, match=r"unknown node type 'nope' \(known: fail, http"):
        builtin_registry().get("nope")
    assert NodeRegistry().names() == []


def test_should_load_the_default_registry_once() -> None:
    assert default_registry() is default_registry()
    assert set(builtin_registry().names()) <= set(default_registry().names())


def test_should_declare_only_the_data_only_builtins_pure_and_refuse_a_pure_type_that_sleeps() -> None:
    registry = builtin_registry()
    assert [name for name in registry.names() if registry.get(name).pure] == ["template", "transform"]

    class Dozing(registry.get("sleep")):  # type: ignore[misc]
        name = "dozing"
        pure = True

    with pytest.raises(RegistryError, match="a pure node type cannot be durable"):
        NodeRegistry().register(Dozing, "test")

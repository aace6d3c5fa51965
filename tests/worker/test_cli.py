"""The `fireflow` command as a user runs it, and the worker's explicit local (SQLite) mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.support.proc import REPO_ROOT, WorkerProcess

FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
GREET = str(Path(REPO_ROOT) / "examples" / "flows" / "greet.yaml")
StartWorker = Callable[..., WorkerProcess]


def _fireflow(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": url}
    return subprocess.run([FIREFLOW_BIN, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_should_enqueue_follow_and_print_the_result_from_the_command_line(
    migrated_url: str, start_worker: StartWorker
) -> None:
    start_worker()
    result = _fireflow(migrated_url, "run", GREET, "--input", "who=Ada", "--follow")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    run_id = lines[0].removeprefix("enqueued run ")
    events = [json.loads(line) for line in lines[1:-1]]
    assert events[0]["event"] == "run.started"
    assert {e["node"] for e in events if e["event"] == "node.finished"} == {"hello", "card"}
    final = json.loads(lines[-1])
    assert final == {
        "run_id": run_id,
        "result": {
            "card": {
                "greeting": "Hello, Ada!",
                "recipient": "Ada",
                "note": "rendered by node hello; ${...} stays literal",
            }
        },
    }
    status = json.loads(_fireflow(migrated_url, "status", run_id).stdout)
    assert (status["status"], status["executor_id"]) == ("SUCCESS", "worker-a")


def test_should_run_a_stored_flow_by_reference_from_the_command_line(
    migrated_url: str, start_worker: StartWorker
) -> None:
    start_worker()
    assert _fireflow(migrated_url, "save-flow", "greet", GREET).stdout.strip() == "saved flow greet"
    result = _fireflow(migrated_url, "run", "greet", "--ref", "--input", "who=Bo", "--follow")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["result"]["card"]["recipient"] == "Bo"


def test_should_exit_2_and_enqueue_nothing_for_an_invalid_flow_file(migrated_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  a: {type: nope}\n")
    result = _fireflow(migrated_url, "run", str(bad))
    assert result.returncode == 2
    assert "unknown node type 'nope'" in result.stderr
    assert "enqueued" not in result.stdout


def test_should_run_flows_in_local_mode_on_a_sqlite_file(tmp_path: Path) -> None:
    sqlite = tmp_path / "local.sqlite"
    worker = WorkerProcess(None, "local-worker", FIREFLOW_LOCAL_MODE="true", FIREFLOW_LOCAL_SQLITE_PATH=str(sqlite))
    try:
        worker.start().wait_ready()
        assert "local mode: SQLite at" in worker.output()
        result = _fireflow(f"sqlite:///{sqlite}", "run", GREET, "--input", "who=Local", "--follow")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["result"]["card"]["recipient"] == "Local"
    finally:
        worker.stop()


def _hostile_files(tmp_path: Path) -> dict[str, Path]:
    """Flow files built to hurt the validator, and a few that merely cannot be read."""
    node = "{type: template, params: {template: x}}"
    chain = [f"  n{i}: {{type: template, params: {{template: '${{nodes.n{i - 1}}}'}}}}\n" for i in range(1, 10_000)]
    texts: dict[str, str | bytes] = {
        "alias-bomb": "\n".join(
            ["name: bomb", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
            + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
            + [f"nodes: {{t: {node}}}"]
        ),
        "deep-yaml": "name: deep\nnodes: {t: {type: template, params: {template: " + "[" * 5000 + "]" * 5000 + "}}}",
        "deep-json": '{"name": "deep", "nodes": ' + '{"a":' * 5000 + "1" + "}" * 5000 + "}",
        "chain-10000": "name: chain\nnodes:\n  n0: " + node + "\n" + "".join(chain),
        "huge-number": "name: n\nnodes: {t: " + node + "}\nx: " + "9" * 5000,
        "not-utf8": b"name: \xff\xfe\nnodes: {}\n",
        "empty": "",
        "a-list": "- a\n- b\n",
        "binary": bytes(range(256)) * 4,
        "unicode-names": "name: ünïcödé\nnodes:\n  ノード: " + node + "\n",
    }
    paths: dict[str, Path] = {}
    for name, text in texts.items():
        path = tmp_path / f"{name}.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        paths[name] = path
    paths["missing"] = tmp_path / "no-such-file.yaml"
    paths["a-directory"] = tmp_path
    return paths


def test_should_exit_2_with_one_line_per_problem_for_every_hostile_flow_file(migrated_url: str, tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    for name, path in _hostile_files(files).items():
        result = _fireflow(migrated_url, "run", str(path), "--follow")
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), (name, result.stderr)
        assert "Traceback" not in result.stderr, name
        assert result.stdout == "", name
    with psycopg.connect(migrated_url) as conn:
        row = conn.execute("SELECT count(*) FROM dbos.workflow_status").fetchone()
    assert row is not None and row[0] == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[" * 5000 + "]" * 5000, "--input who: the value cannot be read"),
        ("9" * 5000, "--input who: the value cannot be read"),
    ],
)
def test_should_exit_2_for_an_input_that_cannot_be_read(migrated_url: str, value: str, message: str) -> None:
    result = _fireflow(migrated_url, "run", GREET, "--input", f"who={value}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.splitlines()) == 1

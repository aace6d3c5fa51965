"""What the command lines offer a newcomer, run as real processes: `--version` everywhere, `fireflow validate`
without a database, `run` validating before it asks for one, `--follow` saying when no worker claims the run,
and the worker warning of a misspelt variable."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO

import pytest

from fireflow_local.ports import free_port
from tests.support.proc import REPO_ROOT, WORKER_BIN, WorkerProcess

FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
OPERATOR_BIN = str(Path(sys.executable).with_name("fireflow-operator"))
GREET = str(Path(REPO_ROOT) / "examples" / "flows" / "greet.yaml")
StartWorker = Callable[..., WorkerProcess]


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without any FIREFLOW_*/DBOS_* variable (no database URL either)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIREFLOW_", "DBOS_", "DATABASE_URL"))}
    return {**env, **extra}


def _run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env=_env(**extra), capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("binary", [FIREFLOW_BIN, WORKER_BIN, OPERATOR_BIN], ids=lambda b: Path(b).name)
def test_should_print_the_installed_version(binary: str) -> None:
    result = _run(binary, "--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{Path(binary).name} {metadata.version('fireflow-pool')}\n"


def test_should_validate_a_flow_and_its_inputs_without_any_database(tmp_path: Path) -> None:
    valid = _run(FIREFLOW_BIN, "validate", GREET)
    assert valid.returncode == 0, valid.stderr
    assert valid.stdout == f"flow 'greet' in {GREET} is valid: 2 nodes, inputs: who, punctuation\n"
    assert _run(FIREFLOW_BIN, "validate", GREET, "--inputs", '{"who": "Ada"}').returncode == 0
    assert _run(FIREFLOW_BIN, "validate", GREET, "--input", "who=Ada").returncode == 0

    wrong_inputs = _run(FIREFLOW_BIN, "validate", GREET, "--inputs", '{"who": 3, "extra": true}')
    assert wrong_inputs.returncode == 1
    assert wrong_inputs.stderr.splitlines() == [
        "error: input 'extra' is not declared by flow 'greet' (declared: who, punctuation)",
        "error: input 'who': 3 is not of type string",
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  a: {type: nope}\n")
    invalid = _run(FIREFLOW_BIN, "validate", str(bad))
    assert invalid.returncode == 1
    assert invalid.stdout == ""
    assert invalid.stderr.startswith("error: node 'a': type: unknown node type 'nope'")
    not_json = _run(FIREFLOW_BIN, "validate", GREET, "--inputs", "who=Ada")
    assert not_json.returncode == 2
    assert not_json.stderr.startswith("error: --inputs is not JSON")


def test_should_validate_a_run_before_asking_for_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  a: {type: nope}\n")
    invalid = _run(FIREFLOW_BIN, "run", str(bad))
    assert invalid.returncode == 2
    assert invalid.stderr.startswith("error: node 'a': type: unknown node type 'nope'")
    assert "DATABASE_URL_EXECUTIONS" not in invalid.stderr
    missing_input = _run(FIREFLOW_BIN, "run", GREET)
    assert (missing_input.returncode, missing_input.stderr) == (2, "error: input 'who' is required (type string)\n")
    valid = _run(FIREFLOW_BIN, "run", GREET, "--input", "who=Ada")
    assert valid.returncode == 2
    assert valid.stderr == "error: no database URL: set DATABASE_URL_EXECUTIONS or pass --database-url\n"


def _lines(stream: IO[str]) -> queue.Queue[str]:
    """The stream's lines as they come, read by a thread (a blocking read must not hang the test)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_should_say_that_no_worker_claimed_the_run_then_keep_waiting(
    migrated_url: str, start_worker: StartWorker
) -> None:
    follow = subprocess.Popen(
        [FIREFLOW_BIN, "run", GREET, "--input", "who=Ada", "--follow"],
        env=_env(DATABASE_URL_EXECUTIONS=migrated_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stderr is not None
        said = _lines(follow.stderr).get(timeout=120)
        assert said.startswith("warning: no worker has claimed run "), said
        assert " on queue fireflow-executions: " in said
        assert "no worker of this application has started on this database yet" in said
        assert follow.poll() is None  # still waiting
        start_worker()
        out, err = follow.communicate(timeout=120)
    finally:
        follow.kill()
        follow.wait()
    assert follow.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["result"]["card"]["recipient"] == "Ada"


@pytest.mark.parametrize("processes", ["1", "2"], ids=["worker", "supervisor"])
def test_should_warn_once_of_a_misspelt_variable_with_the_name_it_means(processes: str) -> None:
    url = f"postgresql://fireflow:pw@127.0.0.1:{free_port()}/runs"  # nothing listens: the worker ends at once
    result = _run(
        WORKER_BIN,
        DATABASE_URL_EXECUTIONS=url,
        FIREFLOW_WORKER_ID="w-0",
        FIREFLOW_HEALTH_HOST="127.0.0.1",
        FIREFLOW_HEALTH_PORT="0",
        FIREFLOW_WORKER_PROCESSES=processes,
        FIREFLOW_WORKER_CONCURENCY="5",
        # Read by others beside the worker: never warned of.
        DBOS__VMID="w-0",
        FIREFLOW_POOL="pool",
        FIREFLOW_OPERATOR_NAMESPACES="a",
        OTEL_SERVICE_NAME="x",
    )
    assert result.returncode == 1
    warnings = [line for line in result.stderr.splitlines() if "is not a variable the worker reads" in line]
    assert len(warnings) == 1, result.stderr
    assert (
        "FIREFLOW_WORKER_CONCURENCY is not a variable the worker reads and is ignored: did you mean "
        "DBOS_WORKER_CONCURRENCY?"
    ) in warnings[0]

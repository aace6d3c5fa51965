"""What the command lines say beside errors: the unknown-variable warnings and the unclaimed-run line (pure)."""

from __future__ import annotations

from fireflow_worker.config import WorkerConfig
from fireflow_worker.env_names import unknown_variable_warnings
from fireflow_worker.unclaimed import unclaimed_line

READ = [info.alias for info in WorkerConfig.model_fields.values() if info.alias]


def test_should_warn_of_a_misspelt_variable_with_the_nearest_name_the_worker_reads() -> None:
    env = {
        "FIREFLOW_WORKER_CONCURENCY": "5",
        "DBOS_LOG_LEVL": "debug",
        "FIREFLOW_WORKR_ID": "w-0",
        "FIREFLOW_QUEUE": "fireflow-sandbox",
        "FIREFLOW_MAX_NODE_OUTPUT": "1",
        "FIREFLOW_XYZZY": "1",
        "HOME": "/root",
    }
    assert unknown_variable_warnings(env, READ) == [
        "DBOS_LOG_LEVL is not a variable the worker reads and is ignored: did you mean DBOS_LOG_LEVEL?",
        "FIREFLOW_MAX_NODE_OUTPUT is not a variable the worker reads and is ignored: did you mean "
        "FIREFLOW_MAX_NODE_OUTPUT_BYTES?",
        "FIREFLOW_QUEUE is not a variable the worker reads and is ignored: did you mean FIREFLOW_QUEUES?",
        "FIREFLOW_WORKER_CONCURENCY is not a variable the worker reads and is ignored: did you mean "
        "DBOS_WORKER_CONCURRENCY?",
        "FIREFLOW_WORKR_ID is not a variable the worker reads and is ignored: did you mean FIREFLOW_WORKER_ID?",
        "FIREFLOW_XYZZY is not a variable the worker reads and is ignored: check its spelling against the README's "
        "table of variables",
    ]


def test_should_not_warn_of_what_the_worker_reads_or_other_programs_read_beside_it() -> None:
    env = {name: "1" for name in READ}
    env |= {
        "DBOS__VMID": "w-0",
        "DBOS__APPVERSION": "1",
        "DBOS__CONDUCTOR_KEY": "k",
        "FIREFLOW_SUPERVISOR_PID": "1",
        "FIREFLOW_HEALTH_PORT_FD": "3",
        "FIREFLOW_POOL": "p",
        "FIREFLOW_PYTHON_NODE_MODULES": "m",
        "FIREFLOW_TERMINATION_LOG": "/dev/termination-log",
        "FIREFLOW_OPERATOR_NAMESPACES": "a",
        "FIREFLOW_TEST_WORKERS": "3",
        "FIREFLOW_SEQUENCES": "1,2",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "PGAPPNAME": "x",
        "POD_NAME": "w-0",
    }
    assert unknown_variable_warnings(env, READ) == []


def test_should_name_the_queue_and_the_version_of_an_unclaimed_run() -> None:
    assert unclaimed_line("r1", "fireflow-sandbox", None, "2") == (
        "no worker has claimed run r1 after 5 s on queue fireflow-sandbox: start a worker of application version "
        "'2' serving that queue (fireflow-worker), or wait for a busy one to free a slot; still waiting"
    )
    assert "application version '7'" in unclaimed_line("r1", "fireflow-sandbox", "7", "2")
    assert unclaimed_line("r1", "fireflow-executions", None, None) == (
        "no worker has claimed run r1 after 5 s on queue fireflow-executions: no worker of this application has "
        "started on this database yet; start one (fireflow-worker)"
    )

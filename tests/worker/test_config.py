"""Every configuration error path: one line naming the variable, the problem and the accepted range,
exit status 2 from the real command, and the database password never shown."""

from __future__ import annotations

import os
import subprocess

import pytest

from fireflow_worker.config import ConfigError, load_config
from tests.support.proc import WORKER_BIN

URL = "postgresql://fireflow:s3cr3t-pw@127.0.0.1:5432/executions"


def _error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    message = str(caught.value)
    assert "\n" not in message
    assert "s3cr3t-pw" not in message
    return message


def test_should_apply_the_typescript_worker_defaults_when_only_the_url_is_set() -> None:
    config = load_config({"DATABASE_URL_EXECUTIONS": URL})
    assert config.worker_concurrency == 50
    assert config.background_concurrency == 25
    assert config.global_concurrency is None  # 0 = no cap, which DBOS spells None
    assert config.polling_interval_ms == 50
    assert config.pool_size == 30
    assert config.run_migrations is True
    assert config.drain_timeout_ms == 25_000
    assert config.log_level == "INFO"
    assert config.provision_cache_ttl_ms == 10_000
    assert config.executor_id == "local"
    assert config.queues == [
        "fireflow-executions",
        "fireflow-executions-background",
        "fireflow-sandbox",
        "fireflow-terminal",
    ]


def test_should_map_aliases_case_and_small_concurrency_when_set() -> None:
    config = load_config(
        {
            "DATABASE_URL_EXECUTIONS": URL,
            "DBOS__VMID": "ns.pod-0",
            "DBOS__APPVERSION": "v7",
            "DBOS_LOG_LEVEL": "debug",
            "DBOS_WORKER_CONCURRENCY": "1",
            "DBOS_QUEUE_CONCURRENCY": "12",
            "FIREFLOW_QUEUES": "fireflow-sandbox, fireflow-executions",
            "DBOS_RUN_MIGRATIONS": "FALSE",
        }
    )
    assert config.executor_id == "ns.pod-0"
    assert config.application_version == "v7"
    assert config.log_level == "DEBUG"
    assert config.background_concurrency == 1  # half, at least 1
    assert config.global_concurrency == 12
    assert config.queues == ["fireflow-sandbox", "fireflow-executions"]
    assert config.run_migrations is False


def test_should_prefer_fireflow_worker_id_over_its_alias() -> None:
    config = load_config({"DATABASE_URL_EXECUTIONS": URL, "DBOS__VMID": "b", "FIREFLOW_WORKER_ID": "a"})
    assert config.executor_id == "a"


def test_should_require_the_database_url_unless_local_mode_is_explicit() -> None:
    assert "DATABASE_URL_EXECUTIONS is required" in _error({})
    local = load_config({"FIREFLOW_LOCAL_MODE": "true", "FIREFLOW_LOCAL_SQLITE_PATH": "/tmp/x.sqlite"})
    assert local.system_database_url == "sqlite:////tmp/x.sqlite"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DBOS_WORKER_CONCURRENCY", "abc", "invalid DBOS_WORKER_CONCURRENCY='abc': Input should be a valid integer"),
        ("DBOS_WORKER_CONCURRENCY", "0", "accepted: an integer from 1 to 10000"),
        ("DBOS_QUEUE_CONCURRENCY", "-1", "invalid DBOS_QUEUE_CONCURRENCY='-1'"),
        ("DBOS_QUEUE_POLLING_INTERVAL_MS", "0", "accepted: an integer from 1 to 600000"),
        ("DBOS_SYSTEM_DATABASE_POOL_SIZE", "1", "accepted: an integer from 2 to 1000"),
        ("DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS", "soon", "invalid DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS='soon'"),
        ("DBOS_LOG_LEVEL", "loud", "accepted: one of debug, info, warning, error, critical (any case)"),
        ("DBOS_RUN_MIGRATIONS", "maybe", "invalid DBOS_RUN_MIGRATIONS='maybe': must be true or false"),
        ("FIREFLOW_PROVISION_CACHE_TTL_MS", "-5", "accepted: an integer from 0 to 86400000"),
        ("FIREFLOW_SANDBOX_QUEUE_CONCURRENCY", "0", "invalid FIREFLOW_SANDBOX_QUEUE_CONCURRENCY='0'"),
        ("FIREFLOW_TERMINAL_QUEUE_CONCURRENCY", "x", "invalid FIREFLOW_TERMINAL_QUEUE_CONCURRENCY='x'"),
        ("FIREFLOW_QUEUES", "fireflow-nope", "unknown queue 'fireflow-nope'"),
        ("FIREFLOW_HEALTH_PORT", "70000", "accepted: an integer from 0 to 65535"),
        ("DBOS_APPLICATION_NAME", "Bad Name", "must be 3 to 256 characters of a-z, 0-9, '-' and '_'"),
        ("FIREFLOW_LOCAL_MODE", "sometimes", "invalid FIREFLOW_LOCAL_MODE='sometimes'"),
        ("FIREFLOW_MAX_NODE_OUTPUT_BYTES", "10", "accepted: an integer from 1024 to 1073741824"),
        ("FIREFLOW_MAX_RUN_OUTPUT_BYTES", "lots", "invalid FIREFLOW_MAX_RUN_OUTPUT_BYTES='lots'"),
        ("FIREFLOW_MAX_PARALLEL_NODES", "0", "accepted: an integer from 1 to 1000"),
        ("FIREFLOW_MAX_FLOW_NODES", "100001", "accepted: an integer from 1 to 100000"),
        ("FIREFLOW_MAX_RECOVERY_ATTEMPTS", "-1", "accepted: an integer from 0 to 10000"),
    ],
)
def test_should_name_the_variable_problem_and_range_when_a_value_is_bad(
    variable: str, value: str, expected: str
) -> None:
    assert expected in _error({"DATABASE_URL_EXECUTIONS": URL, variable: value})


def test_should_apply_the_per_run_limits_when_set_and_keep_the_run_limit_above_the_node_limit() -> None:
    defaults = load_config({"DATABASE_URL_EXECUTIONS": URL})
    assert (defaults.max_node_output_bytes, defaults.max_run_output_bytes) == (4 << 20, 16 << 20)
    assert (defaults.max_parallel_nodes, defaults.max_flow_nodes, defaults.max_recovery_attempts) == (8, 1000, 10)
    assert (
        _error(
            {
                "DATABASE_URL_EXECUTIONS": URL,
                "FIREFLOW_MAX_NODE_OUTPUT_BYTES": "20000",
                "FIREFLOW_MAX_RUN_OUTPUT_BYTES": "10000",
            }
        )
        == "FIREFLOW_MAX_RUN_OUTPUT_BYTES=10000 must be at least FIREFLOW_MAX_NODE_OUTPUT_BYTES=20000"
    )


def test_should_refuse_a_url_whose_password_is_not_encoded_without_showing_it() -> None:
    message = _error({"DATABASE_URL_EXECUTIONS": "postgresql://fireflow:s3cr3t@pw@127.0.0.1:5432/executions"})
    assert message.startswith(
        "DATABASE_URL_EXECUTIONS='postgresql://fireflow:***@127.0.0.1:5432/executions' is ambiguous"
    )
    assert "percent-encode" in message
    assert "pw" not in message.replace("password", "")


def test_should_redact_the_password_when_the_url_is_not_postgresql() -> None:
    message = _error({"DATABASE_URL_EXECUTIONS": "mysql://fireflow:s3cr3t-pw@db/x"})
    assert message == "DATABASE_URL_EXECUTIONS='mysql://fireflow:***@db/x' must be a postgresql:// URL"


@pytest.mark.parametrize("argv", [[], ["migrate"], ["migrate", "--plan"]])
def test_should_exit_2_with_one_line_when_the_command_gets_a_bad_value(argv: list[str]) -> None:
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": URL, "DBOS_QUEUE_POLLING_INTERVAL_MS": "-3"}
    result = subprocess.run([WORKER_BIN, *argv], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert lines == [
        "error: invalid DBOS_QUEUE_POLLING_INTERVAL_MS='-3': Input should be greater than or equal to 1; "
        "accepted: an integer from 1 to 600000"
    ]

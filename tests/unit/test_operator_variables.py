"""The operator warns of a misspelt `FIREFLOW_OPERATOR_*` variable with the nearest name it reads, before
anything else it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fireflow_local.ports import free_port
from fireflow_operator.settings import OperatorSettings, unknown_variable_warnings

OPERATOR_BIN = str(Path(sys.executable).with_name("fireflow-operator"))


def test_should_warn_of_a_misspelt_operator_variable_with_the_nearest_name_it_reads() -> None:
    env = {
        "FIREFLOW_OPERATOR_NAMESPACE": "team-a",
        "FIREFLOW_OPERATOR_RESYNC_SECOND": "60",
        "FIREFLOW_OPERATOR_XYZZY": "1",
        "FIREFLOW_OPERATOR_LOG_LEVEL": "debug",
        "FIREFLOW_LOG_FORMAT": "json",
        "FIREFLOW_WORKER_CONCURENCY": "5",  # the worker's family: the worker warns of it, not the operator
        "HOME": "/root",
    }
    assert unknown_variable_warnings(env) == [
        "FIREFLOW_OPERATOR_NAMESPACE is not a variable the operator reads and is ignored: did you mean "
        "FIREFLOW_OPERATOR_NAMESPACES?",
        "FIREFLOW_OPERATOR_RESYNC_SECOND is not a variable the operator reads and is ignored: did you mean "
        "FIREFLOW_OPERATOR_RESYNC_SECONDS?",
        "FIREFLOW_OPERATOR_XYZZY is not a variable the operator reads and is ignored: `fireflow-operator --help` "
        "lists the variables it reads",
    ]
    every_setting = {info.alias: "1" for info in OperatorSettings.model_fields.values() if info.alias}
    assert unknown_variable_warnings(every_setting) == []


def test_should_say_the_warning_first_when_the_operator_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "FIREFLOW_"))}
    env |= {
        "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
        "FIREFLOW_OPERATOR_HEALTH_HOST": "127.0.0.1",
        "FIREFLOW_OPERATOR_HEALTH_PORT": str(free_port()),
        "FIREFLOW_OPERATOR_METRICS_PORT": "0",
        "FIREFLOW_OPERATOR_LEASE_DURATION": "30",
    }
    warning = (
        "FIREFLOW_OPERATOR_LEASE_DURATION is not a variable the operator reads and is ignored: did you mean "
        "FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS?"
    )

    def operator(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([OPERATOR_BIN], env=env | extra, capture_output=True, text=True, timeout=120, check=False)

    text = operator()
    assert text.returncode == 1  # no Kubernetes API: said after the warning
    lines = text.stderr.splitlines()
    assert lines[0] == f"warning: {warning}"
    assert lines[1].startswith("error: no Kubernetes API to connect to") and len(lines) == 2, text.stderr
    as_json = operator(FIREFLOW_LOG_FORMAT="json")
    first = json.loads(as_json.stderr.splitlines()[0])
    assert (first["level"], first["message"]) == ("warning", warning)

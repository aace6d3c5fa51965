"""`fireflow-operator`: validate the settings, then run kopf with the handlers of `handlers.py`."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import socket
import sys
import threading
from typing import Any

from fireflow_contract import logformat, telemetry
from fireflow_contract.explain import bind_error
from fireflow_contract.version import version_line
from fireflow_operator.leadership import Leadership, StandbyHealth, StandbyWatch
from fireflow_operator.settings import OperatorSettings, SettingsError, load_settings, unknown_variable_warnings

log = logging.getLogger("fireflow.operator")


def _parser() -> argparse.ArgumentParser:
    """No options: every setting is an environment variable. `--help` lists them with their defaults."""
    settings = "\n".join(
        f"  {info.alias}  (default: {info.get_default(call_default_factory=True)!r})"
        for info in OperatorSettings.model_fields.values()
        if info.alias
    )
    parser = argparse.ArgumentParser(
        prog="fireflow-operator",
        description="Reconciles FireflowWorkerPools (kopf). Configured only through the environment; a bad "
        "value exits with status 2 and one line.",
        epilog=f"settings:\n{settings}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line("fireflow-operator"))
    return parser


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def _port_problem(host: str, port: int, host_setting: str, port_setting: str) -> str | None:
    """Whether the port can be listened on, asked by binding it for a moment (kopf and the metrics server
    bind it later, inside a handler that would retry the failure forever with a traceback)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no clash
            probe.bind((host, port))
    except OSError as err:
        return bind_error(err, host, port, host_setting, port_setting)
    return None


def _kubernetes_problem() -> str | None:
    """Whether there is a Kubernetes API to talk to: the pod's service account, else a kubeconfig."""
    from kubernetes import config  # noqa: PLC0415

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as err:
            return (
                f"no Kubernetes API to connect to ({' '.join(str(err).split())}): run the operator in a pod with "
                "a service account, or set KUBECONFIG to a kubeconfig file"
            )
    return None


def _start_problem(settings: OperatorSettings) -> str | None:
    """What would keep the operator from starting, in one sentence with the fix, or None."""
    env = "FIREFLOW_OPERATOR_"
    ports = [(settings.health_host, settings.health_port, f"{env}HEALTH_HOST", f"{env}HEALTH_PORT")]
    if settings.metrics_port:
        ports.append((settings.metrics_host, settings.metrics_port, f"{env}METRICS_HOST", f"{env}METRICS_PORT"))
    for host, port, host_setting, port_setting in ports:
        if (problem := _port_problem(host, port, host_setting, port_setting)) is not None:
            return problem
    return _kubernetes_problem()


def main(argv: list[str] | None = None) -> int:
    _parser().parse_args(argv)  # `--help` prints and exits 0; any argument is an error (exit 2)
    for line in unknown_variable_warnings(os.environ):  # first: it may explain the problem below
        logformat.early_error(line, level=logging.WARNING)
    try:
        settings = load_settings()
    except SettingsError as err:
        logformat.early_error(str(err))
        return 2
    if (problem := _start_problem(settings)) is not None:
        logformat.early_error(problem)
        return 1
    import kopf  # noqa: PLC0415 - after the settings, so a bad value fails fast and quietly

    from fireflow_operator import handlers  # noqa: PLC0415 - registers the handlers

    kopf.configure(verbose=settings.log_level == "DEBUG")
    logformat.use_format(settings.log_format)  # on kopf's handler: every line, kopf's own included
    try:
        if telemetry.configure_tracing("fireflow-operator"):
            log.info("tracing reconciles over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT)")
        if telemetry.configure_log_export("fireflow-operator"):  # after kopf's handler: beside it
            log.info("exporting the log over OTLP/HTTP too (OTEL_LOGS_EXPORTER=otlp)")
    except telemetry.TelemetryError as err:
        logformat.early_error(str(err))
        return 2
    loop = asyncio.new_event_loop()
    leadership = _lead(settings, loop, handlers.RUNNING) if settings.leader_election_namespace else None
    try:
        kopf.run(
            loop=loop,
            standalone=True,  # no kopf peering: leadership.py decides who runs at all
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=f"http://{_host_in_url(settings.health_host)}:{settings.health_port}/healthz",
            stop_flag=leadership.stop if leadership else None,
        )
    finally:
        loop.close()
        telemetry.shutdown()  # exports the spans still buffered
    if leadership is None:
        return 0
    if leadership.lost:
        log.error("lost the leader Lease; exiting so that this replica comes back as a candidate")
        return 1
    leadership.release()
    return 0


def _lead(settings: OperatorSettings, loop: asyncio.AbstractEventLoop, running: Any) -> Leadership:
    """Wait until this replica holds the Lease, answering the liveness probe, with the work queue built (the
    Kubernetes client loads its model classes lazily, for seconds on a busy node)."""
    from fireflow_operator.workqueue import PoolWorkQueue, kubernetes_client  # noqa: PLC0415

    running.prepared = PoolWorkQueue(settings, kubernetes_client())
    leadership = Leadership(settings, loop)
    health = StandbyHealth(settings.health_host, settings.health_port)
    try:
        leadership.acquire(standing_by=lambda: _stand_by(settings, running))
    finally:
        health.close()  # kopf serves the same port from now on
    return leadership


def _stand_by(settings: OperatorSettings, running: Any) -> None:
    """What a standby replica keeps ready, reading only, so that a takeover does not start cold: the pool index,
    filled by a watch of the pools, and DBOS's client code (a version change or stranded runs need it)."""
    running.end_standby_watch = StandbyWatch(running.prepared.pool_index, settings.namespaces).close
    threading.Thread(target=importlib.import_module, args=("dbos",), name="standby-imports", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())

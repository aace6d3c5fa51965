"""`fireflow-operator`: validate the settings, then run kopf with the handlers of `handlers.py`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from fireflow_contract import logformat, telemetry
from fireflow_operator.leadership import Leadership, StandbyHealth
from fireflow_operator.settings import OperatorSettings, SettingsError, load_settings

log = logging.getLogger("fireflow.operator")


def _parser() -> argparse.ArgumentParser:
    """No options: every setting is an environment variable. `--help` lists them with their defaults."""
    settings = "\n".join(
        f"  {info.alias}  (default: {info.get_default(call_default_factory=True)!r})"
        for info in OperatorSettings.model_fields.values()
        if info.alias
    )
    return argparse.ArgumentParser(
        prog="fireflow-operator",
        description="Reconciles FireflowWorkerPools (kopf). Configured only through the environment; a bad "
        "value exits with status 2 and one line.",
        epilog=f"settings:\n{settings}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def main(argv: list[str] | None = None) -> int:
    _parser().parse_args(argv)  # `--help` prints and exits 0; any argument is an error (exit 2)
    try:
        settings = load_settings()
    except SettingsError as err:
        logformat.early_error(str(err))
        return 2
    import kopf  # noqa: PLC0415 - after the settings, so a bad value fails fast and quietly

    from fireflow_operator import handlers  # noqa: F401, PLC0415 - registers the handlers

    kopf.configure(verbose=settings.log_level == "DEBUG")
    logformat.use_format(settings.log_format)  # on kopf's handler: every line, kopf's own included
    try:
        if telemetry.configure_tracing("fireflow-operator"):
            log.info("tracing reconciles over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT)")
    except telemetry.TelemetryError as err:
        logformat.early_error(str(err))
        return 2
    loop = asyncio.new_event_loop()
    leadership = _lead(settings, loop) if settings.leader_election_namespace else None
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


def _lead(settings: OperatorSettings, loop: asyncio.AbstractEventLoop) -> Leadership:
    """Wait, answering the liveness probe, until this replica holds the Lease."""
    from kubernetes import config  # noqa: PLC0415

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    leadership = Leadership(settings, loop)
    standby = StandbyHealth(settings.health_host, settings.health_port)
    try:
        leadership.acquire()
    finally:
        standby.close()  # kopf serves the same port from now on
    return leadership


if __name__ == "__main__":
    sys.exit(main())

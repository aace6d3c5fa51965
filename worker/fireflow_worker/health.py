"""The worker's own HTTP endpoints (DBOS serves none): `/healthz`, `/readyz`, `/metrics`.

`/healthz` answers from memory and never touches the database: DBOS's system-database calls block and
retry while the database is down, and a liveness probe that waited on them would restart every worker
during a database outage. `/readyz` is true from launch (queues registered) until SIGTERM.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fireflow_worker import metrics


class HealthState:
    def __init__(self) -> None:
        self._ready = threading.Event()
        self.reason = "starting"

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def mark_ready(self) -> None:
        self.reason = "ready"
        self._ready.set()
        metrics.READY.set(1)

    def mark_not_ready(self, reason: str) -> None:
        self.reason = reason
        self._ready.clear()
        metrics.READY.set(0)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def http_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threaded HTTP server on an IPv4 or an IPv6 address (`::`: every address); the standard library's
    server speaks IPv4 only."""
    server = (_IPv6Server if ":" in host else ThreadingHTTPServer)((host, port), handler)
    server.daemon_threads = True
    return server


class HealthServer:
    """Serves the three endpoints from a daemon thread."""

    def __init__(self, state: HealthState, host: str, port: int) -> None:
        handler = _handler_for(state)
        self._server = http_server(host, port, handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="health-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


Reply = tuple[int, bytes, str]  # status, body, content type
NOT_FOUND: Reply = (HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")


def probe_handler(route: Callable[[str], Reply]) -> type[BaseHTTPRequestHandler]:
    """A handler answering every GET with `route(path)` (the worker's and the supervisor's probes)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body, content_type = route(self.path.split("?", 1)[0])
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds would drown the worker's own log."""

    return Handler


def _handler_for(state: HealthState) -> type[BaseHTTPRequestHandler]:
    def route(path: str) -> Reply:
        if path == "/healthz":
            return HTTPStatus.OK, b"ok\n", "text/plain"
        if path == "/readyz":
            status = HTTPStatus.OK if state.ready else HTTPStatus.SERVICE_UNAVAILABLE
            return status, f"{state.reason}\n".encode(), "text/plain"
        if path == "/metrics":
            return HTTPStatus.OK, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST
        return NOT_FOUND

    return probe_handler(route)

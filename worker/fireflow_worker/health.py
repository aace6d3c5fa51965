"""The worker's own HTTP endpoints (DBOS serves none): `/healthz`, `/readyz`, `/metrics`.

`/healthz` answers from memory and never touches the database: DBOS's system-database calls block and
retry while the database is down, and a liveness probe that waited on them would restart every worker
during a database outage. `/readyz` is true from launch (queues registered) until SIGTERM.
"""

from __future__ import annotations

import threading
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


class HealthServer:
    """Serves the three endpoints from a daemon thread."""

    def __init__(self, state: HealthState, host: str, port: int) -> None:
        handler = _handler_for(state)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
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


def _handler_for(state: HealthState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._reply(HTTPStatus.OK, b"ok\n", "text/plain")
            elif path == "/readyz":
                status = HTTPStatus.OK if state.ready else HTTPStatus.SERVICE_UNAVAILABLE
                self._reply(status, f"{state.reason}\n".encode(), "text/plain")
            elif path == "/metrics":
                self._reply(HTTPStatus.OK, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST)
            else:
                self._reply(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

        def _reply(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds would drown the worker's own log."""

    return Handler

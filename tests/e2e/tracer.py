"""A side effect a flow node cannot hide: the flow's `http` nodes POST to this server, which records each
call. A node body that ran twice shows up as two calls. The workers need nothing but their image's built-in
`http` node, so the same flow runs unchanged on the process node and in the real worker image on kind.

The server listens on the cluster's `host_address` only (127.0.0.1, or the host's address on kind's Docker
network).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]


class TraceServer:
    def __init__(self, host: str) -> None:
        calls: list[tuple[str, str]] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    call = json.loads(self.rfile.read(length))
                    key, label = str(call["key"]), str(call["label"])
                except (ValueError, KeyError, TypeError):
                    self.send_error(400, "expected {key, label}")
                    return
                with lock:
                    calls.append((key, label))
                body = json.dumps({"recorded": label}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._calls, self._lock = calls, lock
        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self._server.server_address[1]}/record"
        self._thread = threading.Thread(target=self._server.serve_forever, name="trace-server", daemon=True)
        self._thread.start()

    def labels(self, key: str) -> list[str]:
        """The labels recorded for `key`, in the order the calls arrived."""
        with self._lock:
            return [label for k, label in self._calls if k == key]

    def node(self, key: str, label: str, after: list[str]) -> Json:
        """A flow node that records (key, label) here exactly once per execution of its body."""
        node: Json = {
            "type": "http",
            "params": {"url": self.url, "method": "POST", "json": {"key": key, "label": label}},
            "retry": {"max_attempts": 1},  # a retried call would count twice; this counts executions
        }
        if after:
            node["after"] = after
        return node

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

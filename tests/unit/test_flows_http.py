"""The http node against a real HTTP server on 127.0.0.1 (http.server in a thread)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fireflow_worker.flows.nodes import HttpNode
from fireflow_worker.flows.nodetype import NodeContext, NodeError, parse_params, run_node


class Handler(BaseHTTPRequestHandler):
    """Routes by path; /echo answers with what it received."""

    def do_GET(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    def do_PUT(self) -> None:
        self.route()

    def do_DELETE(self) -> None:
        self.route()

    def route(self) -> None:
        path = self.path.split("?")[0]
        if path == "/echo":
            length = int(self.headers.get("Content-Length") or 0)
            received = {
                "method": self.command,
                "path": self.path,
                "content_type": self.headers.get("Content-Type"),
                "x_token": self.headers.get("X-Token"),
                "body": self.rfile.read(length).decode(),
            }
            self.reply(200, json.dumps(received), "application/json")
        elif path == "/text":
            self.reply(
                200, "plain words", "text/plain; charset=utf-8", extra=(("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"))
            )
        elif path == "/problem-json":
            self.reply(200, '{"title": "x"}', "application/problem+json")
        elif path == "/bad-json":
            self.reply(200, "{not json", "application/json")
        elif path.startswith("/status/"):
            self.reply(int(path.rsplit("/", 1)[1]), '{"error": "as asked"}', "application/json")
        elif path == "/big":
            self.reply(200, "x" * 1000, "text/plain")
        elif path == "/slow":
            time.sleep(1.0)
            self.reply(200, "late", "text/plain")
        elif path == "/redirect":
            self.reply(302, "", "text/plain", extra=(("Location", "/echo"),))
        elif path == "/redirect-ftp":
            self.reply(302, "", "text/plain", extra=(("Location", "ftp://127.0.0.1/file"),))
        elif path == "/redirect-to":
            target = self.path.split("?", 1)[1]
            self.reply(int(self.headers.get("X-Code") or 302), "", "text/plain", extra=(("Location", target),))
        else:
            self.reply(404, "no such route", "text/plain")

    def reply(self, status: int, body: str, content_type: str, extra: tuple[tuple[str, str], ...] = ()) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def call(params: dict[str, Any]) -> Any:
    ctx = NodeContext(run_id="run-1", node_id="call", sleeper=time.sleep)
    return run_node(HttpNode, parse_params(HttpNode, params), ctx)


def test_should_get_json_and_return_status_headers_and_parsed_body(base_url: str) -> None:
    out = call({"url": f"{base_url}/echo?x=1", "headers": {"X-Token": "t0k"}})
    assert out["status"] == 200
    assert out["headers"]["content-type"] == "application/json"
    assert out["body"] == {"method": "GET", "path": "/echo?x=1", "content_type": None, "x_token": "t0k", "body": ""}


def test_should_send_json_with_its_content_type(base_url: str) -> None:
    out = call({"method": "post", "url": f"{base_url}/echo", "json": {"a": [1, "é"]}})
    assert out["body"]["method"] == "POST"
    assert out["body"]["content_type"] == "application/json"
    assert json.loads(out["body"]["body"]) == {"a": [1, "é"]}


def test_should_send_a_raw_body_with_the_caller_content_type(base_url: str) -> None:
    params = {"method": "PUT", "url": f"{base_url}/echo", "body": "a=1", "headers": {"content-type": "text/x"}}
    out = call(params)
    assert (out["body"]["method"], out["body"]["content_type"], out["body"]["body"]) == ("PUT", "text/x", "a=1")


def test_should_return_text_when_the_response_is_not_json(base_url: str) -> None:
    out = call({"url": f"{base_url}/text"})
    assert out["body"] == "plain words"
    assert out["headers"]["set-cookie"] == "a=1, b=2"
    assert call({"url": f"{base_url}/bad-json"})["body"] == "{not json"
    assert call({"url": f"{base_url}/problem-json"})["body"] == {"title": "x"}


def test_should_raise_a_retryable_error_when_the_status_is_not_expected(base_url: str) -> None:
    with pytest.raises(NodeError) as caught:
        call({"url": f"{base_url}/status/503"})
    assert (
        caught.value.message == f'GET {base_url}/status/503 returned status 503, expected 2xx: {{"error": "as asked"}}'
    )
    assert caught.value.retryable is True
    with pytest.raises(NodeError, match="returned status 200, expected 201, 202"):
        call({"url": f"{base_url}/echo", "expected_status": [201, 202]})


def test_should_accept_a_non_2xx_status_when_it_is_expected(base_url: str) -> None:
    out = call({"method": "DELETE", "url": f"{base_url}/status/404", "expected_status": [404]})
    assert (out["status"], out["body"]) == (404, {"error": "as asked"})


def test_should_follow_http_redirects_and_refuse_others(base_url: str) -> None:
    assert call({"url": f"{base_url}/redirect"})["body"]["path"] == "/echo"
    with pytest.raises(NodeError, match=re.escape("redirect to 'ftp://127.0.0.1/file' refused")) as caught:
        call({"url": f"{base_url}/redirect-ftp"})
    assert caught.value.retryable is False


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "gopher://127.0.0.1/x", "javascript:alert(1)", "data:,hi", "ftp://h/f"]
)
def test_should_refuse_a_redirect_to_anything_but_http_without_retrying(base_url: str, target: str, code: int) -> None:
    with pytest.raises(NodeError) as caught:
        call({"url": f"{base_url}/redirect-to?{target}", "headers": {"X-Code": str(code)}})
    assert caught.value.message == f"redirect to {target!r} refused: only http and https are allowed"
    assert caught.value.retryable is False


def test_should_fail_when_the_server_is_too_slow(base_url: str) -> None:
    with pytest.raises(NodeError, match=f"GET {base_url}/slow failed: ") as caught:
        call({"url": f"{base_url}/slow", "timeout_seconds": 0.2})
    assert caught.value.retryable is True


def test_should_fail_when_nothing_listens() -> None:
    with socket.socket() as probe:  # a port that was just free is, for a moment, one nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(NodeError, match=r"failed: .*refused"):
        call({"url": f"http://127.0.0.1:{port}/", "timeout_seconds": 2})


def test_should_refuse_a_response_larger_than_the_limit(base_url: str) -> None:
    with pytest.raises(NodeError, match="response exceeds max_response_bytes=100"):
        call({"url": f"{base_url}/big", "max_response_bytes": 100})
    assert len(call({"url": f"{base_url}/big", "max_response_bytes": 1000})["body"]) == 1000


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "data:,hi", "127.0.0.1:80/x"])
def test_should_refuse_urls_that_are_not_http(url: str) -> None:
    with pytest.raises(NodeError, match="must be an absolute http:// or https:// URL") as caught:
        call({"url": url})
    assert caught.value.retryable is False


def test_should_retry_three_times_by_default() -> None:
    assert HttpNode.retry.max_attempts == 3


class Trickler:
    """A raw TCP server that sends its reply one byte at a time and records how much it got to send."""

    def __init__(self, reply: bytes, pause_seconds: float) -> None:
        self.reply = reply
        self.pause = pause_seconds
        self.sent = 0
        self.finished = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.recv(65536)
            try:
                for byte in self.reply:
                    conn.sendall(bytes([byte]))
                    self.sent += 1
                    time.sleep(self.pause)
            except OSError:
                pass  # the client hung up: what the test wants to see
        self.finished.set()
        self._listener.close()


HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n\r\n"


@pytest.mark.parametrize("reply", [HEADERS + b"x" * 40, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"y" * 60 + b"\r\n\r\n"])
def test_should_give_up_when_a_trickling_server_passes_the_whole_request_deadline(reply: bytes) -> None:
    """One byte every 0.1 s never trips a per-read timeout of 0.5 s; the deadline covers the whole request."""
    server = Trickler(reply, pause_seconds=0.1)
    with pytest.raises(NodeError) as caught:
        call({"url": server.url, "timeout_seconds": 0.5})
    assert caught.value.message == f"GET {server.url} failed: no complete response within timeout_seconds=0.5"
    assert caught.value.retryable is True
    assert server.finished.wait(10)
    # The client hung up near the deadline: the server got to send a small part of its reply.
    assert server.sent < len(reply) // 2

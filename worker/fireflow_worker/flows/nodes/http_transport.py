"""The http node's transport: urllib with a deadline for the whole request, and redirects to http(s) only.

urllib's `timeout` bounds each socket operation, not the request: a server sending one byte every half
second keeps a one-second timeout alive for as long as it likes. Here every socket the request opens
(to the server, a proxy, a redirect's target) is registered with one deadline; when it passes, the sockets
are shut down, which ends whatever read or write is blocked on them, and the request fails as timed out.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.parse
import urllib.request
from typing import IO, Any

from fireflow_worker.flows.nodetype import NodeError

SCHEMES = ("http", "https")


class Deadline:
    """Shuts down every registered socket once `seconds` have passed since `start()`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def connection_class(self, base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        deadline = self

        class DeadlineConnection(base):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                create: Any = getattr(self, "_create_connection")  # noqa: B009 - untyped in typeshed

                def create_tracked(*c_args: Any, **c_kwargs: Any) -> socket.socket:
                    sock: socket.socket = create(*c_args, **c_kwargs)
                    deadline.track(sock)  # before TLS: a handshake trickled byte by byte is cut off too
                    return sock

                setattr(self, "_create_connection", create_tracked)  # noqa: B010

        return DeadlineConnection


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._deadline.connection_class(http.client.HTTPConnection), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **kwargs: Any) -> http.client.HTTPResponse:
        return super().do_open(self._deadline.connection_class(http_class), req, **kwargs)


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are followed to http(s) URLs only; anything else fails the node without a retry.

    urllib itself refuses `file:` and the like with an HTTPError that reads as the 3xx response, which
    would be retried as an unexpected status; it would follow `ftp:`. Both are checked here first.
    """

    def http_error_302(  # urllib's signature
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> IO[bytes] | None:
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            target = urllib.parse.urljoin(req.full_url, location)
            if urllib.parse.urlsplit(target).scheme not in SCHEMES:
                fp.close()
                raise NodeError(f"redirect to {target!r} refused: only http and https are allowed", retryable=False)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def build_opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    # Built per request so that proxy settings are read from the environment of the moment.
    return urllib.request.build_opener(
        _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline), _HttpOnlyRedirects()
    )

"""Plain-dict access to the generated Kubernetes client.

The harness reads and writes manifests as dicts (the YAML field names), so it calls the generated
methods with `_preload_content=False` and parses JSON itself; a dict body is accepted wherever the
generated signature names a model, since the client validates it into one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import urllib3
from kubernetes.client.exceptions import ApiException

Json = dict[str, Any]


def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    response = cast(urllib3.BaseHTTPResponse, method(*args, _preload_content=False, **kwargs))
    data = response.data
    return cast(Json, json.loads(data)) if data else {}


def watch(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Json]:
    """Watch events as dicts; an ERROR event becomes an ApiException (410 when the window expired)."""
    response = cast(urllib3.BaseHTTPResponse, method(*args, watch=True, _preload_content=False, **kwargs))
    buffer = b""
    try:
        for chunk in response.stream(decode_content=False):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = cast(Json, json.loads(line))
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise ApiException(status=status.get("code", 500), reason=status.get("message", ""))
                yield event
    finally:
        response.release_conn()

"""`http`: one HTTP(S) request with urllib; an unexpected status raises so that the retry policy applies."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fireflow_worker.flows.model import RetryPolicy
from fireflow_worker.flows.nodes.http_transport import SCHEMES, Deadline, build_opener
from fireflow_worker.flows.nodetype import NodeContext, NodeError, NodeType


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.netloc:
        raise ValueError(f"must be an absolute http:// or https:// URL, got {url!r}")
    return url


class HttpParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    # Sent as JSON with Content-Type application/json; `json` in a flow (the name would shadow BaseModel's).
    json_body: Any = Field(default=None, alias="json")
    body: str | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # None: any 2xx.
    expected_status: list[int] | None = None
    # A run's outputs are stored in the database: refuse to record a huge response.
    max_response_bytes: int = Field(default=10 * 1024 * 1024, ge=1)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str) -> str:
        return _check_url(url)

    @field_validator("expected_status")
    @classmethod
    def _status_codes(cls, codes: list[int] | None) -> list[int] | None:
        if codes is not None and not all(100 <= code <= 599 for code in codes):
            raise ValueError("status codes are between 100 and 599")
        return codes

    @model_validator(mode="after")
    def _one_body(self) -> HttpParams:
        if "json_body" in self.model_fields_set and self.body is not None:
            raise ValueError("give either json or body, not both")
        return self


class HttpNode(NodeType[HttpParams]):
    name = "http"
    Params = HttpParams
    retry = RetryPolicy(max_attempts=3, interval_seconds=1.0, backoff_rate=2.0)

    def run(self, params: HttpParams, ctx: NodeContext) -> dict[str, Any]:
        request = _build_request(params)
        target = f"{params.method} {params.url}"
        timed_out = f"{target} failed: no complete response within timeout_seconds={params.timeout_seconds:g}"
        # timeout_seconds is the whole request's deadline; urllib's timeout only bounds each socket operation.
        with Deadline(params.timeout_seconds) as deadline:
            try:
                with build_opener(deadline).open(request, timeout=params.timeout_seconds) as response:
                    status, headers = response.status, response.headers
                    raw = response.read(params.max_response_bytes + 1)
            except urllib.error.HTTPError as error:  # a 4xx/5xx still has a status and a body worth reporting
                with error:
                    status, headers, raw = error.code, error.headers, error.read(params.max_response_bytes + 1)
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets are OSErrors
                if deadline.expired:
                    raise NodeError(timed_out) from exc
                raise NodeError(f"{target} failed: {getattr(exc, 'reason', exc)}") from exc
        if deadline.expired:  # a body cut short by the deadline reads as a short body: never return it
            raise NodeError(timed_out)
        if len(raw) > params.max_response_bytes:
            raise NodeError(f"{target}: response exceeds max_response_bytes={params.max_response_bytes}")
        body = _decode(raw, headers)
        expected = params.expected_status
        if (expected is None and not 200 <= status < 300) or (expected is not None and status not in expected):
            wanted = "2xx" if expected is None else ", ".join(map(str, expected))
            raise NodeError(f"{target} returned status {status}, expected {wanted}: {_excerpt(body)}")
        return {"status": status, "headers": _header_dict(headers), "body": body}


def _build_request(params: HttpParams) -> urllib.request.Request:
    headers = dict(params.headers)
    data: bytes | None = None
    if "json_body" in params.model_fields_set:
        data = json.dumps(params.json_body, ensure_ascii=False).encode()
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
    elif params.body is not None:
        data = params.body.encode()
    # The scheme was checked by the params model; redirects by _HttpOnlyRedirects.
    return urllib.request.Request(params.url, data=data, headers=headers, method=params.method)  # noqa: S310


def _decode(raw: bytes, headers: Message) -> Any:
    """JSON when the server says so and it parses; text otherwise."""
    text = raw.decode(headers.get_content_charset() or "utf-8", errors="replace")
    content_type = headers.get_content_type()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _header_dict(headers: Message) -> dict[str, str]:
    # Lower-case names so that ${nodes.call.headers.content-type} works whatever the server's casing.
    result: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        result[key] = f"{result[key]}, {value}" if key in result else value
    return result


def _excerpt(body: Any) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return text if len(text) <= 200 else text[:200] + "..."

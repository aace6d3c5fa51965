"""The API server's audit log, opt-in (`ControlPlane(audit=True)`): who sent which requests, counted in a window.

The policy records every request at the Metadata level (user, userAgent, verb, resource, response code; no
request or response bodies) once, when the response is complete. The log is JSON lines, one event per line,
appended by the API server as it answers; `AuditLog.requests(since, until)` counts what it holds.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

MUTATING = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Metadata for everything, recorded once (at ResponseComplete); health checks of the harness are not requests of
# any client under test.
POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*"]},
        {"level": "Metadata"},
    ],
}


def write_policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    return path


def apiserver_flags(policy: Path, log: Path) -> list[str]:
    """The kube-apiserver flags that write the log (no rotation: a test cluster lives minutes)."""
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # every answered request is in the file before the client has its answer
    ]


@dataclass(frozen=True)
class Request:
    """One answered request, as the audit log records it."""

    user: str
    user_agent: str
    verb: str
    resource: str  # "pods", "pods/status", or the URL of a non-resource request
    namespace: str
    name: str
    code: int
    received: datetime
    pod: str = ""  # the pod a service account token was bound to (two replicas share one user)

    @property
    def mutating(self) -> bool:
        return self.verb in MUTATING


def parse_event(event: dict[str, Any]) -> Request:
    """A Request from one audit event (pure)."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event.get("requestURI", "")
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    user = event.get("user") or {}
    return Request(
        user=user.get("username", ""),
        user_agent=event.get("userAgent", ""),
        verb=event.get("verb", ""),
        resource=resource,
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int((event.get("responseStatus") or {}).get("code", 0)),
        received=datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")),
        pod=next(iter((user.get("extra") or {}).get("authentication.kubernetes.io/pod-name") or []), ""),
    )


def count(requests: list[Request]) -> Counter[tuple[str, str, str, int]]:
    """Requests per (user, verb, resource, response code) (pure)."""
    return Counter((r.user, r.verb, r.resource, r.code) for r in requests)


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def requests(self, since: datetime, until: datetime | None = None, *, user: str | None = None) -> list[Request]:
        """The requests received in [since, until) (timezone-aware datetimes), of `user` if given."""
        found: list[Request] = []
        if not self.path.exists():
            return found
        with self.path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # the last line may be half written
                    continue
                if event.get("stage") != "ResponseComplete":
                    continue
                request = parse_event(event)
                if request.received < since or (until is not None and request.received >= until):
                    continue
                if user is None or request.user == user:
                    found.append(request)
        return found

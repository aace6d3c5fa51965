"""Readiness/liveness/startup probes, run the kubelet's way against the local process."""

from __future__ import annotations

import http.client
import socket
import subprocess
from collections.abc import Mapping
from typing import Any

from .netutil import LOOPBACK

Json = dict[str, Any]


class Prober:
    """One probe of one container run: counts consecutive results against the thresholds."""

    def __init__(self, spec: Json, ports: Mapping[str | int, int], env: Mapping[str, str], started: float) -> None:
        self.spec = spec
        self.ports = ports
        self.env = env
        self.period = float(spec.get("periodSeconds", 10))
        self.timeout = float(spec.get("timeoutSeconds", 1))
        self.success_threshold = int(spec.get("successThreshold", 1))
        self.failure_threshold = int(spec.get("failureThreshold", 3))
        self.next_due = started + float(spec.get("initialDelaySeconds", 0))
        self.successes = 0
        self.failures = 0
        self.last_error = ""
        # None until a threshold is crossed: a readiness result starts as "not ready", a liveness one as
        # "no verdict yet"; afterwards it flips only when the other threshold is crossed.
        self.result: bool | None = None

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def run(self, now: float) -> None:
        self.next_due = now + self.period
        ok, self.last_error = self._probe()
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.success_threshold:
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.failure_threshold:
                self.result = False

    def _port(self, port: str | int) -> int:
        # A declared containerPort (by number or name) maps to the pod's host port; an undeclared
        # number is probed as is, as it would be on the pod IP.
        if port in self.ports:
            return self.ports[port]
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        raise ValueError(f"probe port {port!r} is not a declared containerPort name")

    def _probe(self) -> tuple[bool, str]:
        try:
            if "httpGet" in self.spec:
                return self._http(self.spec["httpGet"])
            if "tcpSocket" in self.spec:
                with socket.create_connection((LOOPBACK, self._port(self.spec["tcpSocket"]["port"])), self.timeout):
                    return True, ""
            if "exec" in self.spec:
                done = subprocess.run(
                    self.spec["exec"]["command"],
                    env=dict(self.env),
                    capture_output=True,
                    timeout=self.timeout,
                    check=False,
                )
                return done.returncode == 0, f"exec probe exited {done.returncode}"
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            return False, str(error)
        return False, f"unsupported probe handler {sorted(self.spec)}"

    def _http(self, spec: Json) -> tuple[bool, str]:
        if spec.get("scheme", "HTTP").upper() != "HTTP":
            return False, "only scheme HTTP is supported by the process node"
        connection = http.client.HTTPConnection(LOOPBACK, self._port(spec["port"]), timeout=self.timeout)
        try:
            headers = {h["name"]: h["value"] for h in spec.get("httpHeaders", [])}
            connection.request("GET", spec.get("path", "/"), headers={"User-Agent": "kube-probe/1.37", **headers})
            status = connection.getresponse().status
        finally:
            connection.close()
        return 200 <= status < 400, f"HTTP probe failed with statuscode: {status}"

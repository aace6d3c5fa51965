"""One run of one container: a local process group, its own log file and termination-message file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MAX_MESSAGE_BYTES = 4096  # the kubelet's cap per container
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048  # what FallbackToLogsOnError takes from the log


def rfc3339(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    process: subprocess.Popen[bytes]
    log_path: Path
    message_path: Path
    started_at: str
    started_monotonic: float
    kill_deadline: float | None = None
    finished_at: str = ""
    exit_status: int | None = None  # Popen's returncode: negative for a signal

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], cwd: Path, log_path: Path, message_path: Path) -> ContainerRun:
        message_path.write_bytes(b"")  # a fresh, empty termination-message file per run
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach the whole "container"
            )  # fmt: skip
        return cls(process, log_path, message_path, rfc3339(), time.monotonic())

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        """The exit status once the process has exited; its leftover children are then killed."""
        if self.exit_status is None:
            status = self.process.poll()
            if status is not None:
                self.exit_status = status
                self.finished_at = rfc3339()
                self._signal_group(signal.SIGKILL)  # like a runtime tearing down the container's cgroup
        return self.exit_status

    def terminate(self, grace_seconds: float) -> None:
        if self.poll() is None and self.kill_deadline is None:
            self.kill_deadline = time.monotonic() + max(grace_seconds, 0.0)
            self._signal_group(signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)

    def enforce_deadline(self) -> None:
        if self.kill_deadline is not None and time.monotonic() >= self.kill_deadline and self.poll() is None:
            self._signal_group(signal.SIGKILL)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self.poll()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    @property
    def exit_code(self) -> int:
        status = self.exit_status if self.exit_status is not None else 0
        return 128 - status if status < 0 else status  # a signal N is exit code 128+N, as runtimes report

    def terminated_state(self, policy: str) -> dict[str, Any]:
        code = self.exit_code
        state: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": self.finished_at or rfc3339(),
            "containerID": f"process://{self.pid}",
        }
        if self.exit_status is not None and self.exit_status < 0:
            state["signal"] = -self.exit_status
        message = self.termination_message(policy, code)
        if message:
            state["message"] = message
        return state

    def termination_message(self, policy: str, exit_code: int) -> str:
        try:
            with self.message_path.open("rb") as file:
                message = file.read(MAX_MESSAGE_BYTES)
        except FileNotFoundError:
            message = b""
        if not message and policy == "FallbackToLogsOnError" and exit_code != 0:
            message = self._log_tail()
        return message.decode("utf-8", errors="replace")

    def _log_tail(self) -> bytes:
        lines = self.log_path.read_bytes().splitlines()[-FALLBACK_LOG_LINES:]
        return b"\n".join(lines)[-FALLBACK_LOG_BYTES:]

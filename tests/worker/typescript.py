"""The TypeScript caller of the interop tests: examples/interop/typescript/fireflow-run.js run with Node.js and
the real `@dbos-inc/dbos-sdk` from npm (installed and cached by install-typescript-sdk.sh)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CALLER = REPO_ROOT / "examples" / "interop" / "typescript" / "fireflow-run.js"
INSTALL = Path(__file__).with_name("install-typescript-sdk.sh")
# The SDKs the caller runs with: the module name it requires -> the version the lock file pins.
SDKS = {"@dbos-inc/dbos-sdk": "4.27.6", "dbos-sdk-5": "5.3.0"}


@functools.cache
def installed_modules() -> Path:
    """node_modules with the pinned SDKs (npm ci once per lock file, cached)."""
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot install the TypeScript SDK: {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "node_modules"


class TypeScriptCaller:
    """One TypeScript program on the executions database, with one SDK version."""

    def __init__(self, database_url: str, sdk: str) -> None:
        self.sdk = sdk
        self.env = {
            **os.environ,
            "DATABASE_URL_EXECUTIONS": database_url,
            "NODE_PATH": str(installed_modules()),
            "FIREFLOW_DBOS_SDK": sdk,
        }

    def _command(self, *args: str) -> list[str]:
        return ["node", str(CALLER), *args]

    def run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            self._command(*args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"fireflow-run.js {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def enqueue(self, request: dict[str, Any], encoding: str = "superjson") -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
            json.dump(request, file)
        try:
            return self.run("enqueue", file.name, encoding).strip()
        finally:
            Path(file.name).unlink()

    def result(self, run_id: str) -> dict[str, Any]:
        """{"output": ...} or {"error": {"name", "message"}}: what getResult() resolved or rejected with."""
        answer: dict[str, Any] = json.loads(self.run("result", run_id))
        return answer

    def follow(self, run_id: str) -> subprocess.Popen[str]:
        """readStream of the run's events, one JSON line each as they arrive, until the run ends."""
        return subprocess.Popen(
            self._command("events", run_id), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def listing(self, run_id: str) -> dict[str, Any]:
        """{"status", "input"}: the run as listWorkflows({loadInput: true}) shows it."""
        answer: dict[str, Any] = json.loads(self.run("list", run_id))
        return answer

    def cancel(self, run_id: str) -> None:
        self.run("cancel", run_id)

    def resume(self, run_id: str) -> None:
        self.run("resume", run_id)

"""The queues a FireFlow worker serves, named as in the TypeScript FireFlow execution worker's README."""

from __future__ import annotations

EXECUTIONS = "fireflow-executions"
BACKGROUND = "fireflow-executions-background"
SANDBOX = "fireflow-sandbox"
TERMINAL = "fireflow-terminal"

ALL_QUEUES: tuple[str, ...] = (EXECUTIONS, BACKGROUND, SANDBOX, TERMINAL)

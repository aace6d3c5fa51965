"""The worker's DBOS executor ids, as the operator derives, recovers and counts them (pure).

A pod's worker id is `<namespace>.<pod>` (`<pool>-<ordinal>`, or `<pool>-v<N>-<ordinal>` for a later version's
StatefulSet): unique across every pool on a database, stable across the pod's restarts. A pod of N worker
processes runs process 0 as the pod's id and process k >= 1 as `<pod id>-p<k>`: DBOS recovers a PENDING run
only in a process launched with its executor id, so the operator's hand-back must know every one of them.
Each process names its database connections `fireflow-worker:<executor id>` (PGAPPNAME), which is how the
operator counts the pool's connections in `pg_stat_activity`.
"""

from __future__ import annotations

import math
import re

MAX_PROCESSES = 64  # worker processes per pod
MAX_EXECUTOR_ID_CHARS = 253
CHILD_SUFFIX = "-p"
WORKER_CONNECTION_PREFIX = "fireflow-worker:"  # + executor id: the application_name of a worker's connections
APPLICATION_NAME_BYTES = 63  # PostgreSQL keeps this much of an application_name: longer names arrive cut
# What follows `<namespace>.<statefulset>-` in an executor id: the pod's ordinal and, for k >= 1, `-p<k>`.
ORDINAL_AND_PROCESS = re.compile(r"(\d+)(?:-p(\d+))?")


def processes_for_cpu_limit(cores: float | None) -> int:
    """`FIREFLOW_WORKER_PROCESSES=auto`: one process per core of the pod's CPU limit, rounded up (a float's last
    bit does not add a process); one without a limit. The worker applies it to its cgroup, the operator to the
    pool's spec, so the connection budget counts the processes the pods run."""
    if cores is None:
        return 1
    return max(1, min(MAX_PROCESSES, math.ceil(cores - 1e-9)))


def executor_id(namespace: str, pod_name: str) -> str:
    """A pod's worker id (its process 0's executor id)."""
    return f"{namespace}.{pod_name}"


def child_executor_id(worker_id: str | None, index: int) -> str | None:
    """Process `index`'s executor id: the pod's for process 0, `<pod id>-p<index>` after it."""
    if index == 0:
        return worker_id
    return f"{worker_id or 'local'}{CHILD_SUFFIX}{index}"


def statefulset_prefix(namespace: str, statefulset: str) -> str:
    """What the executor ids of a StatefulSet's pods start with; ORDINAL_AND_PROCESS follows."""
    return executor_id(namespace, f"{statefulset}-")


def pool_executor_pattern(namespace: str, pool_name: str) -> re.Pattern[str]:
    """Every executor id the pool's pods can have, of every version's StatefulSet (`<pool>-<ordinal>`,
    `<pool>-v<N>-<ordinal>`, each with an optional `-p<k>` process suffix), and no other pool's: a prefix
    alone would also match a pool named `<pool>-b` in the same namespace. Its groups: the StatefulSet, the
    ordinal, the process (PostgreSQL's regular expressions read it too)."""
    pool = re.escape(pool_name)
    return re.compile(rf"{re.escape(namespace)}\.({pool}(?:-v\d+)?)-(\d+)(?:{CHILD_SUFFIX}(\d+))?")


def connection_name(executor: str) -> str:
    """The application_name of an executor's database connections, as the server keeps it."""
    return f"{WORKER_CONNECTION_PREFIX}{executor}"[:APPLICATION_NAME_BYTES]

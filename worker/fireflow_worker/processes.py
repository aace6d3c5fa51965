"""How many worker processes a pod runs, and what each one is called.

One Python process executes DBOS's bookkeeping on one core at a time (the GIL), so a pod with a CPU limit of
N cores runs N worker processes under a supervisor (see supervisor.py). Each process is a complete worker
with its own DBOS executor id, derived from the pod's: process 0 keeps `FIREFLOW_WORKER_ID`, process k >= 1
is `<FIREFLOW_WORKER_ID>-p<k>`. Launch recovers the PENDING runs stamped with a process's own id, so every
process must keep its index across restarts (the supervisor starts them in a fixed order), and the
operator's recovery of a removed pod's runs must cover `<pod>-p<k>` as well as `<pod>`.

Each process has its own DBOS pool: a pod holds processes x (DBOS_SYSTEM_DATABASE_POOL_SIZE + 1)
connections at most.
"""

from __future__ import annotations

from pathlib import Path

from fireflow_contract.executor_ids import processes_for_cpu_limit

# Set by the supervisor for each worker process: a pipe on which the process writes the loopback port its
# health server bound. The process binds port 0: a port chosen for it beforehand could be taken in between by
# any outgoing connection of the pod (ephemeral ports come from the same range), and the pod would fail.
HEALTH_PORT_FD_ENV = "FIREFLOW_HEALTH_PORT_FD"
# Set by the supervisor in the environment of the worker processes it starts (see supervisor.py).
SUPERVISOR_PID_ENV = "FIREFLOW_SUPERVISOR_PID"


def cgroup_cpu_limit(cpu_max: str | None, cfs_quota: str | None, cfs_period: str | None) -> float | None:
    """The CPU limit in cores from cgroup v2's `cpu.max` ("max 100000" or "150000 100000") or v1's
    `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 = none); None when there is no limit or it cannot be read."""
    try:
        if cpu_max is not None:
            quota, _, period = cpu_max.strip().partition(" ")
            if quota != "max" and period:
                return int(quota) / int(period)
            return None
        if cfs_quota is not None and cfs_period is not None and int(cfs_quota) > 0:
            return int(cfs_quota) / int(cfs_period)
    except ValueError:
        return None
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def default_processes() -> int:
    """One process per core of the pod's CPU limit (rounded up); one without a limit.

    Not the node's CPU count: the operator budgets pods x processes x (pool + 1) connections before it knows
    which node a pod lands on, so without a limit the count must not depend on the node (a 64-core node
    would otherwise mean 64 processes and 64 x 31 connections for one pod)."""
    limit = cgroup_cpu_limit(
        _read("/sys/fs/cgroup/cpu.max"),
        _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"),
        _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"),
    )
    return processes_for_cpu_limit(limit)

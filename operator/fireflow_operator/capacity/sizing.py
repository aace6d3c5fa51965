"""How many workers a pool may run: its budget against every other pool and client, decided one pool at a
time per operator process, so two pools never both take the same free connections (I/O-free, stateful).

The state is what this process allowed each pool since it started (a pool's status may lag behind) and the
window of others' usage (usage.py). Both start empty after a restart: statuses are read instead, and
nothing is shrunk for usage until a window was observed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fireflow_operator.api import conditions
from fireflow_operator.api.model import worker_processes
from fireflow_operator.capacity.budget import Budget, PoolNeed, compute_budget, pool_need, same_decision
from fireflow_operator.capacity.scaling import ReplicaPlan, plan_replicas
from fireflow_operator.capacity.usage import UsageHistory
from fireflow_operator.children.builders import Pool
from fireflow_operator.database.facts import DatabaseFacts, Usage
from fireflow_operator.migration import machine
from fireflow_operator.status import StatusDraft


class BudgetKeeper:
    def __init__(self, window_seconds: float) -> None:
        self.usage = UsageHistory(window_seconds)
        self._needs: dict[tuple[str, str], PoolNeed] = {}  # what each pool was last allowed, before its status
        self._lock = threading.Lock()

    def _other_needs(self, pool: Pool, pools: list[dict[str, Any]]) -> list[PoolNeed]:
        """What every other known pool may hold: its status, or what this process allowed it since."""
        needs = []
        for other in pools:
            key = (other["metadata"]["namespace"], other["metadata"]["name"])
            if key == (pool.namespace, pool.name):
                continue
            need = self._needs.get(key) or pool_need(other.get("status") or {})
            if need is not None:
                needs.append(need)
        live = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pools}
        for gone in set(self._needs) - live:
            del self._needs[gone]
        return needs

    def plan(
        self,
        pool: Pool,
        facts: DatabaseFacts,
        pools: list[dict[str, Any]],
        draft: StatusDraft,
        sts: Any,
        step: machine.MigrationStep,
        retiring_replicas: int = 0,
        carried_replicas: int | None = None,
    ) -> tuple[ReplicaPlan, str | None]:
        """Replicas of the current version: desired by the spec (or its autoscaler), clamped by the budget left
        after the retiring versions' workers, zero while gated; and why the pool is held below what it asks
        for, when it is."""
        spec = pool.spec
        usage = self.usage.record(f"{facts.database_key}/{facts.role}", facts.others, time.monotonic())
        # The size to come back to: what a migration held at zero saved, else what a new version carries over.
        saved = (draft.new.get("migration") or {}).get("replicasBefore", carried_replicas)
        current = sts.spec.replicas if sts is not None else None
        needs_of_others: list[PoolNeed] = []

        def budget(others: Usage) -> Budget:
            return compute_budget(
                facts,
                per_replica=worker_processes(spec) * (spec.dbos.system_database_pool_size + 1),
                headroom=spec.database.reserved_connections,
                other_pools=needs_of_others,
                others=others,
            )

        with self._lock:
            needs_of_others += self._other_needs(pool, pools)
            grow = budget(usage.high)
            keep = budget(usage.low) if usage.full_window else None
            plan = plan_replicas(
                spec_replicas=spec.replicas,
                current=current,
                saved=saved,
                max_replicas=max(0, grow.max_replicas - retiring_replicas),
                max_kept=max(0, keep.max_replicas - retiring_replicas) if keep is not None else (current or 0),
                hold_at_zero=step.hold_at_zero,
            )
            grown = min(plan.desired, grow.max_replicas - retiring_replicas)
            used = keep if keep is not None and plan.allowed > grown else grow
            self._needs[(pool.namespace, pool.name)] = PoolNeed(
                facts.server, facts.database, facts.role, used.needs(plan.allowed + retiring_replicas)
            )
        if step.hold_at_zero:
            step.migration.setdefault("replicasBefore", plan.desired)
        else:
            step.migration.pop("replicasBefore", None)
        draft.new["migration"] = step.migration
        draft.new["desiredReplicas"] = 0 if step.hold_at_zero else plan.allowed
        new_budget = used.as_status(plan.desired, plan.allowed, retiring=retiring_replicas)
        old_budget = draft.old.get("connectionBudget") or {}
        unchanged = same_decision(old_budget, new_budget)  # then usage moved, and nothing was decided differently
        draft.new["connectionBudget"] = old_budget if unchanged else new_budget
        draft.outcome.allowed_replicas = plan.allowed
        over_budget = None
        if plan.allowed < plan.desired:
            was = conditions.condition(list(draft.new.get("conditions") or []), conditions.CONNECTION_BUDGET) or {}
            already = was.get("status") == "False" and was.get("reason") == conditions.REASON_OVER_BUDGET
            same = unchanged and was.get("status") == "False"
            message = over_budget = str(was["message"]) if same else used.explain(plan.desired)
            if already and not same:
                # Held at another size: no condition transition says so. Going over budget is one (its event is
                # the transition's, status.py), so it is not posted here too.
                draft.event("Warning", conditions.REASON_OVER_BUDGET, message)
            draft.cond(conditions.CONNECTION_BUDGET, False, conditions.REASON_OVER_BUDGET, message)
        else:
            needs = f"{used.needs(plan.allowed)} of {facts.max_connections} connections"
            draft.cond(
                conditions.CONNECTION_BUDGET,
                True,
                conditions.REASON_WITHIN_BUDGET,
                f"{plan.allowed} replicas need {needs}",
            )
        return plan, over_budget

"""How many replicas the StatefulSet gets, and whether the operator writes that count at all (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaPlan:
    desired: int  # what the spec (or, when it is unset, the autoscaler) asks for
    allowed: int  # desired, clamped by the connection budget
    write: int | None  # the count to write; None leaves it to its other owner


def plan_replicas(
    *, spec_replicas: int | None, current: int | None, saved: int | None, max_replicas: int, hold_at_zero: bool
) -> ReplicaPlan:
    """`spec_replicas=None` means an autoscaler owns the StatefulSet's count: the operator writes it only to
    hold the pool at zero for a migration, to restore the count it `saved` then, or to clamp it to the budget.
    """
    if spec_replicas is None:
        desired = saved if saved is not None else (current if current is not None else 1)
    else:
        desired = spec_replicas
    allowed = min(desired, max_replicas)
    if hold_at_zero:
        return ReplicaPlan(desired, allowed, 0)
    if spec_replicas is None and current is not None and saved is None and current <= allowed:
        return ReplicaPlan(desired, allowed, None)
    return ReplicaPlan(desired, allowed, allowed)

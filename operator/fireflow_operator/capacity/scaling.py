"""How many replicas the StatefulSet gets, and whether the operator writes that count at all (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaPlan:
    desired: int  # what the spec (or, when it is unset, the autoscaler) asks for
    allowed: int  # desired, clamped by the connection budget
    write: int | None  # the count to write; None leaves it to its other owner


def plan_replicas(
    *,
    spec_replicas: int | None,
    current: int | None,
    saved: int | None,
    max_replicas: int,
    hold_at_zero: bool,
    max_kept: int | None = None,
) -> ReplicaPlan:
    """`spec_replicas=None` means an autoscaler owns the StatefulSet's count: the operator writes it only to
    hold the pool at zero for a migration, to restore the count it `saved` then, or to clamp it to the budget.

    `max_replicas` bounds growth; `max_kept` (default: the same) bounds the workers that already run, so a
    budget computed on smoothed usage can keep them through a passing burst.
    """
    if spec_replicas is None:
        desired = saved if saved is not None else (current if current is not None else 1)
    else:
        desired = spec_replicas
    kept = min(desired, current or 0, max_replicas if max_kept is None else max_kept)
    allowed = max(min(desired, max_replicas), kept)
    if hold_at_zero:
        return ReplicaPlan(desired, allowed, 0)
    if spec_replicas is None and current is not None and saved is None and current <= allowed:
        return ReplicaPlan(desired, allowed, None)
    return ReplicaPlan(desired, allowed, allowed)

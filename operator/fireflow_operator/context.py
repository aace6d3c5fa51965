"""What one reconcile of a pool knows once its database URL is resolved (pure data): the parts of the
operator that reach the database take it, so none has to check that a URL exists."""

from __future__ import annotations

from dataclasses import dataclass

from fireflow_operator.children.builders import Pool
from fireflow_operator.status import StatusDraft


@dataclass(frozen=True)
class PoolContext:
    pool: Pool
    draft: StatusDraft
    url: str  # the pool's database URL, from its Secret

"""What the engine shares with the running worker: its settings and the runs executing here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fireflow_worker.cancellation import CancelWatcher
from fireflow_worker.flow_store import ProvisionCache
from fireflow_worker.run_limits import RunLimits


class RunFailedError(Exception):
    """The run ends in ERROR with this one-line message (a node failed, the flow or its inputs are invalid)."""


@dataclass
class EngineSettings:
    """What the engine needs from the running worker; set once by the runtime before launch."""

    provision_cache: ProvisionCache | None = None
    limits: RunLimits = field(default_factory=RunLimits)
    cancel_watcher: CancelWatcher | None = None
    active_runs: set[str] = field(default_factory=set)
    # Runs whose execution here was cut short by shutdown: they stay PENDING for recovery.
    interrupted_runs: set[str] = field(default_factory=set)
    # Runs started since the sampler last read their claim latency (appended and swapped whole: thread-safe).
    claimed: list[str] = field(default_factory=list)
    # Told every run that starts here, and the queue of every run that ends here (the claimers' slot count).
    on_run_started: Callable[[str], None] | None = None
    on_run_ended: Callable[[str], None] | None = None

    def is_cancelled(self, run_id: str, ask_now: bool = False) -> bool:
        return self.cancel_watcher is not None and self.cancel_watcher.is_cancelled(run_id, ask_now)


SETTINGS = EngineSettings()

"""CPU time of process trees from /proc (Linux): where a benchmark window's CPU went."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of a live process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after its closing parenthesis do not.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _all_stats() -> dict[int, tuple[int, float]]:
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    return stats


def _members(roots: Iterable[int], stats: dict[int, tuple[int, float]]) -> set[int]:
    members = {pid for pid in roots if pid in stats}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in stats.items() if ppid in members and pid not in members}
        members |= children
        grew = bool(children)
    return members


def tree_pids(roots: Iterable[int]) -> set[int]:
    """The live processes in the trees rooted at `roots`."""
    return _members(roots, _all_stats())


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """User + system CPU seconds so far of the live processes in the trees rooted at `roots`."""
    stats = _all_stats()
    return sum(stats[pid][1] for pid in _members(roots, stats))


def postmaster_pid(data_dir: Path) -> int:
    """The PostgreSQL server's main process, from its `postmaster.pid`."""
    return int((data_dir / "postmaster.pid").read_text().splitlines()[0])

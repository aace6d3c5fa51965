"""CPU time of process trees from /proc (Linux): where a benchmark window's CPU went."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _fields(stat_path: Path) -> list[str] | None:
    """The fields of a /proc `stat` file after the command name, None once the process or thread is gone."""
    try:
        text = stat_path.read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after its closing parenthesis do not.
    return text[text.rindex(")") + 2 :].split()


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of a live process, None once it is gone."""
    fields = _fields(Path(f"/proc/{pid}/stat"))
    if fields is None:
        return None
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


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds so far of one process (its threads included), None once it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """User + system CPU seconds so far of the live processes in the trees rooted at `roots`."""
    stats = _all_stats()
    return sum(stats[pid][1] for pid in _members(roots, stats))


@dataclass(frozen=True)
class KernelShare:
    """What a process tree spent in the kernel so far: its processes' system CPU seconds (their ended threads
    included) and its live threads' context switches, voluntary and involuntary (a thread that ended takes its
    count with it; the workers' threads live as long as their pools)."""

    system_seconds: float
    switches: int

    def __sub__(self, earlier: KernelShare) -> KernelShare:
        return KernelShare(self.system_seconds - earlier.system_seconds, self.switches - earlier.switches)


def tree_kernel_share(roots: Iterable[int]) -> KernelShare:
    pids = tree_pids(roots)
    # The processes' own system time: their threads', each rounded to clock ticks, would undercount.
    system = sum(int(fields[12]) / _TICKS for pid in pids if (fields := _fields(Path(f"/proc/{pid}/stat"))))
    return KernelShare(system, sum(thread.switches for thread in _threads_of(pids).values()))


@dataclass(frozen=True)
class ThreadCounters:
    """One thread's CPU seconds (user + system, in clock ticks) and context switches so far."""

    cpu_seconds: float
    voluntary: int  # it waited (I/O, a lock, the interpreter's lock)
    involuntary: int  # the scheduler took its CPU

    @property
    def switches(self) -> int:
        return self.voluntary + self.involuntary

    def __add__(self, other: ThreadCounters) -> ThreadCounters:
        return ThreadCounters(
            self.cpu_seconds + other.cpu_seconds, self.voluntary + other.voluntary, self.involuntary + other.involuntary
        )

    def __sub__(self, earlier: ThreadCounters) -> ThreadCounters:
        return ThreadCounters(
            self.cpu_seconds - earlier.cpu_seconds,
            self.voluntary - earlier.voluntary,
            self.involuntary - earlier.involuntary,
        )


NO_THREAD = ThreadCounters(0.0, 0, 0)


def thread_counters(roots: Iterable[int]) -> dict[int, ThreadCounters]:
    """Every live thread of the trees rooted at `roots`, by its id (the kernel's, which py-spy shows)."""
    return _threads_of(tree_pids(roots))


def _threads_of(pids: Iterable[int]) -> dict[int, ThreadCounters]:
    counters: dict[int, ThreadCounters] = {}
    for pid in pids:
        try:
            threads = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for thread in threads:
            fields = _fields(thread / "stat")
            try:
                status = (thread / "status").read_text()
            except OSError:
                continue
            if fields is None:
                continue
            switches = dict(line.split(":", 1) for line in status.splitlines() if "ctxt_switches" in line)
            counters[int(thread.name)] = ThreadCounters(
                (int(fields[11]) + int(fields[12])) / _TICKS,
                int(switches["voluntary_ctxt_switches"]),
                int(switches["nonvoluntary_ctxt_switches"]),
            )
    return counters


def postmaster_pid(data_dir: Path) -> int:
    """The PostgreSQL server's main process, from its `postmaster.pid`."""
    return int((data_dir / "postmaster.pid").read_text().splitlines()[0])

"""The fleet benchmark's instruments: what one operator process costs over a window, read from the outside.

- CPU (utime + stime) and RSS of the operator process, from /proc.
- Its API requests (all, mutating) from the API server's audit log (tests/kube/audit.py), told from everyone
  else's by its own user (`OPERATOR_USER`).
- Response bytes: the API server's `apiserver_response_sizes_sum` (every client, GET and LIST only: watches
  stream and are not in it), shared out per (verb, resource) by the operator's share of those requests in the
  audit log.
- New database connections: PostgreSQL's `log_connections` lines, by application_name.
- Database transactions: `pg_stat_database`'s xact_commit + xact_rollback of the fleet's databases.
- Reconciles: the operator's `fireflow_operator_reconciles_total`, and what asked for them
  (`fireflow_operator_reconcile_requests_total` by trigger).
- Status writes: the operator's log line for each, naming the fields it changed.
The parsers are pure; the `read_*` functions do the I/O.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from benchmarks.cpu import process_cpu_seconds
from tests.kube.audit import Request

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_AUTHORIZED = re.compile(r"connection authorized: .*?application_name=(\S+)")
_STATUS_WRITTEN = re.compile(r"status of (\S+) written: (.*)$", re.MULTILINE)
# What the operator's own database clients call themselves: its probe, and the DBOS client of its recovery and
# version calls (DBOS names the connections of a client it builds so).
OPERATOR_APPLICATIONS = frozenset({"fireflow-operator", "dbos_transact_client"})


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of one metric in a Prometheus text exposition (pure)."""
    found: list[tuple[dict[str, str], float]] = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            found.append((dict(_LABEL.findall(match["labels"] or "")), float(match["value"])))
    return found


def response_bytes(text: str) -> dict[tuple[str, str], float]:
    """Response bytes so far per (verb, resource[/subresource]) from the API server's metrics (pure)."""
    sizes: dict[tuple[str, str], float] = {}
    for labels, value in samples(text, "apiserver_response_sizes_sum"):
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource = f"{resource}/{labels['subresource']}"
        key = (labels.get("verb", "").lower(), resource)
        sizes[key] = sizes.get(key, 0.0) + value
    return sizes


def operator_bytes(sizes: dict[tuple[str, str], float], everyone: list[Request], operator_user: str) -> float:
    """The operator's share of the response bytes of a window: per (verb, resource), the window's bytes times
    the operator's share of those requests (GET and LIST carry the same objects whoever asks) (pure)."""
    total = Counter((r.verb, r.resource) for r in everyone)
    own = Counter((r.verb, r.resource) for r in everyone if r.user == operator_user)
    return sum(sizes.get(key, 0.0) * mine / total[key] for key, mine in own.items())


def new_connections(log_text: str) -> Counter[str]:
    """Connections opened per application_name, from `log_connections` lines (pure)."""
    return Counter(match[1] for match in _AUTHORIZED.finditer(log_text))


def reconciles(text: str) -> float:
    return sum(value for _, value in samples(text, "fireflow_operator_reconciles_total"))


def reconcile_requests(text: str) -> Counter[str]:
    """Reconciles asked for so far, by trigger (pool, child, requeue, timer) (pure)."""
    found: Counter[str] = Counter()
    for labels, value in samples(text, "fireflow_operator_reconcile_requests_total"):
        found[labels.get("trigger", "")] += int(value)
    return found


def status_writes(log_text: str) -> Counter[str]:
    """The status fields the operator's writes changed, counted over its log lines (pure)."""
    fields: Counter[str] = Counter()
    for match in _STATUS_WRITTEN.finditer(log_text):
        fields.update(path.strip() for path in match[2].split(", "))
    return fields


def read_transactions(url: str, databases: list[str]) -> dict[str, int]:
    """Committed and rolled back transactions so far per database (PostgreSQL's cumulative statistics)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT datname, xact_commit + xact_rollback FROM pg_stat_database WHERE datname = ANY(%s)", (databases,)
        ).fetchall()
    return {str(name): int(count) for name, count in rows}


@dataclass(frozen=True)
class ProcessUsage:
    cpu_seconds: float
    rss_mib: float


def read_process(pid: int) -> ProcessUsage:
    """CPU seconds so far (user + system, the process's own threads) and resident memory now."""
    cpu = process_cpu_seconds(pid)
    if cpu is None:
        raise RuntimeError(f"the operator (pid {pid}) has exited")
    rss_kib = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return ProcessUsage(cpu, rss_kib / 1024)


def read_url(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        return str(response.read().decode())


class LogTail:
    """What a log file gained since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def read(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        return data.decode(errors="replace")

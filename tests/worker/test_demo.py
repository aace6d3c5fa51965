"""`examples/demo.py` as a user runs it: `--help` starts nothing, and whatever ends it (its reader gone, a hang-up,
SIGTERM) it removes its PostgreSQL and its workers exactly as on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.proc import REPO_ROOT

DEMO = str(Path(REPO_ROOT) / "examples" / "demo.py")
DATA_LINE = "its data in "
READY_LINE = "two workers ready"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIREFLOW_", "DBOS_", "DATABASE_URL"))}
    return {**env, **extra}


def _started(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/<pid>/stat): tells it from a later one with the same id."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _descendants(root: int) -> dict[int, str]:
    """Every living descendant of `root`, with its start time."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found and (started := _started(pid)) is not None:
                found[pid] = started
                frontier.append(pid)
    return found


def test_should_print_its_usage_and_start_nothing_for_help(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, DEMO, "--help"],
        env=_env(TMPDIR=str(scratch)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: demo.py")
    assert "[demo]" not in result.stdout
    assert list(scratch.iterdir()) == []  # no log directory, no PostgreSQL data


@pytest.mark.parametrize("ending", [signal.SIGINT, signal.SIGPIPE, signal.SIGHUP, signal.SIGTERM], ids=lambda s: s.name)
def test_should_remove_its_postgres_and_workers_whatever_ends_it(ending: signal.Signals, tmp_path: Path) -> None:
    with (tmp_path / "stderr").open("w") as stderr:
        demo = subprocess.Popen(
            [sys.executable, DEMO], env=_env(), stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
        )
    children: dict[int, str] = {}
    try:
        assert demo.stdout is not None
        data_dir: Path | None = None
        for line in demo.stdout:
            if DATA_LINE in line:
                data_dir = Path(line.split(DATA_LINE, 1)[1].strip())
            if READY_LINE in line:
                break
        assert data_dir is not None and data_dir.exists(), (tmp_path / "stderr").read_text()
        children = _descendants(demo.pid)
        assert len(children) >= 3  # PostgreSQL (and its own processes) and the two workers
        if ending == signal.SIGPIPE:
            demo.stdout.close()  # as `| head` does once it has read its lines: the demo's next write fails
        else:
            threading.Thread(target=demo.stdout.read, daemon=True).start()  # the reader stays
            demo.send_signal(ending)
        assert demo.wait(timeout=180) == 128 + ending
        left = {pid for pid, started in children.items() if _started(pid) == started}
        assert left == set(), f"still running: {left}; {(tmp_path / 'stderr').read_text()}"
        assert not data_dir.exists()
    finally:
        demo.kill()
        for pid, started in children.items():
            if _started(pid) == started:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

"""`.ci/bootstrap` says what it does: a progress line per step (`[bootstrap Ns] ...`), pip's lines per package
and its errors, and one sentence when it cannot go on. Run on a copy of the repository's pins with a prepared
`.venv` whose pip is a stand-in, so that nothing is installed."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"^\[bootstrap \d+s\] ")


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    (tmp_path / ".ci").mkdir()
    for name in (".ci/bootstrap", ".ci/constraints.txt", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def _prepared_venv(clone: Path, pip_script: str, *, stamp_current: bool) -> Path:
    """A `.venv` with a real python and a pip that prints `pip_script`'s lines (and records its arguments)."""
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    pip = bin_dir / "pip"
    pip.write_text(f'#!/usr/bin/env bash\necho "$@" > "{clone}/pip-args"\n{pip_script}\n')
    pip.chmod(0o755)
    wanted = hashlib.sha256((clone / "pyproject.toml").read_bytes() + (clone / ".ci/constraints.txt").read_bytes())
    stamp = clone / ".venv" / ".fireflow-installed"
    stamp.write_text(wanted.hexdigest() + "\n" if stamp_current else "an older install\n")
    return stamp


def _bootstrap(clone: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(clone / ".ci" / "bootstrap")],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _progress(stderr: str) -> list[str]:
    """The lines with their `[bootstrap Ns]` prefix taken off (the seconds vary)."""
    return [PROGRESS.sub("[bootstrap] ", line) for line in stderr.splitlines()]


def test_should_say_nothing_when_the_venv_is_current(clone: Path) -> None:
    _prepared_venv(clone, "exit 9", stamp_current=True)
    done = _bootstrap(clone)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (clone / "pip-args").exists()


def test_should_say_each_step_and_pips_lines_per_package_when_the_pins_changed(clone: Path) -> None:
    stamp = _prepared_venv(
        clone,
        "echo 'Collecting dbos==3.4.0'; echo '  Downloading dbos-3.4.0.whl (250 kB)'; "
        "echo 'Successfully installed dbos-3.4.0'",
        stamp_current=False,
    )
    pins = sum("==" in line for line in (clone / ".ci/constraints.txt").read_text().splitlines())
    done = _bootstrap(clone)
    assert done.returncode == 0, done.stderr
    assert _progress(done.stderr) == [
        f"[bootstrap] installing the project and its {pins} pinned packages from PyPI (a minute or two the first time)",
        "  Collecting dbos==3.4.0",
        "  Successfully installed dbos-3.4.0",
        "[bootstrap] installed",
    ]
    assert "-c .ci/constraints.txt -e .[dev]" in (clone / "pip-args").read_text()
    assert stamp.read_text() != "an older install\n"
    assert _bootstrap(clone).stderr == ""  # and quiet again


def test_should_say_that_pip_failed_with_its_error_and_keep_its_status(clone: Path) -> None:
    stamp = _prepared_venv(
        clone,
        "echo 'Collecting nosuch==9'; echo 'ERROR: No matching distribution found for nosuch==9'; exit 3",
        stamp_current=False,
    )
    done = _bootstrap(clone)
    assert done.returncode == 3
    assert _progress(done.stderr)[1:] == [
        "  Collecting nosuch==9",
        "  ERROR: No matching distribution found for nosuch==9",
        "[bootstrap] pip failed (exit status 3); the lines above say which package",
    ]
    assert stamp.read_text() == "an older install\n"  # the next run tries again


@pytest.mark.parametrize("python", ["/bin/false", "/no/such/python"])
def test_should_say_in_one_sentence_that_python_cannot_make_the_venv(clone: Path, python: str) -> None:
    done = _bootstrap(clone, PYTHON=python)
    assert done.returncode == 1
    assert _progress(done.stderr) == [
        f"[bootstrap] cannot create .venv: '{python}' is not a Python 3.11 to 3.13; set PYTHON to one (e.g. "
        "PYTHON=python3.11)"
    ]
    assert not (clone / ".venv").exists()

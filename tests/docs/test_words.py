"""The product speaks of itself: no tracked text file uses the words of the way it is being built (its units of
work, its authors, issue numbers; see docs/development.md, "The product's words"). The allow-list names the few
places where such a phrase means something else."""

from __future__ import annotations

import re
import subprocess

from tests.docs.generate import REPO_ROOT

# The units of the work and what it grew from, as the phrases below use them.
WORK_UNITS = ("stop", "session", "turn")
ORIGIN = "seed"
BETRAYING = re.compile(
    r"|".join(
        (
            rf"\b(?:this|next|previous|earlier|later) (?:{'|'.join(WORK_UNITS)})\b",
            rf"\bthe {ORIGIN}\b",
            rf"\b{ORIGIN} (?:issue|brief|task)\b",
            r"\bthe lead\b",
            r"\bhelpers'",
            r"\bhelper's\b",
            r"\bother helpers?\b",
            r"\bthis branch\b",
            r"\bissues? #?\d+\b",
        )
    ),
    re.IGNORECASE,
)
# Phrases that match but mean something else, anywhere (`*`) or in one file.
ALLOWED: dict[str, tuple[str, ...]] = {
    "*": (
        "gives up the lead",  # a leader's Lease
    ),
    "docs/development.md": ('"the lead"',),
}
NOT_CHECKED = {"tests/docs/test_words.py"}  # the phrases themselves


def tracked_text_files() -> list[str]:
    """Every file git tracks or would track (untracked but not ignored), text only."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({path for path in listed.split("\0") if path and path not in NOT_CHECKED})


def betraying_lines(path: str, text: str) -> list[str]:
    allowed = ALLOWED["*"] + ALLOWED.get(path, ())
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        checked = line
        for phrase in allowed:
            checked = checked.replace(phrase, "")
        if match := BETRAYING.search(checked):
            found.append(f"{path}:{number}: {match[0]!r} in {line.strip()[:160]!r}")
    return found


def test_should_find_the_betraying_phrases_and_pass_the_allowed_ones() -> None:
    cases = {
        "Measured while other helpers ran their test suites.": True,
        "Against the goals of issue 24.": True,
        "Before the lead's operator changes.": True,
        **{f"Written in this {unit}, from the {ORIGIN}.": True for unit in WORK_UNITS},
        f"Grown from the {ORIGIN} brief.": True,
        "While this branch's own tests ran beside it.": True,
        "A leader that could not renew within this gives up the lead.": False,
        "One server per pytest session; a PostgreSQL session; a worker that stops at once.": False,
        "Thin I/O helpers over the Kubernetes API; the test helpers; independent branches of a graph.": False,
    }
    assert {text: bool(betraying_lines("docs/x.md", text)) for text in cases} == cases


def test_should_not_use_the_words_of_our_way_of_working_in_any_tracked_file() -> None:
    found = []
    files = tracked_text_files()
    assert "README.md" in files and "worker/fireflow_worker/engine.py" in files
    for path in files:
        try:
            text = (REPO_ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted but not yet staged
        found += betraying_lines(path, text)
    assert not found, "say it in the product's words (docs/development.md):\n" + "\n".join(found)

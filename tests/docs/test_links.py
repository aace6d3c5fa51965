"""Every relative link of the documentation leads somewhere: to a file of the repository and, with a
`#fragment`, to a heading of that page (as GitHub makes anchors from headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.generate import REPO_ROOT

TOP = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", REPO_ROOT / "charts" / "fireflow-operator" / "README.md"]
PAGES = sorted([*TOP, *(REPO_ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if match := re.match(r"^#{1,6} +(.*)$", line):
            found.add(re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(CODE.sub("", FENCE.sub("", page.read_text())))


def test_should_make_anchors_as_github_does() -> None:
    page = REPO_ROOT / "docs" / "concepts.md"
    assert {"the-three-promises-and-when-they-hold", "health-metrics-shutdown"} <= anchors(page)
    assert "fireflow-worker-migrate" in anchors(REPO_ROOT / "docs" / "cli.md")


IDS = [str(p.relative_to(REPO_ROOT)) for p in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_should_close_every_code_block(page: Path) -> None:
    fences = [n for n, line in enumerate(page.read_text().splitlines(), start=1) if line.startswith("```")]
    assert len(fences) % 2 == 0, f"{page.relative_to(REPO_ROOT)}: the code block of line {fences[-1]} never ends"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_should_lead_somewhere_when_a_link_is_relative(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target} (no heading #{fragment} in {resolved.relative_to(REPO_ROOT)})")
    assert not broken, f"{page.relative_to(REPO_ROOT)} links to: " + "; ".join(broken)


REPO_PATH = re.compile(r"`((?:tests|worker|operator|charts|examples|benchmarks|crds|docs|\.ci)/[^`\s]*)`")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_should_name_only_files_that_exist(page: Path) -> None:
    named = {m for m in REPO_PATH.findall(page.read_text()) if not re.search(r"[<>*{]", m)}
    missing = sorted(path for path in named if not (REPO_ROOT / path.rstrip("/")).exists())
    assert not missing, f"{page.relative_to(REPO_ROOT)} names files that do not exist: {', '.join(missing)}"

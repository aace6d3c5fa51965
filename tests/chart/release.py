"""The project's one version and everything that must carry it (pure reads of the repository's files).

pyproject.toml's `version` is the release's: the chart's `version` and `appVersion`, the images the chart and
the examples name by default and `.ci/release`'s tags all follow it. `python -m tests.chart.release` prints
the version, or each file that disagrees (exit 1); `.ci/release` runs it before it builds anything.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
CHART_DIR = REPO_ROOT / "charts" / "fireflow-operator"
# The files a user copies an image reference from, and what they must name.
IMAGE_REFERENCES = re.compile(r"\b(fireflow-(?:worker|operator)):([0-9][0-9A-Za-z.+-]*)")
USER_FACING = ("examples/*.yaml", "README.md", "docs/*.md", "charts/fireflow-operator/README.md")


def project_version(root: Path = REPO_ROOT) -> str:
    version: str = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    return version


def mismatches(root: Path = REPO_ROOT) -> list[str]:
    """One line per place whose version is not the project's."""
    version = project_version(root)
    chart = yaml.safe_load((root / "charts" / "fireflow-operator" / "Chart.yaml").read_text())
    values = yaml.safe_load((root / "charts" / "fireflow-operator" / "values.yaml").read_text())
    problems = [
        f"charts/fireflow-operator/Chart.yaml: {key} is {chart.get(key)!r}, the project's version is {version!r}"
        for key in ("version", "appVersion")
        if str(chart.get(key)) != version
    ]
    # An empty tag means the chart's appVersion (templates/_helpers.tpl), the only default that stays in step.
    for key, value in (("image.tag", values["image"]["tag"]), ("notes.workerImage", values["notes"]["workerImage"])):
        if value:
            problems.append(f"charts/fireflow-operator/values.yaml: {key} is {value!r}; leave it empty (appVersion)")
    for pattern in USER_FACING:
        for path in sorted(root.glob(pattern)):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                for image, tag in IMAGE_REFERENCES.findall(line):
                    if tag.split("-")[0] != version:
                        where = path.relative_to(root)
                        problems.append(f"{where}:{number}: {image}:{tag}, the project's version is {version!r}")
    return problems


def main() -> int:
    problems = mismatches()
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        print("error: bump pyproject.toml's version and the chart's version and appVersion together", file=sys.stderr)
        return 1
    print(project_version())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every condition reason the operator can write is explained in docs/troubleshooting.md: the predeclared
reasons of `fireflow_operator.api.conditions` (the page's table is written by hand; this keeps it whole)."""

from __future__ import annotations

import re

from fireflow_operator.api import conditions
from tests.docs.generate import REPO_ROOT


def test_should_explain_every_condition_reason() -> None:
    page = (REPO_ROOT / "docs" / "troubleshooting.md").read_text()
    table = {cell for row in page.splitlines() if row.startswith("| `") for cell in re.findall(r"`(\w+)`", row)}
    reasons = {value for name, value in vars(conditions).items() if name.startswith("REASON_")}
    assert reasons, "no REASON_ constants in fireflow_operator.api.conditions"
    missing = sorted(reasons - table)
    assert not missing, f"docs/troubleshooting.md does not explain {', '.join(missing)}; add a row for each"

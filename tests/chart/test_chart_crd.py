"""One CRD, three places: `crds/` (for `kubectl apply` users), the chart's `files/` copy (helm cannot read
outside the chart), and what the chart renders. The first two must be byte-identical to the generator's
output; the render must be that file with only the chart's labels and the keep annotation spliced in."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fireflow_operator.api.crd import render_crd
from tests.chart.chart import CHART_CRD_FILE, CRD_FILE, template

REGENERATE = "regenerate both copies from the repository root: python -m fireflow_operator.api.crd --write"


def test_should_keep_the_charts_crd_byte_identical_to_crds() -> None:
    assert CHART_CRD_FILE.read_bytes() == CRD_FILE.read_bytes(), REGENERATE


def test_should_keep_the_charts_crd_equal_to_the_generated_one() -> None:
    assert CHART_CRD_FILE.read_text() == render_crd(), REGENERATE


@pytest.mark.usefixtures("helm_bin")
def test_should_render_the_crd_file_with_only_labels_and_the_keep_annotation_added(tmp_path: Path) -> None:
    rendered = template(tmp_path, {}, release="ff", show_only="templates/crd.yaml")
    header = "---\n# Source: fireflow-operator/templates/crd.yaml\n"
    assert rendered.startswith(header)
    body = rendered.removeprefix(header)
    original = CRD_FILE.read_text()
    # Byte-level: dropping the spliced block (annotations and labels after metadata.name) gives the file back.
    lines = body.splitlines(keepends=True)
    start = lines.index("  name: fireflowworkerpools.fireflow.persistent.ai\n") + 1
    end = lines.index("spec:\n")
    spliced = "".join(lines[start:end])
    assert "".join(lines[:start] + lines[end:]) == original
    added = yaml.safe_load("metadata:\n" + spliced)["metadata"]
    assert set(added) == {"annotations", "labels"}
    assert added["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert added["labels"]["app.kubernetes.io/instance"] == "ff"
    # And as objects: the same CRD as crds/, plus metadata.
    parsed = yaml.safe_load(body)
    for key in ("annotations", "labels"):
        del parsed["metadata"][key]
    assert parsed == yaml.safe_load(original)

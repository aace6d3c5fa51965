"""The reference pages say what the code says: their generated blocks are exactly what the generator writes
from the models, values.yaml, values.schema.json and the CRD (`generate.py`), and the generator refuses a
setting nobody described."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from tests.docs import generate


def test_should_match_the_code_when_the_generated_pages_are_committed() -> None:
    stale = generate.stale_pages()
    assert not stale, f"{', '.join(stale)} differ from what the code says; regenerate with: {generate.COMMAND}"


def test_should_name_the_command_when_a_page_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = generate.generated_pages()
    for page, text in pages.items():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        changed = text.replace("`DBOS_WORKER_CONCURRENCY` | `50`", "`DBOS_WORKER_CONCURRENCY` | `40`")
        (tmp_path / page).write_text(changed)
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    assert generate.main(["--check"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"docs/configuration.md differs from what the code says; regenerate it with: {generate.COMMAND}"
    )
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    page = (tmp_path / "docs" / "configuration.md").read_text()
    assert "`DBOS_WORKER_CONCURRENCY` | `50` | integer 1 to 10 000 |" in page


class _Model(BaseModel):
    known: int = Field(3, alias="FIREFLOW_KNOWN", ge=1, le=9)
    new: bool = Field(False, alias="FIREFLOW_NEW")


def test_should_refuse_a_variable_without_a_description() -> None:
    with pytest.raises(generate.GenerateError, match=r"^no description of FIREFLOW_NEW: add one to tests/docs/desc"):
        generate.env_rows(_Model, {"FIREFLOW_KNOWN": "Known."}, where="TEST")


def test_should_refuse_a_description_of_a_variable_nobody_reads() -> None:
    sentences = {"FIREFLOW_KNOWN": "Known.", "FIREFLOW_NEW": "New.", "FIREFLOW_GONE": "Gone."}
    with pytest.raises(generate.GenerateError, match=r"^FIREFLOW_GONE described in .* but not read$"):
        generate.env_rows(_Model, sentences, where="TEST")


def test_should_take_defaults_and_ranges_from_the_model() -> None:
    rows = generate.env_rows(_Model, {"FIREFLOW_KNOWN": "Known.", "FIREFLOW_NEW": "New."}, where="TEST")
    assert rows == [
        ["`FIREFLOW_KNOWN`", "`3`", "integer 1 to 9", "Known."],
        ["`FIREFLOW_NEW`", "`false`", "`true` or `false`", "New."],
    ]


def test_should_read_the_documented_keys_of_a_values_file() -> None:
    text = "\n".join([
        "# -- Replicas,",
        "# two lines.",
        "replicaCount: 1",
        "image:",
        "  # -- The tag.",
        "  tag: ''",
        "  list:",
        "    - a",
        "other: 2",
    ])  # fmt: skip
    assert list(generate.documented_values(text)) == [
        ("replicaCount", "Replicas, two lines."),
        ("image.tag", "The tag."),
    ]


def test_should_describe_every_crd_field_the_schema_has() -> None:
    page = generate.crd_fields("spec")
    schema = generate._crd_schema()["properties"]["spec"]
    for name, field in schema["properties"].items():
        assert f"| `spec.{name}` |" in page
        assert field.get("description", "") in page

"""The line `fireflow-worker migrate` prints, and the operator reads from its Job's termination message (pure).

One JSON object on one line, keys sorted, absent values left out; the operator takes the last line of the
message that parses as an object, so DBOS's own lines before it do no harm.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

OK = "ok"
FAILED = "failed"


@dataclass
class MigrationSummary:
    action: str  # "plan" or "apply"
    current_version: int | None = None  # the database's DBOS schema version (after an apply: the new one)
    previous_version: int | None = None  # apply: the version before it ran
    required_version: int | None = None  # the schema version the image's DBOS requires
    migration_needed: bool | None = None  # plan: the schema is behind; apply: it was, before this apply
    online_safe: bool | None = None  # plan: the step can be applied while older workers keep serving
    unsafe: list[str] | None = None  # plan: the statements that are not, shortened (at most five)
    result: str = OK
    attempts: int = 0
    error: str | None = None
    project_objects: str | None = None  # "installed" or "present": the project's triggers

    def line(self) -> str:
        data = {key: value for key, value in asdict(self).items() if value is not None}
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @property
    def ok(self) -> bool:
        return self.result == OK

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> MigrationSummary:
        """The summary a mapping holds; keys of a newer worker that this reader does not know are left out."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known and value is not None})

    @classmethod
    def from_message(cls, message: str) -> MigrationSummary | None:
        """The summary in a Job's termination message, or None when it holds none."""
        for text in reversed(message.splitlines()):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and isinstance(parsed.get("action"), str):
                return cls.from_mapping(parsed)
        return None

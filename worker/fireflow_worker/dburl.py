"""Conversions between the URL forms in play: users give `postgresql://`, SQLAlchemy (inside DBOS) may be
given `postgresql+psycopg://`, libpq wants no driver suffix."""

from __future__ import annotations

import re


def libpq_url(url: str) -> str:
    """The URL as libpq/psycopg accept it."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)


def redact_url(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)

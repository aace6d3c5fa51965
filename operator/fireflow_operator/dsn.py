"""The database URL a pool's Secret holds: normalised for libpq, and kept out of every message (pure).

Users write `postgresql://`, `postgres://`, SQLAlchemy's `postgresql+psycopg://`, or a libpq key=value
string; the password may sit in the user-info part (percent-encoded or not) or in the query
(`?password=...`). libpq's own parser reads them all, so the password to redact is the one it finds.
"""

from __future__ import annotations

import re
import urllib.parse

from psycopg.conninfo import conninfo_to_dict

_SCHEME = re.compile(r"^postgres(ql)?(\+\w+)?://")
REDACTED = "***"


def libpq_dsn(url: str) -> str:
    """The connection string as libpq accepts it (SQLAlchemy driver suffixes removed)."""
    return _SCHEME.sub("postgresql://", url.strip())


def password_of(url: str) -> str | None:
    """The password libpq would send, or None (also when the string does not parse)."""
    try:
        password = conninfo_to_dict(libpq_dsn(url)).get("password")
    except Exception:  # an unparsable string has no password we could find
        return None
    return str(password) if password else None


def redact(text: str, secret: str | None) -> str:
    """`text` with the secret, its password in every spelling, and any URL password replaced."""
    if secret:
        spellings = {secret.strip()}
        password = password_of(secret)
        if password:
            spellings |= {password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)}
        for spelling in sorted(spellings, key=len, reverse=True):
            if spelling:
                text = text.replace(spelling, REDACTED)
    text = re.sub(r"(://[^/?#\s]*?:)[^/?#\s]*@", rf"\1{REDACTED}@", text)
    return re.sub(r"(?i)(password\s*=\s*)('[^']*'|[^\s&]+)", rf"\1{REDACTED}", text)

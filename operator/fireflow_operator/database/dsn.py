"""The database URL a pool's Secret holds: normalised for libpq, and kept out of every message (pure).

The worker's `dburl` module owns the rules (every URL form, percent-encoded or not, `?password=`,
key=value strings, ambiguous user info); the operator applies the same ones to what it writes.
"""

from __future__ import annotations

import functools
import urllib.parse

from fireflow_contract.dburl import libpq_url, redact_url, secrets_of

REDACTED = "***"


def libpq_dsn(url: str) -> str:
    """The connection string as libpq accepts it (SQLAlchemy driver suffixes removed)."""
    return libpq_url(url.strip())


def password_of(url: str) -> str | None:
    """The password libpq would send, or None (also when the string does not parse)."""
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 - one use

    try:
        password = conninfo_to_dict(libpq_dsn(url)).get("password")
    except Exception:  # an unparsable string has no password we could find
        return None
    return str(password) if password else None


@functools.lru_cache(maxsize=1024)
def _spellings(secret: str) -> tuple[str, ...]:
    """The secret and its password in every spelling, longest first (worked out once per URL: every condition
    of every reconcile is redacted)."""
    spellings = {secret.strip(), *secrets_of(secret)}
    password = password_of(secret)  # secrets_of leaves out short ones, for logs; a message hides them too
    if password:
        spellings |= {password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)}
    return tuple(spelling for spelling in sorted(spellings, key=len, reverse=True) if spelling)


def redact(text: str, secret: str | None) -> str:
    """`text` with the secret, its password in every spelling, and any URL password replaced."""
    if secret:
        for spelling in _spellings(secret):
            text = text.replace(spelling, REDACTED)
    return redact_url(text)

"""Database URLs: the forms in play, their checks, and keeping their passwords out of every output.

Users give `postgresql://` or `postgres://` (libpq's URL forms), SQLAlchemy inside DBOS may be given
`postgresql+psycopg://`, libpq wants no driver suffix. A password can sit in the user info
(`user:pw@host`), in the query (`?password=pw`) or, in libpq's key=value form, after `password=`; it may hold
any character, percent-encoded or not. `redact_url` hides it in all of these, wherever it appears in a text;
`SecretMask` also hides the exact passwords of the URLs a process uses, in every log record it handles (DBOS's
own "Initializing DBOS system database with URL" line hides only the user-info password).
"""

from __future__ import annotations

import contextlib
import logging
import re
import urllib.parse
from collections.abc import Iterable

import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict

POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
# `?password=...`, `&sslpassword=...` in a URL's query.
_QUERY_PASSWORD = re.compile(r"(?i)([?&][a-z_]*password=)[^&#\s'\"]*")
# `password=...` / `password = '...'` in a key=value connection string.
_KEYWORD_PASSWORD = re.compile(r"(?i)(?<![?&])(\b[a-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"]+)")
# `scheme://` and the token after it: user info ends at the token's *last* `@`, since an unencoded `@`
# in a password is the usual mistake (a later `@` in the query only widens what is hidden).
_URL_TOKEN = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(\S+)")
_WHOLE_URL = re.compile(r"(?is)([a-z][a-z0-9+.-]*://)(.+)")
# Passwords shorter than this are not masked as bare strings (a one-letter password would mask every "a").
_SHORTEST_MASKED = 4


def libpq_url(url: str) -> str:
    """The URL as libpq/psycopg accept it."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, token = match.group(1), match.group(2)
    if "@" not in token:
        return match.group(0)
    at = token.rindex("@")
    userinfo = token[:at]
    if ":" not in userinfo:
        return match.group(0)
    return f"{scheme}{userinfo[: userinfo.index(':')]}:***{token[at:]}"


def redact_url(text: str) -> str:
    """`text` with every database password replaced by `***`, in any URL or key=value form it holds.

    A text that is one URL is read as a whole (its password may hold spaces); in a longer text, a URL
    ends at the first space.
    """
    if "://" not in text and "password" not in text.casefold():
        return text  # what every pattern below needs (most log lines have neither): 1 us, not 25
    text = _QUERY_PASSWORD.sub(r"\1***", text)
    text = _KEYWORD_PASSWORD.sub(r"\1***", text)
    whole = _WHOLE_URL.fullmatch(text)
    if whole is not None:
        return _redact_userinfo(whole)
    return _URL_TOKEN.sub(_redact_userinfo, text)


def secrets_of(url: str) -> set[str]:
    """The password of `url` as libpq and SQLAlchemy read it, encoded and decoded (for `SecretMask`)."""
    found: set[str] = set()
    with contextlib.suppress(Exception):  # not a URL libpq reads: nothing of it to mask
        found.add(str(conninfo_to_dict(libpq_url(url)).get("password") or ""))
    with contextlib.suppress(Exception):  # not a URL SQLAlchemy reads
        parsed = sa.make_url(url)
        found.add(parsed.password or "")
        query_password = parsed.query.get("password")
        found.update([query_password] if isinstance(query_password, str) else list(query_password or ()))
    whole = _WHOLE_URL.fullmatch(url)  # the raw text, as typed: percent-encoded or not
    rest = whole.group(2) if whole is not None else ""
    userinfo = rest[: rest.rfind("@")] if "@" in rest else ""
    if ":" in userinfo:
        found.add(userinfo.split(":", 1)[1])
    found |= {urllib.parse.quote(secret, safe="") for secret in found} | {urllib.parse.unquote(s) for s in found}
    return {secret for secret in found if len(secret) >= _SHORTEST_MASKED}


def url_problem(url: str) -> str | None:
    """Why a postgresql:// URL cannot be used safely, or None. The reason never quotes the URL's parts.

    libpq and SQLAlchemy (inside DBOS) must read the same user, password, host, port and database from it:
    where they differ (an unencoded `@`, `/`, `?` or `#` in the password), a connection error would show a
    piece of the password as a host or a database name.
    """
    encode = "percent-encode special characters in the user name and password (@ %40, : %3A, / %2F, ? %3F, # %23)"
    try:
        libpq = conninfo_to_dict(libpq_url(url))
        alchemy = sa.make_url(url)
    except Exception:
        return f"is not a PostgreSQL URL that libpq can read; {encode}"
    host = str(libpq.get("host") or "")
    alchemy_password = alchemy.password or alchemy.query.get("password") or None
    same = (
        (libpq.get("user") or None) == (alchemy.username or alchemy.query.get("user") or None)
        and (libpq.get("password") or None) == alchemy_password
        and (libpq.get("dbname") or None) == (alchemy.database or alchemy.query.get("dbname") or None)
        and (not alchemy.host or host == alchemy.host)
    )
    if "@" in host or not same:
        return f"is ambiguous: libpq and SQLAlchemy would read different user, password, host or database; {encode}"
    if libpq.get("port") and not str(libpq["port"]).replace(",", "").isdigit():
        return f"has a port that is not a number; {encode}"
    return None


class SecretMask(logging.Filter):
    """Rewrites every log record it sees so that no password of the given URLs (or any URL) shows."""

    def __init__(self, urls: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for url in urls for s in secrets_of(url)}, key=len, reverse=True)

    def mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return redact_url(text)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.mask(record.getMessage())
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def mask_logs(urls: Iterable[str], loggers: Iterable[str] = ("dbos",)) -> SecretMask:
    """Install a SecretMask on the root logger's handlers and on the named loggers and their handlers."""
    mask = SecretMask(urls)
    for handler in logging.getLogger().handlers:
        handler.addFilter(mask)
    for name in loggers:
        logger = logging.getLogger(name)
        logger.addFilter(mask)
        for handler in logger.handlers:
            handler.addFilter(mask)
    return mask

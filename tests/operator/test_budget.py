"""The connection budget (pure): every limit the server enforces, others' usage smoothed, secrets redacted."""

from __future__ import annotations

import pytest

from fireflow_operator.capacity.budget import PoolNeed, compute_budget, pool_need, same_decision
from fireflow_operator.capacity.usage import UsageHistory
from fireflow_operator.database.dbprobe import count_others, pool_connection_prefix
from fireflow_operator.database.dsn import libpq_dsn, password_of, redact
from fireflow_operator.database.facts import DatabaseFacts, Usage

NO_ONE = Usage(0, 0, 0)


def _facts(**overrides: object) -> DatabaseFacts:
    base: dict[str, object] = {
        "server": "pg-1", "database": "exec", "role": "app", "superuser": False, "max_connections": 100,
        "superuser_reserved": 3, "reserved": 0, "database_limit": -1, "role_limit": -1, "others": Usage(7, 7, 7),
        "schema_version": 125, "foreign_applications": (),
    }  # fmt: skip
    return DatabaseFacts(**{**base, **overrides})  # type: ignore[arg-type]


def test_should_budget_every_pool_on_the_server() -> None:
    others = [
        PoolNeed("pg-1", "exec", "app", 11),
        PoolNeed("pg-1", "other-db", "other", 11),
        PoolNeed("pg-2", "x", "y", 50),
    ]
    budget = compute_budget(_facts(), per_replica=11, headroom=10, other_pools=others, others=Usage(6, 6, 6))
    # 100 - 3 - 10 - 6 - 22 (both pools on this server, whichever database) - 3 (migration Job) - 1 (operator) = 55
    assert (budget.max_replicas, budget.limiting.name) == (5, "server")
    assert budget.explain(8) == (
        "8 replicas need 88 connections (11 each) but only 55 fit: max_connections 100 - reserved 3 - "
        "headroom 10 - others in use 6 - other pools 22 - migration Job 3 - operator 1; holding at 5"
    )


def test_should_stay_within_the_database_and_role_connection_limits() -> None:
    on_db = [PoolNeed("pg-1", "exec", "other-role", 6)]
    db = compute_budget(_facts(database_limit=30, others=Usage(7, 2, 1)), per_replica=5, headroom=0,
                        other_pools=on_db, others=Usage(7, 2, 1))  # fmt: skip
    # 30 - 2 on this database - 6 of the other pool on it - 3 - 1 (the operator's connection) = 18 -> 3 replicas of 5
    assert (db.max_replicas, db.limiting.name) == (3, "database")
    assert "database 'exec' CONNECTION LIMIT 30 - others in use 2 - other pools 6 - migration Job 3" in db.explain(9)
    role = compute_budget(_facts(role_limit=12), per_replica=5, headroom=0, other_pools=[], others=Usage(7, 7, 1))
    assert (role.max_replicas, role.limiting.name) == (1, "role")  # 12 - 1 - 3 = 8
    superuser = compute_budget(_facts(role_limit=12, database_limit=5, superuser=True), per_replica=5, headroom=0,
                               other_pools=[], others=NO_ONE)  # fmt: skip
    assert superuser.limiting.name == "server"  # neither limit applies to a superuser
    assert superuser.as_status(2, 2)["limitedBy"] == "server"


def test_should_write_no_status_when_only_others_usage_moved_within_the_budget() -> None:
    before = compute_budget(_facts(), per_replica=5, headroom=0, other_pools=[], others=Usage(7, 7, 7))
    after = compute_budget(_facts(), per_replica=5, headroom=0, other_pools=[], others=Usage(12, 12, 12))
    assert before.max_replicas != after.max_replicas  # clients came: one replica fewer would fit
    assert same_decision(before.as_status(2, 2), after.as_status(2, 2))  # the pool runs its 2 all the same
    held = (before.as_status(30, before.max_replicas), after.as_status(30, after.max_replicas))
    assert not same_decision(*held)  # held back by the budget: what fits is the decision
    assert not same_decision(before.as_status(2, 2), before.as_status(3, 3))


def test_should_read_another_pools_need_from_its_status() -> None:
    assert pool_need({"connectionBudget": {"server": "pg-1", "database": "d", "role": "r", "needed": 33}}) == PoolNeed(
        "pg-1", "d", "r", 33
    )
    assert pool_need({"connectionBudget": {"database": "host:5432/d", "needed": 33}}) is None  # an older format
    assert pool_need({}) is None


def test_should_count_as_others_only_what_is_not_a_known_pool_or_the_operators_connection_here() -> None:
    prefixes = [pool_connection_prefix("team-a", "workers"), pool_connection_prefix("n" * 40, "p" * 20)]
    cut = ("fireflow-worker:" + "n" * 40 + "." + "p" * 20 + "-3")[:63]
    rows = [
        ("app", "exec", "fireflow-worker:team-a.workers-0"),  # a known pool
        ("app", "exec", "fireflow-worker:team-a.workers-12"),
        ("app", "exec", cut),  # a known pool, its name cut at 63 bytes
        ("app", "exec", "fireflow-worker:team-b.workers-0"),  # a pool nobody here manages: counted
        ("app", "exec", "fireflow-operator"),  # the operator's connection to this database: reserved
        ("app", "orders", "fireflow-operator"),  # its connection to another database: counted
        ("app", "exec", "fireflow-migration"),
        ("app", "exec", "psql"),
        ("bob", "exec", None),
        ("app", "other", ""),
    ]
    assert count_others(rows, database="exec", role="app", pool_prefixes=prefixes) == Usage(5, 3, 4)


def test_should_grow_on_the_highest_usage_and_shrink_on_the_lowest_over_the_window() -> None:
    history = UsageHistory(window_seconds=60)
    first = history.record("k", Usage(5, 5, 5), now=0)
    assert (first.high, first.low, first.full_window) == (Usage(5, 5, 5), Usage(5, 5, 5), False)
    burst = history.record("k", Usage(40, 40, 40), now=10)
    assert (burst.high.server, burst.low.server, burst.full_window) == (40, 5, False)
    calm = history.record("k", Usage(6, 6, 6), now=65)
    assert (calm.high.server, calm.low.server, calm.full_window) == (40, 5, True)
    later = history.record("k", Usage(6, 6, 6), now=140)  # the burst left the window
    assert (later.high.server, later.low.server) == (6, 6)
    lasting = [history.record("k", Usage(50, 50, 50), now=t).low.server for t in (150, 180, 205, 215)]
    assert lasting == [6, 6, 6, 50]  # only once the window holds nothing lower does the low estimate rise


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql://u:s3cr%40t%2Fx@db:5432/exec", "s3cr@t/x"),
        ("postgres://u:hunter2@db/exec?sslmode=require", "hunter2"),
        ("postgresql+psycopg://u:p%25w@db/exec", "p%w"),
        ("postgresql://db/exec?user=u&password=q%20w", "q w"),
        ("host=db dbname=exec user=u password='a b\\'c'", "a b'c"),
        ("postgresql://u@db/exec", None),
        ("not a url at all ===", None),
    ],
)
def test_should_find_the_password_in_every_form_libpq_accepts(url: str, password: str | None) -> None:
    assert password_of(url) == password
    if password:
        leaked = f"error for {url}: password {password} or {password.replace(' ', '%20')} rejected"
        redacted = redact(leaked, url)
        assert password not in redacted
        assert url not in redacted


def test_should_redact_url_passwords_it_was_not_told_about() -> None:
    text = "connect to postgresql://bob:pa:ss@h/d failed; conninfo password=xyz host=h"
    assert redact(text, None) == "connect to postgresql://bob:***@h/d failed; conninfo password=*** host=h"
    assert libpq_dsn("postgresql+psycopg://u@h/d") == "postgresql://u@h/d"

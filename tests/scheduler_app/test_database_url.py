"""DATABASE_URL with a primary and its standby: libpq's multi-host form, kept whole."""

from __future__ import annotations

import psycopg
import pytest
from django.db.backends.postgresql.base import DatabaseWrapper

from project.settings.env import database_from_url


def test_a_single_host_url_is_read_as_before():
    db = database_from_url("postgres://app:s%40cret@db.example:6543/sched?sslmode=require")
    assert (db["HOST"], db["PORT"], db["USER"], db["PASSWORD"]) == (
        "db.example",
        "6543",
        "app",
        "s@cret",
    )
    assert db["NAME"] == "sched" and db["OPTIONS"] == {"sslmode": "require"}


def test_a_multi_host_url_keeps_every_host_and_port_in_order():
    db = database_from_url(
        "postgres://app:pw@primary:5432,standby:5433/sched?target_session_attrs=read-write"
    )
    assert db["HOST"] == "primary,standby"
    assert db["PORT"] == "5432,5433"
    assert db["OPTIONS"] == {"target_session_attrs": "read-write"}
    assert (db["USER"], db["PASSWORD"], db["NAME"]) == ("app", "pw", "sched")


def test_a_host_without_a_port_among_several_gets_the_default_one():
    db = database_from_url("postgres://app@primary,[::1]:5433/sched")
    assert db["HOST"] == "primary,::1"
    assert db["PORT"] == "5432,5433"


def test_django_hands_the_lists_to_libpq_unchanged():
    """What psycopg receives is what libpq reads: one host list, one port list."""
    db = database_from_url(
        "postgres://app@h1:5432,h2:5433/sched?target_session_attrs=read-write&connect_timeout=2"
    )
    wrapper = DatabaseWrapper({**db, "TIME_ZONE": None, "CONN_HEALTH_CHECKS": False}, "x")
    params = wrapper.get_connection_params()
    libpq = {
        k: v
        for k, v in params.items()
        if k not in ("context", "cursor_factory", "prepare_threshold")
    }
    dsn = psycopg.conninfo.make_conninfo(**libpq)
    parsed = psycopg.conninfo.conninfo_to_dict(dsn)
    assert parsed["host"] == "h1,h2" and parsed["port"] == "5432,5433"
    assert parsed["target_session_attrs"] == "read-write"


def test_another_scheme_is_refused():
    with pytest.raises(ValueError, match="not supported"):
        database_from_url("mysql://app@h1/sched")

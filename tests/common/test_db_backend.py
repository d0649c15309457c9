"""The database backend's pool (common.db_backend): while PostgreSQL is unreachable a read
waits for a connection only ``read_timeout`` and the API answers it 503 with
``Retry-After``; a write, and a read that waits for a pool merely busy, wait the full
``timeout``. Against the real test database, a closed port (refused) and a listener that
never answers (silent)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg_pool import PoolTimeout
from rest_framework.test import APIClient

from common.db_backend.base import DatabaseWrapper
from common.db_backend.pool import (
    DatabaseUnreachable,
    OutagePool,
    busy_pool_waited_out,
    reads_fail_fast,
)
from tenancy.models import Role, Tenant
from tests.support import ContextThread, closed_port, postgres_unreachable

pytestmark = pytest.mark.django_db(transaction=True)

READ_TIMEOUT_S = 0.5
TIMEOUT_S = 3.0


@contextlib.contextmanager
def _silent_port() -> Iterator[int]:
    """A listener that never accepts: a connection sits in its backlog, unanswered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@contextlib.contextmanager
def _pool(
    address: Callable[[], dict[str, Any]] = dict, *, max_size: int = 2
) -> Iterator[OutagePool]:
    """A pool like the backend's, to the test database, or to where ``address()`` says
    (``host``, ``port``) at the moment of each attempt."""
    base: dict[str, Any] = connection.get_connection_params() | {"autocommit": True}
    pool = OutagePool(
        kwargs=lambda: base | {"connect_timeout": 2} | address(), min_size=1,
        max_size=max_size, timeout=TIMEOUT_S, read_timeout=READ_TIMEOUT_S, open=True,
    )  # fmt: skip
    try:
        yield pool
    finally:
        pool.close()


def _at(port: int) -> Callable[[], dict[str, Any]]:
    return lambda: {"host": "127.0.0.1", "port": port}


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        outcome: Any = call()
    except Exception as error:
        outcome = error
    return outcome, time.monotonic() - started


def test_the_backend_pools_with_an_outage_pool() -> None:
    db = connections[DEFAULT_DB_ALIAS]
    assert isinstance(db, DatabaseWrapper)
    assert isinstance(db.pool, OutagePool)
    assert db.pool.read_timeout == 1


def test_a_read_fails_fast_when_postgres_refuses_connections() -> None:
    with _pool(_at(closed_port())) as pool, reads_fail_fast():
        outcome, elapsed = _timed(pool.getconn)

    assert isinstance(outcome, DatabaseUnreachable)
    assert "the latest attempt failed" in str(outcome)
    assert READ_TIMEOUT_S <= elapsed < READ_TIMEOUT_S + 1


def test_a_read_fails_fast_when_postgres_does_not_answer() -> None:
    with _silent_port() as port, _pool(_at(port)) as pool, reads_fail_fast():
        outcome, elapsed = _timed(pool.getconn)

    assert isinstance(outcome, DatabaseUnreachable)
    assert "a connection attempt has gone unanswered" in str(outcome)
    assert READ_TIMEOUT_S <= elapsed < READ_TIMEOUT_S + 1


@pytest.mark.parametrize("inside", [False, True], ids=["outside a request", "a write"])
def test_a_write_waits_the_full_timeout_when_postgres_is_unreachable(inside: bool) -> None:
    request = reads_fail_fast(False) if inside else contextlib.nullcontext()
    with _pool(_at(closed_port())) as pool, request:
        outcome, elapsed = _timed(pool.getconn)

    assert type(outcome) is PoolTimeout
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 1


def test_a_read_waits_for_a_busy_pool_past_its_read_timeout() -> None:
    with _pool(max_size=1) as pool:
        held = pool.getconn()
        got: list[Any] = []

        def read() -> None:
            with reads_fail_fast():
                got.append(_timed(pool.getconn))

        reader = ContextThread(target=read)
        reader.start()
        time.sleep(READ_TIMEOUT_S * 3)
        pool.putconn(held)
        reader.join(TIMEOUT_S)
        ((outcome, elapsed),) = got
        pool.putconn(outcome)

    assert not isinstance(outcome, Exception), outcome
    assert READ_TIMEOUT_S * 3 <= elapsed < TIMEOUT_S


def test_a_read_finds_postgres_back_before_the_pool_tries_again() -> None:
    # The pool retries with a growing delay (about 1 s, then 2 s more): the read checks
    # for itself rather than failing until the pool's next attempt.
    address = {"host": "127.0.0.1", "port": closed_port()}
    with _pool(lambda: address) as pool, reads_fail_fast():
        down, elapsed = _timed(pool.getconn)
        time.sleep(1.5 - elapsed)  # the pool's second attempt (at about 1 s) failed too
        address.clear()  # PostgreSQL answers again
        back, elapsed = _timed(pool.getconn)
        if not isinstance(back, Exception):
            pool.putconn(back)

    assert isinstance(down, DatabaseUnreachable)
    assert not isinstance(back, Exception), back
    assert elapsed < TIMEOUT_S


def test_the_api_answers_a_read_503_within_its_read_timeout_and_a_write_after_its_timeout(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.ADMIN)
    read_timeout = connection.settings_dict["OPTIONS"]["pool"]["read_timeout"]
    assert client.get("/api/v1/threads").status_code == 200  # the views are loaded

    with postgres_unreachable(pool_timeout=TIMEOUT_S):
        read, read_s = _timed(lambda: client.get("/api/v1/threads"))
        write, write_s = _timed(
            lambda: client.post("/api/v1/threads", {"agent": "helper"}, format="json")
        )

    for response in (read, write):
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert response.json()["error"]["code"] == "unavailable"
    assert read_timeout <= read_s < read_timeout + 1
    assert TIMEOUT_S <= write_s < TIMEOUT_S + 1.5
    # The pool works again for whoever comes next.
    assert client.get("/api/v1/threads").status_code == 200


# A worker's flows wait out a busy pool ------------------------------------------------------


def test_a_flow_waits_out_a_busy_pool_past_its_timeout_instead_of_failing() -> None:
    with _pool(max_size=1) as pool:
        held = pool.getconn()
        threading.Timer(TIMEOUT_S + 1.0, pool.putconn, args=(held,)).start()

        def flow() -> Any:
            with busy_pool_waited_out():
                got = pool.getconn()
            pool.putconn(got)
            return got

        outcome, took = _timed(flow)

    assert not isinstance(outcome, Exception), outcome
    assert TIMEOUT_S + 0.8 < took < TIMEOUT_S + 3


def test_outside_a_flow_a_busy_pool_still_times_out() -> None:
    with _pool(max_size=1) as pool:
        held = pool.getconn()
        outcome, took = _timed(pool.getconn)
        pool.putconn(held)

    assert isinstance(outcome, PoolTimeout)
    assert TIMEOUT_S - 0.2 < took < TIMEOUT_S + 1


def test_a_flow_waiting_for_an_unreachable_postgresql_meets_the_outage() -> None:
    port = closed_port()
    with _pool(_at(port)) as pool:
        time.sleep(0.3)  # the pool's first attempt has failed

        def flow() -> Any:
            with busy_pool_waited_out():
                return pool.getconn()

        outcome, took = _timed(flow)

    assert isinstance(outcome, DatabaseUnreachable), outcome
    assert took < TIMEOUT_S + 1.5

"""Helpers for tests that start other processes against the test database."""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper


def current_database_url() -> str:
    """The URL of the database this test runs against (the test database), for a subprocess."""
    db = connection.settings_dict
    host = db["HOST"] or db["OPTIONS"].get("host", "")
    unix_socket = host.startswith("/")
    netloc = f"{quote(db['USER'])}:{quote(db['PASSWORD'])}@"
    netloc += "" if unix_socket else f"{host}:{db['PORT']}"
    url = f"postgresql://{netloc}/{quote(db['NAME'])}"
    return f"{url}?host={quote(host)}" if unix_socket else url


def server_warm_up(port: int, *, timeout: float) -> None:
    """Answer one request of a freshly started server: its first loads the URLconf and the
    views, so a test's own requests (and timings) measure what it tests."""
    server = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        server.request("GET", "/api/v1/me")
        assert server.getresponse().status == 401
    finally:
        server.close()


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextlib.contextmanager
def postgres_unreachable(port: int | None = None, pool_timeout: float = 1) -> Iterator[None]:
    """Point the default connection (and its pool, if any) at ``port`` (default: a closed
    one), its pool waiting at most ``pool_timeout`` for a connection, then restore."""
    db = connections[DEFAULT_DB_ALIAS]
    assert isinstance(db, PostgresDatabaseWrapper)
    settings_dict = db.settings_dict
    saved_port, saved_options = settings_dict["PORT"], settings_dict["OPTIONS"]
    db.close()
    db.close_pool()  # type: ignore[attr-defined]  # not in django-stubs 5.2
    settings_dict["PORT"] = str(port or closed_port())
    pool = saved_options.get("pool")
    if isinstance(pool, dict):  # fail fast instead of waiting the pool's full timeout
        settings_dict["OPTIONS"] = {
            **saved_options,
            "connect_timeout": 1,
            "pool": {**pool, "timeout": pool_timeout},
        }
    try:
        yield
    finally:
        db.close()
        db.close_pool()  # type: ignore[attr-defined]  # not in django-stubs 5.2
        settings_dict["PORT"] = saved_port
        settings_dict["OPTIONS"] = saved_options


class ContextThread(threading.Thread):
    """A test's own thread, acting as the test's code does: in a copy of the context of the
    code that made it (the named system context ``tests``; common.tenant_wall)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._context = contextvars.copy_context()

    def run(self) -> None:
        self._context.run(super().run)


@contextlib.contextmanager
def owner_database() -> Iterator[BaseDatabaseWrapper]:
    """A connection of the tables' owner to the test database, of its own and unpooled, for
    the DDL a test needs (the tests' own connection is the application's role, which may
    alter nothing; common.tenant_wall)."""
    owner = settings.DATABASE_OWNER or connection.settings_dict
    options = {key: value for key, value in connection.settings_dict["OPTIONS"].items()
               if key != "pool"}  # fmt: skip
    credentials = {key: owner[key] for key in ("USER", "PASSWORD", "HOST", "PORT")}
    wrapper = type(connections[DEFAULT_DB_ALIAS])(
        {**connection.settings_dict, **credentials, "OPTIONS": options}, alias="test_owner"
    )
    try:
        yield wrapper
    finally:
        wrapper.close()


def database_text() -> str:
    """Every row of every table as JSON text (bytea columns render as ``\\x<hex>``): where a
    test looks for a secret that must not be stored in clear."""
    chunks: list[str] = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            name = connection.ops.quote_name(table)  # from introspection, not user input
            cursor.execute(f"SELECT row_to_json(t)::text FROM {name} t")  # noqa: S608
            chunks.extend(row[0] for row in cursor.fetchall())
    return "\n".join(chunks)

"""A fresh PostgreSQL database per system and repetition, on the server the bench uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

MAINTENANCE_DATABASE = "postgres"


def with_database(url: str, database: str) -> str:
    """The ``postgresql://`` URL ``url`` pointed at another database (query kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{quote(database)}"))


@contextmanager
def fresh_database(server_url: str, prefix: str) -> Iterator[str]:
    """An empty database named ``<prefix>_<random>`` on ``server_url``'s server; yields its
    URL and drops it (closing what is still connected) on the way out."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = with_database(server_url, MAINTENANCE_DATABASE)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")

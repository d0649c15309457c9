"""The two database roles of the tenant wall (common.tenant_wall), made for development and
tests from one URL.

In production the operator creates both roles and sets both URLs (docs/operations.md):
``DATABASE_MIGRATE_URL`` for the role that owns the tables, ``DATABASE_URL`` for the
application's role, which owns nothing and is no superuser, so row-level security applies
to it. ``make run``, ``make test`` and the embedded PostgreSQL are given one URL, usually a
superuser's; :func:`split` keeps it for migrations and makes the application's role beside
it: ``<database>_app``, a login with no other right, whose password is derived from the
owner's URL (so every process that derives it agrees, and no file holds it).

This module does not import Django settings: it runs before they can load.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROLE_SUFFIX = "_app"
_LOCK = 0x7465_6E61_6E74  # pg_advisory_lock key: one role change at a time
MAINTENANCE_DATABASE = "postgres"


def application_role(owner_url: str) -> str:
    """The application's role for the database ``owner_url`` names."""
    database = unquote(urlsplit(owner_url).path.lstrip("/")) or "platform"
    return (database + ROLE_SUFFIX)[:63]


def _password(owner_url: str) -> str:
    return hashlib.sha256(f"application role of {owner_url}".encode()).hexdigest()[:40]


def application_url(owner_url: str) -> str:
    """``owner_url`` with the application's role and password in place of the owner's."""
    parts = urlsplit(owner_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(application_role(owner_url))}:{_password(owner_url)}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _connect(owner_url: str) -> psycopg.Connection:
    """A connection as the owner, to the server's maintenance database (roles belong to the
    server; the application's database may not exist yet)."""
    parts = urlsplit(owner_url)
    maintenance = urlunsplit(parts._replace(path="/" + MAINTENANCE_DATABASE))
    try:
        return psycopg.connect(maintenance, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError:
        return psycopg.connect(owner_url, autocommit=True, connect_timeout=5)


def ensure_application_role(owner_url: str) -> bool:
    """Create (or re-assert) the application's role; False when ``owner_url``'s role may not
    create roles (then the one role serves both)."""
    role = sql.Identifier(application_role(owner_url))
    with _connect(owner_url) as connection:
        allowed = connection.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if not (allowed and allowed[0]):
            return False
        connection.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
        try:
            exists = connection.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (application_role(owner_url),)
            ).fetchone()
            if not exists:
                connection.execute(sql.SQL("CREATE ROLE {}").format(role))
            connection.execute(
                sql.SQL(
                    "ALTER ROLE {} WITH LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE "
                    "NOINHERIT PASSWORD {}"
                ).format(role, sql.Literal(_password(owner_url)))
            )
        finally:
            connection.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
    return True


def split(database_url: str) -> tuple[str, str | None]:
    """(the application's URL, the owner's URL) made from one owner's ``database_url``; the
    URL unchanged and None when its role cannot create the application's."""
    if not ensure_application_role(database_url):
        return database_url, None
    return application_url(database_url), database_url

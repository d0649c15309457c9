"""Helpers for tests that start other processes against the test database."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def current_database_url() -> str:
    """The URL of the database this test runs against (the test database), for a subprocess."""
    db = connection.settings_dict
    host = db["HOST"] or db["OPTIONS"].get("host", "")
    unix_socket = host.startswith("/")
    netloc = f"{quote(db['USER'])}:{quote(db['PASSWORD'])}@"
    netloc += "" if unix_socket else f"{host}:{db['PORT']}"
    url = f"postgresql://{netloc}/{quote(db['NAME'])}"
    return f"{url}?host={quote(host)}" if unix_socket else url

"""Helpers for tests that start other processes against the test database."""

from __future__ import annotations

import http.client
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


def server_warm_up(port: int, *, timeout: float) -> None:
    """Answer one request of a freshly started server: its first loads the URLconf and the
    views, so a test's own requests (and timings) measure what it tests."""
    server = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        server.request("GET", "/api/v1/me")
        assert server.getresponse().status == 401
    finally:
        server.close()

"""What the pages of remote connections' tests (MCP servers, A2A agents) share: the form as a
browser posts it, a dead loopback URL, and the parts of a page they read."""

from __future__ import annotations

import re
import socket
from typing import Any

from django.test import Client

AUTH_FIELDS = ["auth_token", "auth_header_name", "auth_header_value", "auth_client_id",
               "auth_token_url", "auth_scopes", "auth_client_secret"]  # fmt: skip


def dead_url(path: str = "/") -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


def connection_form(ttl_field: str, **fields: Any) -> dict[str, Any]:
    """The add/edit form as a browser posts it: every field (the kind's cache TTL named
    ``ttl_field``), blank unless given."""
    body: dict[str, Any] = {"name": "", "url": "", "description": "", ttl_field: "",
                            "call_timeout_s": "", "auth_type": "none"}  # fmt: skip
    body.update(dict.fromkeys(AUTH_FIELDS, ""))
    body.update(fields)
    return body


def html_of(client: Client, url: str) -> str:
    answer = client.get(url)
    assert answer.status_code == 200, answer.status_code
    return answer.content.decode()


def main_of(html: str) -> str:
    """The page's main content (the header holds the logout form)."""
    return html.split('<main id="main">')[1]


def row_html(html: str, name: str) -> str:
    found = re.search(rf'<tr data-name="{re.escape(name)}"[^>]*>(.*?)</tr>', html, re.DOTALL)
    assert found is not None, f"no row {name}"
    return found.group(1)


def field_html(html: str, field: str) -> str:
    found = re.search(rf'data-field="{field}">(.*?)</div>', html, re.DOTALL)
    assert found is not None, f"no field {field}"
    return found.group(1)


def flash(html: str) -> str:
    found = re.search(r'<ul class="flash" role="status">(.*?)</ul>', html, re.DOTALL)
    assert found is not None, "no message"
    return found.group(1)

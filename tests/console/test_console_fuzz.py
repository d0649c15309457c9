"""Every console route, read and written with hostile input in every parameter it could
read (query and form), answers a page or a refusal, never a 500: a bad path, number,
id, JSON or choice is the user's mistake, shown as such."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

from connectors.a2a import a2a_agent_save
from connectors.models import RemoteAuth
from connectors.servers import mcp_server_save
from console import urls as console_urls
from tests.console.conftest import CHAT, Team, team_make
from threads.runtime.lifecycle import thread_open

pytestmark = pytest.mark.django_db

JUNK = [
    "", " ", "x" * 5_000, "../../etc/passwd", "/a/../../b", "\x00", "null", "-1", "0",
    "99999999999999999999999999", "1e309", "not-a-uuid", "<script>alert(1)</script>", "{", "[]",
    '{"a": [1, {"b": null}]}', "😀", "%", "?&=",
]  # fmt: skip

# Every name a console view reads from the query or a form.
PARAMETERS = [
    "path", "size", "page", "after", "type", "turn", "kind", "status", "q", "days", "thread",
    "edit", "name", "agent", "format", "key", "value", "content", "multitask_strategy",
    "decision", "data", "arguments", "reason", "language", "timeout", "report",
    "document", "replace", "apply", "tenant", "file", "env_REGION", "env_", "model", "prompt",
    "tools", "side_a", "api_key", "remove_api_key", "tool_description", "provider", "base_url",
    "description", "url", "tools_ttl_s", "card_ttl_s", "call_timeout_s", "auth_type",
    "auth_token", "auth_header_name", "auth_header_value", "auth_client_id", "auth_token_url",
    "auth_scopes", "auth_client_secret", "view", "tools-0", "tools-0-approval", "tools-0-settings",
    "tools-999", "hooks", "compaction-trigger", "compaction-context_window", "reasoning-include",
    "reasoning-effort",
]  # fmt: skip
# The run-code form's source is run, once per junk value (the sandbox is real).
RUN_CODE = "thread-code-run"
# The remote connections' forms (an MCP server's, an A2A agent's), each also posted with
# every auth type, so that junk in each type's fields reaches the save service.
CONNECTION_FORMS = ("mcp-servers", "mcp-server-edit", "a2a-agents", "a2a-agent-edit")
# A refresh contacts the connection (never inside the test's transaction) and reads no
# parameter: it is fuzzed on a connection that does not exist.
REFRESHES = ("mcp-server-refresh", "a2a-agent-refresh")


def _arguments(entry: URLPattern, thread_id: uuid.UUID) -> dict[str, Any]:
    converters = getattr(entry.pattern, "converters", {})
    values: dict[str, Any] = {}
    for name in converters:
        if name == "thread_id":
            values[name] = thread_id
        elif name == "kind":
            values[name] = "prompts"
        elif name == "name":
            values[name] = "absent" if entry.name in REFRESHES else "p"
        else:
            values[name] = uuid.uuid4()
    return values


def _routes() -> list[URLPattern]:
    return [
        entry
        for entry in console_urls.urlpatterns
        if isinstance(entry, URLPattern) and entry.name not in ("login", "logout")
    ]


@pytest.fixture
def fuzzed(db: None) -> tuple[Team, uuid.UUID]:
    """A team with a thread, and an MCP server and an A2A agent named ``p`` (as the prompt
    the definition routes are given) whose edit forms are fuzzed."""
    team = team_make()
    mcp_server_save(tenant=team.tenant, data={"name": "p", "url": "https://mcp.example.com/m"})
    a2a_agent_save(tenant=team.tenant, data={"name": "p", "url": "https://a2a.example.com/"})
    return team, thread_open(tenant=team.tenant, agent_name=CHAT).pk


def _field_sets(entry: URLPattern, junk: str) -> list[dict[str, str]]:
    """The parameters to send: every one holding ``junk``, and for a connection's form the
    same with each auth type chosen."""
    fields = dict.fromkeys(PARAMETERS, junk)
    if entry.name == RUN_CODE:
        fields["source"] = junk
    sets = [fields]
    if entry.name in CONNECTION_FORMS:
        sets += [{**fields, "auth_type": kind} for kind in RemoteAuth.values]
    return sets


@pytest.mark.parametrize("entry", _routes(), ids=lambda entry: entry.name)
def test_hostile_input_never_answers_500(entry: URLPattern, fuzzed: tuple[Team, uuid.UUID]) -> None:
    team, thread_id = fuzzed
    client = Client(raise_request_exception=False)
    client.force_login(team.admin)
    url = reverse(f"console:{entry.name}", kwargs=_arguments(entry, thread_id))
    failures = []

    for junk in JUNK:
        for fields in _field_sets(entry, junk):
            for method in ("get", "post"):
                for accept in ("text/html", "application/json"):
                    answer = getattr(client, method)(url, fields, headers={"Accept": accept})
                    if answer.status_code >= 500:
                        failures.append((method, accept, junk[:40], answer.status_code))

    assert failures == [], f"{url}: {failures}"


def test_a_nul_in_the_query_is_a_400_naming_the_parameter(fuzzed: tuple[Team, uuid.UUID]) -> None:
    team, thread_id = fuzzed
    client = Client()
    client.force_login(team.member)

    answer = client.get(reverse("console:thread-kv", args=[thread_id]), {"q": "a\x00b"})

    assert answer.status_code == 400
    assert answer.content.decode() == "query parameter 'q' contains a NUL character (%00)"

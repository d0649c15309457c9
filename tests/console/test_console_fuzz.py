"""Every console route, read and written with hostile input in every parameter it could
read (query and form), answers a page or a refusal, never a 500: a bad path, number,
id, JSON or choice is the user's mistake, shown as such."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

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
    "description",
]  # fmt: skip
# The run-code form's source is run, once per junk value (the sandbox is real).
RUN_CODE = "console:thread-code-run"


def _arguments(entry: URLPattern, thread_id: uuid.UUID) -> dict[str, Any]:
    converters = getattr(entry.pattern, "converters", {})
    values: dict[str, Any] = {}
    for name in converters:
        if name == "thread_id":
            values[name] = thread_id
        elif name == "kind":
            values[name] = "prompts"
        elif name == "name":
            values[name] = "p"
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
    team = team_make()
    return team, thread_open(tenant=team.tenant, agent_name=CHAT).pk


@pytest.mark.parametrize("entry", _routes(), ids=lambda entry: entry.name)
def test_hostile_input_never_answers_500(entry: URLPattern, fuzzed: tuple[Team, uuid.UUID]) -> None:
    team, thread_id = fuzzed
    client = Client(raise_request_exception=False)
    client.force_login(team.admin)
    url = reverse(f"console:{entry.name}", kwargs=_arguments(entry, thread_id))
    failures = []

    for junk in JUNK:
        fields = dict.fromkeys(PARAMETERS, junk)
        if entry.name == RUN_CODE:
            fields["source"] = junk
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

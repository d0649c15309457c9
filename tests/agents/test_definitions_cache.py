"""Parsed definitions come from the per-process cache of the tenant's current definitions
version (agents.selectors): read from the database once per version, never stale."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import selectors
from agents.documents import AgentDoc
from agents.services import definition_save, parse_document
from common import tokens
from common.errors import NotFound
from tenancy.models import Tenant
from tests.agents.test_graph import agent, define, prompt
from threads.runtime.lifecycle import thread_open

pytestmark = pytest.mark.django_db


def _definition_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if '"agents_' in q["sql"]]


def test_opening_threads_reads_the_definitions_once_per_version(tenant: Tenant) -> None:
    define(tenant, prompts=[prompt("p")], agents=[agent("chat", "p")])
    thread_open(tenant=tenant, agent_name="chat")

    with CaptureQueriesContext(connection) as queries:
        thread_open(tenant=tenant, agent_name="chat")
    assert _definition_reads(queries) == []

    changed = parse_document("agents", {**agent("chat", "p"), "hooks": []})
    definition_save(tenant=tenant, kind="agents", doc=changed, current_name="chat")
    with CaptureQueriesContext(connection) as queries:
        thread_open(tenant=tenant, agent_name="chat")
    assert _definition_reads(queries)  # a new version: read again


def test_a_change_is_seen_at_once_even_inside_a_scope(tenant: Tenant) -> None:
    define(tenant, prompts=[prompt("p")], agents=[agent("chat", "p", max_session_turns=3)])
    with selectors.definitions_scope():
        before = selectors.agent_load(tenant=tenant, name="chat")
        assert isinstance(before, AgentDoc)
        assert before.max_session_turns == 3
        changed = parse_document("agents", agent("chat", "p", max_session_turns=5))
        definition_save(tenant=tenant, kind="agents", doc=changed, current_name="chat")
        after = selectors.agent_load(tenant=tenant, name="chat")
        assert after.max_session_turns == 5
    with pytest.raises(NotFound, match="no agent named 'gone'"):
        selectors.agent_load(tenant=tenant, name="gone")


def test_a_scope_reads_the_version_once(tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    define(tenant, prompts=[prompt("p")], agents=[agent("chat", "p")])
    reads: list[str] = []
    real_get = tokens.token_get

    def counting_get(name: str) -> str | None:
        reads.append(name)
        return real_get(name)

    monkeypatch.setattr(selectors, "token_get", counting_get)
    with selectors.definitions_scope():
        for _ in range(3):
            selectors.agent_load(tenant=tenant, name="chat")
            selectors.prompt_load(tenant=tenant, name="p")
    assert reads == [f"definitions:{tenant.id}"]

"""A live platform for the AG-UI route's tests: a uvicorn server and a Celery worker on a
queue of their own, started once for the run; per test a tenant with agent ``chat`` on a
scripted, streaming model and a member's API key, and another tenant with an agent of the
same name. The stream is read as an AG-UI client reads it: each ``data:`` is parsed into
``ag_ui.core``'s event union (the protocol's own models), never a fake of the protocol."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from agents.bundles import bundle_import
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for

AGENT = "chat"
FRONTEND_TOOL = "pick_color"
# The scripted model's answers (docs/providers.md): the time asks for the registry's
# current_time tool, a colour asks for the frontend's pick_color tool, a refund for the
# refund tool (which a person must approve), and anything else is echoed. Answers stream
# in chunks of 4 characters.
RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"when": {"last_tool": FRONTEND_TOOL}, "respond": {"text": "You picked {last_tool_result}."}},
    {"when": {"last_tool": "count_words"},
     "respond": {"text": "Counted: {last_tool_result}."}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"text": "Let me look.",
                 "tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {"last_role": "user", "last_user_contains": "colour"},
     "respond": {"tool_calls": [{"name": FRONTEND_TOOL, "arguments": {"hint": "warm"}}]}},
    {"when": {"last_role": "user", "last_user_contains": "count"},
     "respond": {"tool_calls": [{"name": "count_words", "arguments": {"text": "one two"}}]}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip
EVENT = TypeAdapter(Event)


def bundle() -> dict[str, Any]:
    """Agent ``chat``: prompt ``p`` on the scripted model, with the registry's
    ``current_time`` and ``count_words`` (the latter needs a person's approval)."""
    return {
        "version": 1,
        "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                    "config": {"rules": RULES,
                               "streaming": {"chunk_size": 4, "chunk_delay_ms": 5}}}],
        "prompts": [{"name": "p", "tool_description": "The chat prompt", "prompt": "You help.",
                     "model": "m", "include_chat": True,
                     "tools": ["current_time",
                               {"name": "count_words", "approval": {"decision": "ask"}}]}],
        "agents": [{"name": AGENT, "side_a": {"prompt": "p"}}],
    }  # fmt: skip


@dataclass
class Run:
    """One AG-UI request's answer: its status, and for a stream every event parsed by the
    protocol's models (``events``) with their wire JSON (``wire``); else the JSON body."""

    status: int
    events: list[Any] = field(default_factory=list)
    wire: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] | None = None

    def types(self) -> list[str]:
        return [event.type.value for event in self.events]

    def of(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.type.value == kind]

    def text(self) -> str:
        return "".join(event.delta for event in self.of("TEXT_MESSAGE_CONTENT"))


@dataclass
class AguiTenant:
    tenant: Tenant
    key: str


@dataclass
class AguiLive:
    live: Live
    first: AguiTenant
    other: AguiTenant

    def url(self, agent: str = AGENT) -> str:
        return f"{self.live.base_url}/api/v1/agui/{agent}"

    def run(
        self,
        body: Mapping[str, Any] | str,
        *,
        key: str | None = None,
        agent: str = AGENT,
        headers: Mapping[str, str] | None = None,
    ) -> Run:
        """POST ``body`` with ``key`` (default: the first tenant's; "" for none) and read
        the answer to its end."""
        sent = {"Accept": "text/event-stream", **(headers or {})}
        chosen = self.first.key if key is None else key
        if chosen:
            sent["Authorization"] = f"Bearer {chosen}"
        content = body if isinstance(body, str) else json.dumps(body)
        sent["Content-Type"] = "application/json"
        with httpx.stream(
            "POST", self.url(agent), content=content, headers=sent, timeout=60
        ) as answer:
            if not answer.headers.get("content-type", "").startswith("text/event-stream"):
                answer.read()
                return Run(answer.status_code, body=answer.json())
            run = Run(answer.status_code)
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    data = line.removeprefix("data:").strip()
                    run.wire.append(json.loads(data))
                    run.events.append(EVENT.validate_json(data))
            return run


def _tenant(prefix: str) -> AguiTenant:
    tenant = make_tenant(f"{prefix}-{uuid.uuid4().hex[:8]}")
    bundle_import(tenant=tenant, document=bundle())
    return AguiTenant(tenant, make_api_key(tenant, role=Role.MEMBER, name="agui tests").secret)


@pytest.fixture(scope="session")
def _served(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_platform(tmp_path_factory.mktemp("agui-live"), {}) as live:
        yield live


@pytest.fixture
def agui(_served: Live, transactional_db: None) -> Iterator[AguiLive]:
    """Two tenants, each with agent ``chat`` and a member's key."""
    first, other = _tenant("agui"), _tenant("agui-other")
    with working_for(_served, first.tenant):
        yield AguiLive(_served, first, other)


def run_input(
    thread_id: str, text: str, *, tools: list[dict[str, Any]] | None = None, **fields: Any
) -> dict[str, Any]:
    """A RunAgentInput (the wire's camelCase) whose last message is the user's ``text``."""
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": [{"id": f"m-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}],
        "tools": tools or [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    body.update(fields)
    return body

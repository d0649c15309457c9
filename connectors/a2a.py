"""A tenant's remote A2A agents: saving them (the URL through the egress rules, the secret
sealed: :mod:`connectors.remote`), reading them, their cached cards, and the answer of one to a
message as a tool result.

A prompt names an agent ``a2a:<name>``; the model sees one tool, ``<name>__send_message``,
whose arguments are the message and, to go on with an earlier exchange, its ``context_id`` and
``task_id`` (every answer ends with them). Credentials go only to the registered URL's origin:
a card whose interface is elsewhere is refused for an agent with a secret.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.db import connection, transaction

from agents.registry import ToolResult
from common.connections import connection_release
from common.time import now, to_us
from connectors.models import A2aAgent
from connectors.remote import (
    MAX_TTL_S,
    Kind,
    auth_json,
    cache_stale,
    connection_get,
    connection_list,
    connection_save,
    contact_failed,
    contact_recorded,
    endpoint_of,
    health_json,
    int_field,
    us,
)
from connectors.results import large_result
from connectors.transport import RemoteUnavailable
from tenancy.models import Tenant

if TYPE_CHECKING:
    from a2a.types import Message, Task

MAX_AGENTS: Final = 50
CARD_TIMEOUT_S: Final = 20.0
MAX_MESSAGE_CHARS: Final = 100_000
FIELDS: Final = ("name", "url", "description", "auth", "card_ttl_s", "call_timeout_s")
USAGE: Final = "prompts name it a2a:<name>, and the model calls it as <name>__send_message"
TOOL_SUFFIX: Final = "__send_message"
PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the agent."},
        "context_id": {
            "type": "string",
            "description": "To go on with an earlier exchange: the context_id its answer gave.",
        },
        "task_id": {
            "type": "string",
            "description": "To answer a task that asked for more input: its task_id.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


def agent_name(row: A2aAgent) -> str:
    """How messages name the agent."""
    return f"A2A agent {row.name!r}"


def tool_name(name: str) -> str:
    """The name the model calls agent ``name`` by."""
    return f"{name}{TOOL_SUFFIX}"


def _apply(row: A2aAgent, body: Mapping[str, Any]) -> None:
    if "card_ttl_s" in body:
        row.card_ttl_s = int_field(body["card_ttl_s"], "card_ttl_s", low=0, high=MAX_TTL_S)


def _forget(row: A2aAgent) -> None:
    row.card, row.card_fetched_at = {}, None


AGENTS: Final = Kind(A2aAgent, FIELDS, USAGE, "A2A agent", MAX_AGENTS, _apply, _forget)


# Reading ------------------------------------------------------------------------------------


def a2a_agent_get(*, tenant: Tenant, name: str) -> A2aAgent:
    """The tenant's agent ``name``; NotFound otherwise (another tenant's too)."""
    return connection_get(AGENTS, tenant=tenant, name=name)


def a2a_agent_list(*, tenant: Tenant) -> list[A2aAgent]:
    return connection_list(AGENTS, tenant=tenant)


def card_stale(row: A2aAgent) -> bool:
    return cache_stale(row.card_fetched_at, row.card_ttl_s)


def card_summary(card: Mapping[str, Any]) -> dict[str, Any] | None:
    """What answers show of a card: its name, description, version, skills and interface."""
    if not card:
        return None
    from connectors import a2a_client  # the A2A SDK loads where it is used (process start)

    skills = [
        {"id": str(s.get("id", "")), "name": str(s.get("name", "")),
         "description": str(s.get("description", ""))}
        for s in card.get("skills") or () if isinstance(s, Mapping)
    ]  # fmt: skip
    capabilities = card.get("capabilities") or {}
    return {
        "name": str(card.get("name", "")),
        "description": str(card.get("description", "")),
        "version": str(card.get("version", "")),
        "interface": a2a_client.card_interface(card),
        "streaming": bool(capabilities.get("streaming", False)),
        "skills": skills,
    }


def a2a_agent_json(row: A2aAgent) -> dict[str, Any]:
    """An agent as answers show it: never its secret."""
    return {
        "id": str(row.id),
        "name": row.name,
        "tool": tool_name(row.name),
        "url": row.url,
        "description": row.description,
        "auth": auth_json(row),
        "card_ttl_s": row.card_ttl_s,
        "call_timeout_s": row.call_timeout_s,
        "card": card_summary(row.card),
        "card_fetched_at": us(row.card_fetched_at),
        "health": health_json(row),
        "created_at": to_us(row.created_at),
        "updated_at": to_us(row.updated_at),
    }


def tool_description(row: A2aAgent) -> str:
    """What the model reads about the agent's tool: the card's description and skills, else
    the row's description."""
    summary = card_summary(row.card)
    parts = [row.description or (summary or {}).get("description") or f"The agent {row.name}"]
    for skill in (summary or {}).get("skills", ()):
        parts.append(f"- {skill['name']}: {skill['description']}".rstrip(": "))
    parts.append("A remote agent (A2A): send it a message; its answer ends with the "
                 "context_id and task_id to go on with.")  # fmt: skip
    return "\n".join(parts)[:2000]


# Saving -------------------------------------------------------------------------------------


@transaction.atomic
def a2a_agent_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: A2aAgent | None = None
) -> A2aAgent:
    """Create or change an agent (:func:`connectors.remote.connection_save`); a new URL or
    auth forgets its cached card too."""
    return connection_save(AGENTS, tenant=tenant, data=data, current=current)


def a2a_agent_delete(*, tenant: Tenant, row: A2aAgent) -> None:
    """Delete an agent; prompts naming it offer its tool no more (a call names the cause)."""
    A2aAgent.objects.for_tenant(tenant).filter(pk=row.pk).delete()


# The card -----------------------------------------------------------------------------------


def card_fetch(row: A2aAgent) -> dict[str, Any]:
    """Fetch the agent's card now, cache it and record the contact. Raises RemoteUnavailable
    (recorded as the health's error). Must not run inside a transaction."""
    if connection.in_atomic_block:
        raise RuntimeError("card_fetch would hold a transaction open across a remote call")
    connection_release()  # no connection held while the other side takes its time
    from connectors import a2a_client

    try:
        card = a2a_client.card_get(
            endpoint_of(row), timeout=float(min(row.call_timeout_s, CARD_TIMEOUT_S))
        )
    except RemoteUnavailable as error:
        contact_failed(row, error, what=agent_name(row))
        raise
    row.card, row.card_fetched_at = card, now()
    A2aAgent.objects.filter(pk=row.pk).update(card=card, card_fetched_at=row.card_fetched_at)
    contact_recorded(row, error=None)
    return card


@dataclass(frozen=True)
class CardListing:
    """An agent's card as the cache holds it after :func:`card_current`; ``error`` says why it
    could not be fetched again (then it is the stale one, or none)."""

    agent: A2aAgent
    error: str | None = None
    code: str = "a2a_unavailable"

    @property
    def stale(self) -> bool:
        return card_stale(self.agent)


def card_current(row: A2aAgent, *, refresh: bool = False) -> CardListing:
    """The agent's card: the cache while fresh (unless ``refresh``), else fetched again;
    inside a transaction nothing is fetched."""
    if not (refresh or card_stale(row)) or connection.in_atomic_block:
        return CardListing(row)
    try:
        card_fetch(row)
    except RemoteUnavailable as error:
        return CardListing(row, row.last_error, error.code)
    return CardListing(row)


def card_listing_json(listing: CardListing) -> dict[str, Any]:
    """``GET /a2a-agents/{name}/card``: the card as fetched, and how fresh it is."""
    row = listing.agent
    return {
        "agent": row.name,
        "fetched_at": us(row.card_fetched_at),
        "stale": listing.stale,
        "error": listing.error,
        "card": row.card or None,
        "health": health_json(row),
    }


# Calling ------------------------------------------------------------------------------------


def agent_call(tenant: Tenant, name: str, arguments: Mapping[str, Any]) -> ToolResult:
    """Send the model's message to agent ``name`` and map its answer onto a tool result
    (never raises; no transaction may be open)."""
    row = A2aAgent.objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        return ToolResult.failure(f"A2A agent {name!r} no longer exists", code="a2a_agent_gone")
    text = str(arguments.get("message") or "")
    if not text.strip() or len(text) > MAX_MESSAGE_CHARS:
        return ToolResult.failure(
            f"message must be a non-empty text of at most {MAX_MESSAGE_CHARS} characters",
            code="invalid_arguments",
        )
    listing = card_current(row)
    from connectors import a2a_client

    interface = a2a_client.card_interface(row.card)
    if interface is None:
        why = listing.error or f"{agent_name(row)}'s card offers no JSON-RPC interface"
        return ToolResult.failure(why, code=listing.code)
    if row.has_secret and not a2a_client.same_origin(interface, row.url):
        return ToolResult.failure(
            f"{agent_name(row)}'s card names its endpoint {interface} on another origin than "
            f"{row.url}: credentials are sent only to the registered URL's origin; register "
            "the agent at that origin",
            code="a2a_foreign_endpoint",
        )
    try:
        answer = a2a_client.message_send(
            endpoint_of(row, interface), row.card, text=text,
            context_id=str(arguments.get("context_id") or ""),
            task_id=str(arguments.get("task_id") or ""), timeout=float(row.call_timeout_s),
        )  # fmt: skip
    except RemoteUnavailable as error:
        return ToolResult.failure(contact_failed(row, error, what=agent_name(row)),
                                  code=error.code)  # fmt: skip
    contact_recorded(row, error=None)
    return answer_result(row.name, answer)


def _texts(parts: Any, attachments: list[dict[str, Any]], name: str) -> list[str]:
    """The text of ``parts``; file parts with bytes become attachments."""
    from google.protobuf.json_format import MessageToDict

    texts: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif kind == "url":
            texts.append(f"[file] {part.url}")
        elif kind == "raw":
            index = len(attachments) + 1
            attachments.append({
                "name": part.filename or f"{name}-{index}",
                "mimeType": part.media_type or "application/octet-stream",
                "data": base64.b64encode(part.raw).decode(),
            })  # fmt: skip
    return texts


def answer_result(name: str, answer: Task | Message) -> ToolResult:
    """An A2A answer as a tool result: a message's text; a completed task's artifacts (else
    its last message); a task asking for input as a success holding its question; a failed,
    rejected or cancelled one as a failure. Each ends with the ids to go on with."""
    from a2a.types import Message, Role, TaskState

    attachments: list[dict[str, Any]] = []
    label = tool_name(name)
    if isinstance(answer, Message):
        text = "\n".join(_texts(answer.parts, attachments, label))
        trailer = f"[context_id: {answer.context_id or '-'}]"
        return large_result(label, f"{text}\n{trailer}".strip(), attachments)
    state = answer.status.state
    texts: list[str] = []
    for artifact in answer.artifacts if state == TaskState.TASK_STATE_COMPLETED else ():
        texts.extend(_texts(artifact.parts, attachments, label))
    if not texts and answer.status.HasField("message"):
        texts = _texts(answer.status.message.parts, attachments, label)
    if not texts:
        agent_said = [m for m in answer.history if m.role == Role.ROLE_AGENT]
        if agent_said:
            texts = _texts(agent_said[-1].parts, attachments, label)
    text = "\n".join(texts)
    state_name = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
    trailer = f"[task {state_name}; context_id: {answer.context_id}; task_id: {answer.id}]"
    if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED,
                 TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_AUTH_REQUIRED):  # fmt: skip
        return ToolResult(
            "error",
            error=f"A2A agent {name!r}: the task is {state_name}"
            + (f": {text}" if text else "") + f" {trailer}",
            attachments=tuple(attachments),
            error_code=f"a2a_task_{state_name}",
        )  # fmt: skip
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        text = f"The agent needs more input: {text}\n(answer it with this task_id)"
    return large_result(label, f"{text}\n{trailer}".strip(), attachments)

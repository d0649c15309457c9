"""The event envelope (ARCHITECTURE §6) and the channel groups events travel on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from opentelemetry import trace

from threads.events.vocabulary import SCHEMA_VERSION
from threads.models import Event, Thread

# Groups --------------------------------------------------------------------------------------


def thread_group(*, tenant_id: Any, thread_id: Any) -> str:
    """The Channels group of one thread's events (begins with the tenant id)."""
    return f"{tenant_id}.thread.{thread_id}"


def tenant_group(*, tenant_id: Any) -> str:
    """The Channels group of a tenant's thread lifecycle events."""
    return f"{tenant_id}.events"


# The envelope --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """One event as clients receive it (ARCHITECTURE §6). ``sequence`` is None for ephemeral
    events; ``timestamp`` is µs; ``turn_id`` names the turn the event belongs to and
    ``flow_id`` the flow (one execution attempt of it) that produced it; ``action_id`` the
    action (a person's approval or input) an action or permission event belongs to;
    ``trace_id`` and ``span_id`` the span active where it was produced (:func:`trace_ids`)."""

    type: str
    event_id: str
    sequence: int | None
    timestamp: int
    tenant_id: str
    session_id: str
    thread_id: str
    payload: Mapping[str, Any]
    flow_id: str | None = None
    turn_id: str | None = None
    step_id: str | None = None
    tool_call_id: str | None = None
    subagent_id: str | None = None
    action_id: str | None = None
    refs: Mapping[str, Any] | None = None
    trace_id: str | None = None
    span_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "event_id": self.event_id,
            "sequence": self.sequence,
            "timestamp": self.timestamp,
            "schema_version": SCHEMA_VERSION,
            "runtime_id": settings.PLATFORM_RUNTIME_ID,
            "tenant_id": self.tenant_id,
            "session_id": self.session_id,
            "thread_id": self.thread_id,
            "flow_id": self.flow_id,
            "turn_id": self.turn_id,
            "step_id": self.step_id,
            "tool_call_id": self.tool_call_id,
            "subagent_id": self.subagent_id,
            "action_id": self.action_id,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "payload": self.payload,
            "refs": self.refs,
        }


def envelope_of(event: Event, *, session_id: str | None = None) -> dict[str, Any]:
    """The envelope of a stored event (replay, SSE, JSON paging)."""
    return Envelope(
        type=event.type,
        event_id=str(event.id),
        sequence=event.sequence,
        timestamp=event.created_at,
        tenant_id=str(event.tenant_id),
        session_id=session_id or str(event.thread_id),
        thread_id=str(event.thread_id),
        payload=event.payload,
        flow_id=event.flow_id or None,
        turn_id=event.turn_id or None,
        step_id=event.step_id or None,
        tool_call_id=event.tool_call_id or None,
        subagent_id=lifted(event.payload, "subagent_id"),
        action_id=lifted(event.payload, "action_id"),
        refs=event.refs,
        trace_id=event.trace_id or None,
        span_id=event.span_id or None,
    ).as_json()


def trace_ids() -> tuple[str, str]:
    """The W3C trace and span ids (hex) of the span active in this context, ``("", "")``
    when there is none (tracing off, or outside any traced work). Reads the OpenTelemetry
    API's context only: no provider is needed, and none is configured here."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return "", ""
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def lifted(payload: object, key: str) -> str | None:
    """A payload id the envelope carries too (``subagent_id``, ``action_id``)."""
    value = payload.get(key) if isinstance(payload, dict) else None
    return str(value) if value else None


def session_id_of(thread: Thread) -> str:
    """The root of the thread's subagent tree (the thread itself when top-level)."""
    return str(thread.root_id or thread.pk)

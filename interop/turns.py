"""The one way a protocol (MCP, AG-UI, A2A) opens a thread and submits a turn: through the
services ``POST /api/v1/threads`` and ``POST /api/v1/threads/{id}/turns`` use, so required
variables, ``after_thread_created`` hooks, budgets, the turns-per-minute quota, queueing and
the audit trail apply as they do there. Each protocol keeps only its own wire format (and its
own idempotency key, which the protocol defines)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from common.errors import NotFound
from tenancy.models import Tenant
from tenancy.principals import Principal
from threads.api.base import turn_submitted_audit
from threads.models import Thread, Turn, TurnSource, TurnStrategy
from threads.runtime.lifecycle import thread_open
from threads.services.inbox import message_queue
from threads.services.spending import work_admit
from threads.services.threads import thread_get


def agent_thread(*, tenant: Tenant, agent: str, thread_id: str) -> Thread:
    """Thread ``thread_id`` of the tenant, which must have been opened for ``agent``;
    NotFound otherwise (another agent's or tenant's thread is not told apart from none)."""
    thread = thread_get(tenant=tenant, thread_id=thread_id)
    if thread.origin_agent_name != agent:
        raise NotFound(f"no thread {thread_id}")
    return thread


def agent_thread_open(
    *, tenant: Tenant, agent: str, metadata: Mapping[str, Any] | None = None
) -> Thread:
    """A new thread of ``agent``, opened as ``POST /threads`` opens one with no ``env``
    (ValidationFailed naming ``env.<NAME>`` when a required variable would not resolve)."""
    return thread_open(tenant=tenant, agent_name=agent, metadata=metadata)


def protocol_turn_submit(
    *,
    principal: Principal,
    thread: Thread,
    text: str,
    protocol: str,
    metadata: Mapping[str, Any] | None = None,
    turn_metadata: Mapping[str, Any] | None = None,
    client_tools: Sequence[Mapping[str, Any]] = (),
) -> Turn:
    """``text`` as a user's turn of ``thread``, waiting behind a running turn (``enqueue``),
    admitted first by the budgets and quotas (:func:`work_admit`) and audited as
    ``turn.submitted``. The turn's metadata names the ``protocol`` it came through."""
    work_admit(thread=thread)
    with transaction.atomic():
        turn = message_queue(
            thread=thread, role="user", content=text, metadata=metadata,
            source=TurnSource.SUBMIT, strategy=TurnStrategy.ENQUEUE,
            turn_metadata={**(turn_metadata or {}), "protocol": protocol},
            client_tools=client_tools,
        )  # fmt: skip
        turn_submitted_audit(principal, turn, None)
    return turn

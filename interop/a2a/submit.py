"""An A2A message as a turn: through the services ``POST /api/v1/threads/{id}/turns`` uses,
so quotas, rate limits, budgets, the audit trail and idempotency apply as they do there.

A message without ``contextId`` opens a thread of the agent (as ``POST /api/v1/threads``
does with no ``env``: refused naming ``env.<NAME>`` when a required variable would not
resolve, then its ``after_thread_created`` hooks run); with one, it is a turn
of that thread (which must be one of the agent's threads). ``messageId`` is the
idempotency key: a retry of the same message (same id, same content) answers the task the
first one created and queues nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from a2a.helpers import get_data_parts
from a2a.types import ContentTypeNotSupportedError, InvalidParamsError, Message, Role
from django.db import transaction

from common.errors import NotFound
from interop.a2a.tasks import A2A_MESSAGE_ID
from interop.turns import agent_thread, agent_thread_open, protocol_turn_submit
from tenancy.principals import Principal
from threads.models import Thread, Turn
from threads.services.idempotency import MAX_KEY_CHARS, idempotent_call, request_hash
from threads.services.turns import turn_get

KEY_PREFIX = "a2a:"


def message_text(message: Message) -> str:
    """The message's content as one text: its text parts, and its data parts as JSON, in
    order. Files (``raw`` or ``url`` parts) are refused: ContentTypeNotSupportedError."""
    pieces: list[str] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json.dumps(get_data_parts([part])[0], sort_keys=True))
        elif kind in ("raw", "url"):
            raise ContentTypeNotSupportedError(
                f"message.parts[{index}]: file parts are not accepted; send text or data"
            )
    text = "\n".join(piece for piece in pieces if piece)
    if not text.strip():
        raise InvalidParamsError("message.parts: the message has no text")
    return text


def _context_thread(principal: Principal, agent: str, context_id: str) -> Thread:
    """The agent's thread ``context_id``; another agent's or tenant's is not found."""
    try:
        return agent_thread(tenant=principal.tenant, agent=agent, thread_id=context_id)
    except NotFound as error:
        raise InvalidParamsError(f"message.contextId: no context {context_id}") from error


def _key(agent: str, message_id: str) -> str:
    key = f"{KEY_PREFIX}{agent}:{message_id}"
    if len(key) <= MAX_KEY_CHARS and key.isprintable():
        return key
    return f"{KEY_PREFIX}{agent}:sha256:{hashlib.sha256(message_id.encode()).hexdigest()}"


def message_submit(
    *, principal: Principal, agent: str, message: Message, path: str,
    with_turn: Callable[[Turn], object] | None = None,
) -> Turn:  # fmt: skip
    """Queue ``message`` (a user's) as a turn of the agent: on its context's thread, or on a
    new thread of ``agent``; ``with_turn`` runs on the new turn in the transaction that
    queues it (not for a retry answered from the first message's task). Raises the A2A
    errors of a bad message, and the domain errors of the services (a budget with nothing
    left, the turns-per-minute quota, a terminated thread, ``messageId`` reused for another
    message)."""
    if not message.message_id:
        raise InvalidParamsError("message.messageId: required")
    if message.role != Role.ROLE_USER:
        raise InvalidParamsError("message.role: must be ROLE_USER")
    if message.task_id:
        raise InvalidParamsError(
            "message.taskId: a task takes no further message here; send a new message in "
            "its context (contextId) instead"
        )
    text = message_text(message)
    context = _context_thread(principal, agent, message.context_id) if message.context_id else None
    created: list[Turn] = []

    def produce() -> tuple[int, dict[str, Any]]:
        with transaction.atomic():
            thread = context or agent_thread_open(tenant=principal.tenant, agent=agent)
            turn = protocol_turn_submit(
                principal=principal, thread=thread, text=text, protocol="a2a",
                metadata={A2A_MESSAGE_ID: message.message_id},
            )  # fmt: skip
            if with_turn is not None:
                with_turn(turn)
        created.append(turn)
        return 202, {"turn_id": str(turn.pk)}

    body = {"message": message.SerializeToString(deterministic=True).hex()}
    digest = request_hash(method="A2A", path=path, body=body)
    answer = idempotent_call(
        tenant=principal.tenant, key=_key(agent, message.message_id), digest=digest,
        produce=produce,
    )  # fmt: skip
    if created:
        return created[0]
    return turn_get(tenant=principal.tenant, turn_id=answer.body["turn_id"])

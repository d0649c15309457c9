"""Closing what a flow left open: pending answers and tool calls without results.

Used when a flow is stopped or terminated, and by a worker that takes over a thread whose
previous worker died mid-flow (providers refuse a history with unanswered tool calls).
"""

from __future__ import annotations

from django.db import transaction

from threads.events import Outbox, publish
from threads.models import Message, MessageRole, MessageStatus, Thread, Turn
from threads.services.fence import fence_check
from threads.services.logs import log_create
from threads.services.messages import message_delete, message_inject


@transaction.atomic
def close_unanswered_calls(
    *, thread: Thread, fence: int | None, reason: str, outbox: Outbox | None = None
) -> int:
    """Delete pending rows (each with ``message.deleted``) and give every tool call without a
    result an error result whose content is ``reason``. Returns how many results were
    written. StaleFence if stale."""
    fence_check(thread=thread, fence=fence)
    pending = Message.objects.filter(thread_id=thread.pk, status=MessageStatus.PENDING)
    for message_id in pending.values_list("id", flat=True):
        message_delete(thread=thread, message_id=message_id, fence=fence, outbox=outbox)
    answered = set(
        Message.objects.filter(thread_id=thread.pk, role=MessageRole.TOOL).values_list(
            "tool_call_id", flat=True
        )
    )
    written = 0
    issuers = Message.objects.filter(thread_id=thread.pk, tool_calls__isnull=False).order_by("seq")
    for issuer in issuers.select_related("parent"):
        for call in issuer.tool_calls or []:
            call_id = str(call.get("id", ""))
            if not call_id or call_id in answered:
                continue
            message_inject(
                thread=thread, role=MessageRole.TOOL, content=reason,
                name=str((call.get("function") or {}).get("name", "")), tool_call_id=call_id,
                tool_status="error", side=issuer.side, parent=issuer.parent, fence=fence,
                allow_terminated=True, outbox=outbox,
            )  # fmt: skip
            answered.add(call_id)
            written += 1
    return written


def incident_record(*, thread: Thread, fence: int, turn: Turn, incident: tuple[str, str]) -> None:
    """A recovered turn's incident (``(kind, detail)``: ``takeover`` or ``outage``): its log
    row and a ``runtime.warning`` of that code, in the caller's transaction."""
    kind, detail = incident
    log_create(
        thread=thread, kind="incident", fence=fence,
        data={"incident": kind, "turn_id": str(turn.pk), "fence": fence, "detail": detail},
    )  # fmt: skip
    publish(thread, "runtime.warning", {"flow_id": "", "code": kind, "message": detail})

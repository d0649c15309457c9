"""WebSocket consumers: a thread's events (``/ws/threads/{id}/``) and a tenant's thread
lifecycle (``/ws/events/``).

Both accept the socket first and then close with an application code and a reason text, so
that browsers see them: ``4400`` a malformed ``after``; ``4401`` no valid credentials, also
later, when the socket's key is revoked or expires, its membership is removed, or its tenant
or user is deactivated (``tenancy.credentials``); ``4404`` no such thread in the caller's tenant;
``4410`` the thread is terminated (after its events were sent); ``4429`` too many failed
API-key authentications from the client's address (``tenancy.throttling``; the reason says
when to retry). A client may send ``ping`` (or ``{"type": "ping"}``) and gets
``{"type": "pong"}``.

A thread socket whose ``after`` falls before the part of the log the retention policy kept
first gets ``{"type": "error", "error": {"code": "events_pruned", ...}}`` (the REST list's
410), then the events from the oldest kept one on.

A thread socket also reads the log when nothing arrived live for a while
(``threads.streams.IDLE_RECHECK_S``), so an event whose layer message was dropped reaches it
even when no later event follows.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from common.errors import AuthThrottled
from common.time import now
from tenancy.authentication import BEARER_SUBPROTOCOL_PREFIX
from tenancy.credentials import credential_groups, credentials_expire_at
from tenancy.principals import Principal
from threads.broadcast import unbatched
from threads.events import EventType, tenant_group, thread_group
from threads.models import Thread
from threads.services.events import event_resume_point
from threads.streams import Delivery, EventCursor

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TERMINATED = 4410
CLOSE_THROTTLED = 4429
# The reason text each close frame carries (at most 123 bytes, the protocol's limit).
CLOSE_REASONS = {
    CLOSE_BAD_REQUEST: "bad request: after must be a whole number",
    CLOSE_UNAUTHENTICATED: "unauthenticated: no valid API key or session, or it ended",
    CLOSE_NOT_FOUND: "not found: no such thread in your tenant",
    CLOSE_TERMINATED: "the thread is terminated",
}
# After a live ``thread.terminated``, how long the socket stays open for the aborted flow's
# last events before closing with 4410 (a client that needs them all reconnects with after).
TERMINATED_DRAIN_S = 1.0
PONG = json.dumps({"type": "pong"})


def _subprotocol(scope: dict[str, Any]) -> str | None:
    """The subprotocol to accept: the first one offered that is not a credential, else the
    credential (browsers fail a socket whose offered protocol is not echoed)."""
    offered: list[str] = list(scope.get("subprotocols") or [])
    plain = [item for item in offered if not item.startswith(BEARER_SUBPROTOCOL_PREFIX)]
    chosen = plain or offered
    return chosen[0] if chosen else None


def _thread_of(principal: Principal, thread_id: str) -> Thread | None:
    return Thread.objects.for_tenant(principal.tenant).filter(id=thread_id).first()


def _is_ping(text: str | None) -> bool:
    if text is None:
        return False
    if text.strip() == "ping":
        return True
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python can read
        return False
    return isinstance(data, dict) and data.get("type") == "ping"


class _EventSocket(AsyncWebsocketConsumer):
    groups_joined: list[str]
    expiry: asyncio.Task[None] | None = None

    async def _open(self) -> Principal | None:
        """Accept, then close 4401 without a principal; else follow its credentials, joined
        before the accept (a revocation right after the connection is not missed)."""
        self.groups_joined = []
        principal: Principal | None = self.scope.get("principal")
        if principal is not None:
            for group in credential_groups(principal):
                await self._join(group)
        await self.accept(subprotocol=_subprotocol(self.scope))
        if principal is None:
            await self._refuse(self.scope.get("auth_error"))
            return None
        expires_at = credentials_expire_at(principal)
        if expires_at is not None:
            self.expiry = asyncio.create_task(self._close_at(expires_at))
        return principal

    async def _refuse(self, error: dict[str, Any] | None) -> None:
        """Close a socket without a principal: 4429 with the throttle's message (it says when
        to retry), else 4401."""
        if error is not None and error.get("code") == AuthThrottled.code:
            retry_after_s = error["details"]["retry_after_s"]
            reason = (
                f"too many failed authentications from your address; retry in {retry_after_s} s"
            )
            await self.close(code=CLOSE_THROTTLED, reason=reason)
        else:
            await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _join(self, group: str) -> None:
        self.groups_joined.append(group)
        await self.channel_layer.group_add(group, self.channel_name)

    async def credentials_revoked(self, message: dict[str, Any]) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _close_at(self, moment: dt.datetime) -> None:
        await asyncio.sleep(max(0.0, (moment - now()).total_seconds()))
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if _is_ping(text_data):
            await self.send(text_data=PONG)

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        """Close with ``code`` and its reason text (:data:`CLOSE_REASONS`) unless one is given."""
        if reason is None and isinstance(code, int) and not isinstance(code, bool):
            reason = CLOSE_REASONS.get(code)
        await super().close(code=code, reason=reason)

    async def disconnect(self, code: int) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)


class ThreadEventsConsumer(_EventSocket):
    """Replays a thread's events after ``?after=N`` (default 0), then follows it live;
    ``?reasoning=1`` also sends ``reasoning.delta``."""

    cursor: EventCursor | None = None
    closing: asyncio.Task[None] | None = None
    rechecking: asyncio.Task[None] | None = None
    # Held while the cursor reads and its deliveries are sent: live messages (dispatched on
    # the consumer's task) and idle rechecks (on their own task) take turns, so sequences
    # go out in order and each once.
    relaying: asyncio.Lock

    async def connect(self) -> None:
        principal = await self._open()
        if principal is None:
            return
        thread_id = str(self.scope["url_route"]["kwargs"]["thread_id"])
        thread = await database_sync_to_async(_thread_of)(principal, thread_id)
        if thread is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        raw_after = (query.get("after") or [""])[0]
        if raw_after and not raw_after.isdigit():
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        start, pruned = await database_sync_to_async(event_resume_point)(
            thread=thread, after=int(raw_after) if raw_after else None
        )
        if pruned is not None:
            await self.send(text_data=json.dumps({"type": "error", "error": pruned.as_dict()}))
        # Subscribe before replaying: what is published meanwhile waits in the layer and is
        # de-duplicated against the replay by the cursor.
        await self._join(thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk))
        reasoning = (query.get("reasoning") or [""])[0] in ("1", "true", "yes")
        self.relaying = asyncio.Lock()
        self.cursor = EventCursor(thread=thread, after=start, reasoning=reasoning)
        async for delivery in self.cursor.replay():
            await self._deliver(delivery)
        if thread.terminated_at is not None:
            await self.close(code=CLOSE_TERMINATED)
            return
        self.rechecking = asyncio.create_task(self._recheck_when_idle(self.cursor))

    async def event_message(self, message: dict[str, Any]) -> None:
        if self.cursor is None:
            return
        async with self.relaying:
            for one in unbatched(message):
                for delivery in await self.cursor.admit(one):
                    await self._deliver(delivery)

    async def _recheck_when_idle(self, cursor: EventCursor) -> None:
        """Read the log whenever the cursor says nothing arrived for a while, and send what
        the layer failed to bring (runs until the socket closes)."""
        while True:
            await asyncio.sleep(cursor.recheck_in())
            if cursor.recheck_in() > 0:
                continue  # a live event came meanwhile: the check moved later
            async with self.relaying:
                try:
                    for delivery in await cursor.recheck():
                        await self._deliver(delivery)
                except Exception:
                    # A failed read (the database away) is tried again after the next delay.
                    logger.warning("thread socket: rechecking the event log failed", exc_info=True)

    async def _deliver(self, delivery: Delivery) -> None:
        await self.send(text_data=delivery.text)
        if delivery.type == EventType.THREAD_TERMINATED and self.closing is None:
            self.closing = asyncio.create_task(self._close_terminated())

    async def _close_terminated(self) -> None:
        await asyncio.sleep(TERMINATED_DRAIN_S)
        await self.close(code=CLOSE_TERMINATED)

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        self._stop_rechecking()
        await super().close(code=code, reason=reason)

    async def disconnect(self, code: int) -> None:
        self._stop_rechecking()
        await super().disconnect(code)

    def _stop_rechecking(self) -> None:
        if self.rechecking is not None and self.rechecking is not asyncio.current_task():
            self.rechecking.cancel()


class TenantEventsConsumer(_EventSocket):
    """Thread lifecycle events of the caller's tenant (created, updated, status, terminated,
    deleted), live only: they carry their thread's sequence, and a client that needs the
    history reads each thread's log."""

    async def connect(self) -> None:
        principal = await self._open()
        if principal is None:
            return
        await self._join(tenant_group(tenant_id=principal.tenant.id))

    async def event_message(self, message: dict[str, Any]) -> None:
        for one in unbatched(message):
            text = one.get("json")
            if isinstance(text, str):
                await self.send(text_data=text)

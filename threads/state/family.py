"""``ThreadState``'s subagent family (spec DIGEST §6.3-§6.4, §12): the registry of children,
the parent and child threads, and a child's messages and status to its parent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from common.errors import ValidationFailed
from threads.models import SubagentLink, Thread, TurnSource
from threads.services.inbox import message_queue
from threads.services.subagents import (
    child_get,
    children_of,
    link_json,
    link_status_set,
    owner_role,
)
from threads.state.base import StateBase

if TYPE_CHECKING:
    from threads.state.thread_state import ThreadState

MAX_STATUS = 200


class FamilyMixin(StateBase):
    @property
    def children(self) -> list[dict[str, Any]]:
        """The registry entries of this thread's subagents (``SubagentRegistryEntry``)."""
        return [link_json(link) for link in children_of(thread=self._thread)]

    def get_child_thread(self, reference_id: str) -> ThreadState | None:
        """The child thread ``reference_id`` at rest (only this thread's own children)."""
        child = child_get(parent=self._thread, reference=reference_id)
        return self._family_state(child) if child is not None else None

    def get_parent_thread(self) -> ThreadState | None:
        """The parent thread at rest, or None for a top-level thread."""
        if self._thread.parent_id is None:
            return None
        parent = Thread.objects.select_related("tenant").get(pk=self._thread.parent_id)
        return self._family_state(parent)

    def notify_parent(self, content: str) -> str | None:
        """Queue a silent message to the parent (role by the owning side, ``metadata
        .subagent_id``): it starts a turn there, after the parent's current work. Returns the
        message id it will have; None without a parent. ``content`` must not be empty."""
        if not isinstance(content, str) or not content.strip():
            raise ValidationFailed("notify_parent needs a non-empty message", field="content")
        link = SubagentLink.objects.filter(child_id=self._thread.pk).select_related("thread")
        found = link.first()
        if found is None:
            return None
        turn = message_queue(
            thread=found.thread, role=owner_role(found.owner), content=content, silent=True,
            source=TurnSource.SUBAGENT,
            metadata={"subagent_id": str(self._thread.pk), "status_kind": "subagent_event",
                      "subagent_event": "notification"},
        )  # fmt: skip
        return str(turn.payload["message_id"])

    def set_status(self, status: str) -> None:
        """Set this child's status text in its parent's registry (``subagent.status``); a
        no-op without a parent. ``status`` must not be empty (at most 200 characters)."""
        if not isinstance(status, str) or not status.strip():
            raise ValidationFailed("set_status needs a non-empty status", field="status")
        if len(status) > MAX_STATUS:
            raise ValidationFailed(f"status is at most {MAX_STATUS} characters", field="status")
        link_status_set(child=self._thread, status=status.strip())

    def _family_state(self, thread: Thread) -> ThreadState:
        return cast("ThreadState", type(self)(thread))

"""``ThreadState``'s messages and logs: reading, injecting, updating, deleting and queueing
messages (through the message hooks), and reading the thread's logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from agents.registry import HookName
from threads.models import TurnSource, TurnStrategy
from threads.runtime.hooks import thread_hooks
from threads.services import logs, messages
from threads.services.inbox import message_queue
from threads.services.message_shapes import message_json
from threads.state.base import StateBase
from threads.state.execution import MessagesResult

if TYPE_CHECKING:
    from threads.state.thread_state import ThreadState


class MessagesMixin(StateBase):
    def get_messages(
        self,
        *,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "desc",
        include_silent: bool = False,
        max_depth: int | None = None,
    ) -> MessagesResult:
        page = messages.message_list(
            thread=self._thread, limit=limit, offset=offset, order=order,
            include_silent=include_silent, max_depth=max_depth,
        )  # fmt: skip
        return MessagesResult([message_json(m) for m in page.messages], page.total, page.has_more)

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        found = messages.message_get(thread=self._thread, message_id=message_id)
        return message_json(found) if found is not None else None

    def inject_message(
        self,
        *,
        role: str,
        content: str | None,
        silent: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Persist a message now; it starts nothing. ``before_create_message`` may change
        content, metadata and silent, and its error prevents the insert (spec §8)."""
        hooks = thread_hooks(cast("ThreadState", self))
        proposed: dict[str, Any] = {"role": role, "content": content, "silent": silent,
                                    "metadata": {**self.message_metadata,
                                                 **(metadata or {})}}  # fmt: skip
        changed = hooks.transform_strict(HookName.BEFORE_CREATE_MESSAGE, proposed)
        if isinstance(changed, Mapping):
            proposed.update({key: changed[key] for key in ("content", "silent", "metadata")
                             if key in changed})  # fmt: skip
        created = messages.message_inject(
            thread=self._thread, role=role, content=proposed["content"],
            silent=bool(proposed["silent"]), metadata=proposed["metadata"], outbox=self.outbox,
        )  # fmt: skip
        hooks.notify(HookName.AFTER_CREATE_MESSAGE, message_json(created))
        return message_json(created)

    def update_message(
        self,
        message_id: str,
        *,
        content: Any = messages.UNSET,
        metadata: Any = messages.UNSET,
    ) -> dict[str, Any]:
        """Change content and/or merge metadata, through ``before_update_message`` (which may
        change the updates) and ``after_update_message``."""
        hooks = thread_hooks(cast("ThreadState", self))
        updates = {key: value for key, value in (("content", content), ("metadata", metadata))
                   if value is not messages.UNSET}  # fmt: skip
        changed = hooks.transform(HookName.BEFORE_UPDATE_MESSAGE, updates, message_id)
        if isinstance(changed, Mapping):
            updates = dict(changed)
        updated = messages.message_update(
            thread=self._thread, message_id=message_id,
            content=updates.get("content", messages.UNSET),
            metadata=updates.get("metadata", messages.UNSET),
        )  # fmt: skip
        hooks.notify(HookName.AFTER_UPDATE_MESSAGE, message_json(updated))
        return message_json(updated)

    def delete_message(self, message_id: str) -> bool:
        return messages.message_delete(
            thread=self._thread, message_id=message_id, outbox=self.outbox
        )

    def queue_message(
        self,
        *,
        role: str,
        content: str | None,
        attachments: Any = (),
        silent: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a message. During a turn it joins that turn and is drained before its next
        step; from outside a flow it joins the thread's running turn, if one runs
        (``multitask_strategy=join``), else it is a turn of its own (``user`` -> side A
        acts, ``assistant`` -> side B). Returns the message id it will have. Conflict on a
        terminated thread."""
        flow = self._flow
        turn = message_queue(
            thread=self._thread, role=role, content=content, attachments=list(attachments),
            silent=silent, metadata={**self.message_metadata, **(metadata or {})},
            source=self.queue_source if flow is None else TurnSource.QUEUE_MESSAGE,
            host=flow.turn if flow is not None else None, outbox=self.outbox,
            strategy=TurnStrategy.JOIN,
        )  # fmt: skip
        if flow is not None:
            flow.input_joined()
        return str(turn.payload["message_id"])

    # Logs ----------------------------------------------------------------------

    def get_logs(
        self, *, limit: int = 100, offset: int = 0, order: Literal["asc", "desc"] = "desc"
    ) -> list[dict[str, Any]]:
        rows, _ = logs.log_list(thread=self._thread, limit=limit, offset=offset, order=order)
        return [logs.log_json(row) for row in rows]

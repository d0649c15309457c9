"""The core every part of ``ThreadState`` builds on: the thread, the running flow's
execution and outbox (None at rest), and the thread's identity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from threads.events import Outbox
from threads.models import Thread
from threads.state.execution import ExecutionState

if TYPE_CHECKING:
    from threads.runtime.engine import Flow


class StateBase:
    """A thread, its execution while a flow runs, and its identity (spec Threads §1.2.1)."""

    def __init__(
        self,
        thread: Thread,
        *,
        execution: ExecutionState | None = None,
        tool_env: Mapping[str, str] | None = None,
        prompt_name: str | None = None,
        tool_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._thread = thread
        self.execution = execution
        self.context: dict[str, Any] = {}
        self._tool_env = dict(tool_env or {})
        self._tool_options = dict(tool_options or {})
        self._prompt_name = prompt_name
        self._not_packable_runtime_context: dict[str, Any] | None = None
        self._flow: Flow | None = None  # set by the engine for tools and hooks of a flow
        # Merged into the metadata of every message this state injects or queues (an
        # effect's handler: ``{"scheduled_effect": {id, name}}``, DIGEST §9).
        self.message_metadata: dict[str, Any] = {}
        # The source of the turns its queued messages start (an effect's: ``effect``).
        self.queue_source: str = "queue_message"

    @property
    def thread(self) -> Thread:
        return self._thread

    @property
    def outbox(self) -> Outbox | None:
        """The running turn's outbox (None at rest): what this state writes is its turn's."""
        return self._flow.outbox if self._flow is not None else None

    @property
    def tool_options(self) -> dict[str, Any]:
        """The static ``options`` of the prompt's ``tools[]`` entry for the running tool
        (``{}`` when it sets none, and outside a tool call)."""
        return dict(self._tool_options)

    @property
    def prompt_name(self) -> str | None:
        """The prompt this state acts for (a tool's or hook's prompt), when known."""
        return self._prompt_name

    @property
    def thread_id(self) -> str:
        return str(self._thread.id)

    @property
    def agent_id(self) -> str:
        return self._thread.agent_name

    @property
    def user_id(self) -> str | None:
        return self._thread.user_id or None

    @property
    def created_at(self) -> int:
        return self._thread.created_at

    @property
    def terminated(self) -> int | None:
        return self._thread.terminated_at

    @property
    def arguments(self) -> Any:
        return self._thread.arguments

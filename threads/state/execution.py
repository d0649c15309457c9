"""What a running flow exposes to tools and hooks (``ExecutionState``) and the page of
messages ``get_messages`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agents.providers.base import AbortSignal


@dataclass
class ExecutionState:
    """What a running flow exposes (spec Threads §9); the engine fills and drives it."""

    flow_id: str
    current_side: Literal["a", "b"] = "a"
    step_count: int = 0
    side_a_step_count: int = 0
    side_b_step_count: int = 0
    stopped: bool = False
    stopped_by: Literal["a", "b"] | None = None
    message_history: list[dict[str, Any]] = field(default_factory=list)
    abort_signal: AbortSignal = field(default_factory=AbortSignal)
    forced_side: Literal["a", "b"] | None = None
    # Tools queued by state.queue_tool during the step; they run after its own calls.
    tool_queue: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def force_turn(self, side: Literal["a", "b"]) -> None:
        """The next turn goes to ``side`` (forcing a human side parks the flow)."""
        if side not in ("a", "b"):
            raise ValueError("side must be 'a' or 'b'")
        self.forced_side = side

    def stop(self) -> None:
        """Stop the flow as a user stop would: the model call and tools are aborted."""
        self.stopped = True
        self.abort_signal.set()


@dataclass(frozen=True)
class MessagesResult:
    messages: list[dict[str, Any]]
    total: int
    has_more: bool

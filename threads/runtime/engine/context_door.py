"""The engine's one door to context management (compaction lives above the engine, in
:mod:`compaction`, and registers itself here when its app is ready).

A flow asks the door four things: the stored history a step's context is built from (the
manager may substitute an overlay for a range of it), whether a built context must shrink
before it is sent (and the rebuilt one if so), what to do when a provider refused a context
as too long (shrink it, so the step is tried once more), and which tools the manager offers
(the tool inventory asks that last one without a flow). It also tells the door what the
provider reported for each call and when a turn ended.

Without a registered manager the history is the thread's stored messages as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agents.documents import PromptDoc
from agents.providers.base import LLMMessage
from threads.models import Thread
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.base import Side
from threads.services.message_shapes import history_json

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow

Rebuild = Callable[[], list[LLMMessage]]


class ContextManager(Protocol):
    def history(
        self, flow: Flow, prompt: PromptDoc, acting: Side, after_seq: int
    ) -> list[dict[str, Any]]:
        """The top-level stored messages after ``after_seq`` a step of ``acting`` sees, in
        order, as ``message_json`` shapes them."""
        ...

    def fit(
        self, flow: Flow, prompt: PromptDoc, acting: Side, messages: list[LLMMessage],
        rebuild: Rebuild,
    ) -> list[LLMMessage]:  # fmt: skip
        """``messages`` about to be sent, or a smaller context (rebuilt with ``rebuild``)
        when they would not fit the model's window."""
        ...

    def recover(self, flow: Flow, prompt: PromptDoc, acting: Side) -> bool:
        """The provider refused the step's context as too long: shrink it; True when the
        step may be tried once more."""
        ...

    def observed(self, flow: Flow, prompt: PromptDoc, sent: int, input_tokens: int) -> None:
        """The provider counted ``input_tokens`` for a context of ``sent`` messages."""
        ...

    def tools(self, flow: Flow, prompt: PromptDoc) -> Mapping[str, ResolvedTool]:
        """Tools the manager offers on this thread, besides the prompt's."""
        ...

    def turn_ended(self, flow: Flow, prompt: PromptDoc) -> None:
        """The flow's turn ended and the thread is at rest (the idle moment)."""
        ...

    def offered(self, thread: Thread, side: Side) -> Mapping[str, ResolvedTool]:
        """Without a flow (the tool inventory): the tools a step of ``side`` on ``thread``
        would be offered besides the prompt's."""
        ...


class StoredHistory:
    """The history as stored; no compaction."""

    def history(
        self, flow: Flow, prompt: PromptDoc, acting: Side, after_seq: int
    ) -> list[dict[str, Any]]:
        return history_json(thread=flow.thread, after_seq=after_seq)

    def fit(
        self, flow: Flow, prompt: PromptDoc, acting: Side, messages: list[LLMMessage],
        rebuild: Rebuild,
    ) -> list[LLMMessage]:  # fmt: skip
        return messages

    def recover(self, flow: Flow, prompt: PromptDoc, acting: Side) -> bool:
        return False

    def observed(self, flow: Flow, prompt: PromptDoc, sent: int, input_tokens: int) -> None:
        return None

    def tools(self, flow: Flow, prompt: PromptDoc) -> Mapping[str, ResolvedTool]:
        return {}

    def turn_ended(self, flow: Flow, prompt: PromptDoc) -> None:
        return None

    def offered(self, thread: Thread, side: Side) -> Mapping[str, ResolvedTool]:
        return {}


_manager: list[ContextManager] = [StoredHistory()]


def context_manager() -> ContextManager:
    return _manager[0]


def context_manager_set(manager: ContextManager) -> ContextManager:
    """Install ``manager``; returns the one it replaces (tests put it back)."""
    previous, _manager[0] = _manager[0], manager
    return previous

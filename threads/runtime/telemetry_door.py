"""The engine's one door to telemetry (traces and the ids log lines carry live above the
engine, in :mod:`observability`, which registers itself here when its app is ready).

The engine opens a block at five points and the door says what each is: a drive of a
thread's inbox, a turn, a model call, a tool call and a sandbox call. Blocks nest as the
work does (a blocking subagent's child thread is driven inside its parent's tool call), so
whatever context the door keeps for a block is seen by the blocks inside it. A model call's
and a tool call's block yield a record to which the engine hands what came back.

A door adds no SQL: it reads only what the engine passes it. Without a registered
telemetry every block is a no-op.
"""

from __future__ import annotations

import contextlib
import uuid
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from agents.documents import PromptDoc
from agents.providers.base import ModelSpec, ProviderRequest, ProviderResponse, ToolCall
from agents.registry import ToolResult

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


class ModelCallRecord(Protocol):
    def responded(self, spec: ModelSpec, response: ProviderResponse) -> None:
        """The call was answered by ``spec`` (the model asked for, or a fallback)."""
        ...


class ToolCallRecord(Protocol):
    def ended(self, result: ToolResult) -> None:
        """The call's result, as it will be stored (after the hooks)."""
        ...


class Telemetry(Protocol):
    def drive(
        self, *, tenant_id: uuid.UUID | str, thread_id: uuid.UUID | str
    ) -> AbstractContextManager[None]:
        """A worker runs a thread's pending work (:func:`threads.runtime.driver.thread_drive`)."""
        ...

    def turn(self, flow: Flow) -> AbstractContextManager[None]:
        """``flow`` runs its turn until it ends or rests (:meth:`Flow.run`)."""
        ...

    def model_call(
        self, flow: Flow, spec: ModelSpec, prompt: PromptDoc, request: ProviderRequest
    ) -> AbstractContextManager[ModelCallRecord]:
        """A model call of ``prompt`` to ``spec`` (its retries and fallbacks included)."""
        ...

    def tool_call(self, flow: Flow, call: ToolCall) -> AbstractContextManager[ToolCallRecord]:
        """A tool call, from its start to its result (its permission already weighed)."""
        ...

    def sandbox_call(self, flow: Flow, name: str) -> AbstractContextManager[None]:
        """Code of tool ``name`` runs in the sandbox (a code tool, or a ``code`` program)."""
        ...


class _Unrecorded:
    def responded(self, spec: ModelSpec, response: ProviderResponse) -> None:
        return None

    def ended(self, result: ToolResult) -> None:
        return None


UNRECORDED = _Unrecorded()


class NoTelemetry:
    """Nothing is traced and no ids are bound."""

    def drive(
        self, *, tenant_id: uuid.UUID | str, thread_id: uuid.UUID | str
    ) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def turn(self, flow: Flow) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def model_call(
        self, flow: Flow, spec: ModelSpec, prompt: PromptDoc, request: ProviderRequest
    ) -> AbstractContextManager[ModelCallRecord]:
        return contextlib.nullcontext(UNRECORDED)

    def tool_call(self, flow: Flow, call: ToolCall) -> AbstractContextManager[ToolCallRecord]:
        return contextlib.nullcontext(UNRECORDED)

    def sandbox_call(self, flow: Flow, name: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()


_telemetry: list[Telemetry] = [NoTelemetry()]


def telemetry() -> Telemetry:
    return _telemetry[0]


def telemetry_set(implementation: Telemetry) -> Telemetry:
    """Install ``implementation``; returns the one it replaces (tests put it back)."""
    previous, _telemetry[0] = _telemetry[0], implementation
    return previous

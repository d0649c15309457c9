"""Running hooks (spec DIGEST §8): which ids apply, in what order, and the error policy.

A hook runs only if referenced: the active prompt's ``hooks`` when non-empty, else the
agent's. Each implementation is called ``function(state, *arguments, context)`` where
``context`` is the HookExecutionContext ``{"source": {"kind": "prompt", "promptName"} |
{"kind": "agent", "agentName"}}``. Transforming hooks chain: each gets the previous one's
value. A hook that raises is logged and its input is kept; only ``prefilter_llm_history``
may block the step, by raising an exception with a true ``block`` attribute.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents import selectors
from agents.registry import HookEntry, HookName, RegistryView, current_registry
from common.errors import NotFound

if TYPE_CHECKING:
    from threads.state import ThreadState

logger = logging.getLogger(__name__)


class HookBlocked(Exception):
    """``prefilter_llm_history`` blocked the step (the flow stops with ``hook_blocked``)."""

    def __init__(self, hook_id: str, reason: str) -> None:
        super().__init__(f"hook {hook_id!r} blocked the step: {reason}")
        self.hook_id = hook_id
        self.reason = reason


class Hooks:
    """The hooks that apply to one prompt of one agent, for one ThreadState."""

    def __init__(
        self,
        *,
        registry: RegistryView,
        state: ThreadState,
        prompt_name: str | None,
        prompt_hooks: Sequence[str],
        agent_name: str,
        agent_hooks: Sequence[str],
    ) -> None:
        self.state = state
        if prompt_hooks:
            ids, source = prompt_hooks, {"kind": "prompt", "promptName": prompt_name}
        else:
            ids, source = agent_hooks, {"kind": "agent", "agentName": agent_name}
        self.context = {"source": source}
        self._entries = [entry for hook_id in ids if (entry := registry.hook(hook_id))]

    def entries(self, hook: HookName) -> list[HookEntry]:
        return [entry for entry in self._entries if entry.hook == hook]

    def has(self, hook: HookName) -> bool:
        return any(entry.hook == hook for entry in self._entries)

    def notify(self, hook: HookName, *arguments: Any) -> None:
        """Run every implementation of an observing hook; errors are logged."""
        for entry in self.entries(hook):
            self._call(entry, arguments)

    def transform(self, hook: HookName, value: Any, *before: Any, keep_none: bool = False) -> Any:
        """Chain ``value`` through the implementations, called ``(state, *before, value,
        context)``. A hook answering None keeps the value, unless ``keep_none`` (then None is
        the answer and ends the chain: ``after_tool_call_*`` use it for "store nothing")."""
        for entry in self.entries(hook):
            try:
                result = self._run(entry, *before, value)
            except Exception:
                logger.exception("hook %s (%s) failed; its input is kept", entry.id, hook)
                continue
            if result is None:
                if keep_none:
                    return None
                continue
            value = result
        return value

    def transform_strict(self, hook: HookName, value: Any) -> Any:
        """Like :meth:`transform` but an error propagates (``before_create_message`` on the
        ``inject_message`` path prevents the insert)."""
        for entry in self.entries(hook):
            result = self._run(entry, value)
            if result is not None:
                value = result
        return value

    def prefilter(self, messages: list[Any]) -> list[Any]:
        """``prefilter_llm_history``; raises HookBlocked when a hook blocks the step."""
        for entry in self.entries(HookName.PREFILTER_LLM_HISTORY):
            try:
                result = self._run(entry, messages)
            except Exception as error:
                if getattr(error, "block", False):
                    raise HookBlocked(entry.id, str(error) or type(error).__name__) from error
                logger.exception("hook %s (prefilter_llm_history) failed; input kept", entry.id)
                continue
            if result is not None:
                messages = list(result)
        return messages

    def _call(self, entry: HookEntry, arguments: Sequence[Any]) -> None:
        try:
            self._run(entry, *arguments)
        except Exception:
            logger.exception("hook %s (%s) failed", entry.id, entry.hook)

    def _run(self, entry: HookEntry, *arguments: Any) -> Any:
        """One implementation, called ``(state, *arguments, context)``. Its events are
        written as it publishes them, even when the engine batches its own (user code may
        publish from savepoints it rolls back)."""
        outbox = self.state.outbox
        with outbox.unbatched() if outbox is not None else contextlib.nullcontext():
            return entry.function(self.state, *arguments, self.context)


def thread_hooks(state: ThreadState) -> Hooks:
    """The hooks of ``state``'s thread at rest: its prompt's (side A's unless the state
    names one), else its agent's. No hooks when the agent no longer exists."""
    thread = state.thread
    view = current_registry().visible_to(thread.tenant.slug)
    try:
        agent = selectors.agent_load(tenant=thread.tenant, name=thread.agent_name)
    except NotFound:
        return Hooks(registry=view, state=state, prompt_name=None, prompt_hooks=(),
                     agent_name=thread.agent_name, agent_hooks=())  # fmt: skip
    prompt_name = state.prompt_name or agent.side_a.prompt
    try:
        prompt_hooks = selectors.prompt_load(tenant=thread.tenant, name=prompt_name).hooks
    except NotFound:
        prompt_hooks = []
    return Hooks(
        registry=view,
        state=state,
        prompt_name=prompt_name,
        prompt_hooks=prompt_hooks,
        agent_name=agent.name,
        agent_hooks=agent.hooks,
    )

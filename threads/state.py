"""ThreadState: the one interface tools, hooks, effects and endpoints use on a thread.

Names follow the spec in snake_case (docs/threads.md maps each to the spec's
name). At rest (endpoints, effects) ``execution`` is None; the engine passes an
ExecutionState while a flow runs. Methods that need the engine raise
NotAvailable until that part of the platform exists.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agents import selectors as definitions
from agents.documents import AgentDoc, PromptDoc
from agents.providers.base import AbortSignal, ModelSpec
from common.errors import NotAvailable, NotFound
from threads.events import Outbox, publish
from threads.models import Thread, TurnSource
from threads.services import logs, messages

if TYPE_CHECKING:
    from sandbox import CodeExecution
    from threads.models import ThreadFile
    from threads.runtime.engine import Flow


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


def _engine_only(method: str, issue: str) -> NotAvailable:
    return NotAvailable(f"ThreadState.{method} needs the {issue}, which this deployment lacks")


class ThreadState:
    """A thread, as seen by code the operator or tenant wrote."""

    def __init__(
        self,
        thread: Thread,
        *,
        execution: ExecutionState | None = None,
        tool_env: Mapping[str, str] | None = None,
        prompt_name: str | None = None,
    ) -> None:
        self._thread = thread
        self.execution = execution
        self.context: dict[str, Any] = {}
        self._tool_env = dict(tool_env or {})
        self._prompt_name = prompt_name
        self._not_packable_runtime_context: dict[str, Any] | None = None
        self._flow: Flow | None = None  # set by the engine for tools and hooks of a flow

    # Identity ------------------------------------------------------------------

    @property
    def thread(self) -> Thread:
        return self._thread

    @property
    def outbox(self) -> Outbox | None:
        """The running turn's outbox (None at rest): what this state writes is its turn's."""
        return self._flow.outbox if self._flow is not None else None

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

    # Messages ------------------------------------------------------------------

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
        return MessagesResult(
            [messages.message_json(m) for m in page.messages], page.total, page.has_more
        )

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        found = messages.message_get(thread=self._thread, message_id=message_id)
        return messages.message_json(found) if found is not None else None

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
        from agents.registry import HookName
        from threads.runtime.hooks import thread_hooks

        hooks = thread_hooks(self)
        proposed: dict[str, Any] = {"role": role, "content": content, "silent": silent,
                                    "metadata": dict(metadata or {})}  # fmt: skip
        changed = hooks.transform_strict(HookName.BEFORE_CREATE_MESSAGE, proposed)
        if isinstance(changed, Mapping):
            proposed.update({key: changed[key] for key in ("content", "silent", "metadata")
                             if key in changed})  # fmt: skip
        created = messages.message_inject(
            thread=self._thread, role=role, content=proposed["content"],
            silent=bool(proposed["silent"]), metadata=proposed["metadata"], outbox=self.outbox,
        )  # fmt: skip
        hooks.notify(HookName.AFTER_CREATE_MESSAGE, messages.message_json(created))
        return messages.message_json(created)

    def update_message(
        self, message_id: str, *, content: Any = messages.UNSET, metadata: Any = messages.UNSET
    ) -> dict[str, Any]:
        """Change content and/or merge metadata, through ``before_update_message`` (which may
        change the updates) and ``after_update_message``."""
        from agents.registry import HookName
        from threads.runtime.hooks import thread_hooks

        hooks = thread_hooks(self)
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
        hooks.notify(HookName.AFTER_UPDATE_MESSAGE, messages.message_json(updated))
        return messages.message_json(updated)

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
        step; at rest it is a turn of its own (``user`` -> side A acts, ``assistant`` -> side
        B). Returns the message id it will have. Conflict on a terminated thread."""
        from threads.services.inbox import message_queue

        flow = self._flow
        turn = message_queue(
            thread=self._thread, role=role, content=content, attachments=list(attachments),
            silent=silent, metadata=metadata, source=TurnSource.QUEUE_MESSAGE,
            host=flow.turn if flow is not None else None, outbox=self.outbox,
        )  # fmt: skip
        return str(turn.payload["message_id"])

    # Logs ----------------------------------------------------------------------

    def get_logs(
        self, *, limit: int = 100, offset: int = 0, order: Literal["asc", "desc"] = "desc"
    ) -> list[dict[str, Any]]:
        rows, _ = logs.log_list(thread=self._thread, limit=limit, offset=offset, order=order)
        return [logs.log_json(row) for row in rows]

    # Resources -----------------------------------------------------------------

    def load_model(self, name: str) -> ModelSpec:
        return definitions.model_load(tenant=self._thread.tenant, name=name, env=self._env_or_none)

    def load_prompt(self, name: str) -> PromptDoc:
        return definitions.prompt_load(tenant=self._thread.tenant, name=name)

    def load_agent(self, name: str) -> AgentDoc:
        return definitions.agent_load(tenant=self._thread.tenant, name=name)

    def get_model_names(self) -> list[str]:
        return definitions.model_names(tenant=self._thread.tenant)

    def get_prompt_names(self) -> list[str]:
        return definitions.prompt_names(tenant=self._thread.tenant)

    def get_agent_names(self) -> list[str]:
        return definitions.agent_names(tenant=self._thread.tenant)

    # Env -----------------------------------------------------------------------

    def _resolver(self) -> Any:
        from threads.services.env import EnvResolver

        agent: AgentDoc | None
        prompt: PromptDoc | None
        try:
            agent = self.load_agent(self._thread.agent_name)
        except NotFound:
            agent = None
        prompt_name = self._prompt_name or (agent.side_a.prompt if agent else None)
        try:
            prompt = self.load_prompt(prompt_name) if prompt_name else None
        except NotFound:
            prompt = None
        return EnvResolver(
            thread=self._thread,
            tool_env=self._tool_env,
            agent_env=agent.env if agent else {},
            prompt_env=prompt.env if prompt else {},
        )

    def env(self, name: str) -> str:
        """The value of ``name`` (thread > tool config > agent > prompt > tenant > platform).

        Raises NotFound("Environment variable not found: NAME") when no level has it.
        """
        value: str = self._resolver().value(name)
        return value

    def env_type(self, name: str) -> Literal["text", "secret"]:
        kind: Literal["text", "secret"] = self._resolver().type(name)
        return kind

    def _env_or_none(self, name: str) -> str | None:
        try:
            return self.env(name)
        except NotFound:
            return None

    def set_env(
        self, name: str, value: str, *, type: Literal["text", "secret"] | None = None
    ) -> None:
        """Write the thread's env and its non-terminated descendants' (minus names their
        agents declare scoped). ``type`` None keeps an existing type; new names are secret."""
        from threads.services.env import thread_env_set_everywhere

        thread_env_set_everywhere(thread=self._thread, name=name, value=value, type=type)

    # KV ------------------------------------------------------------------------

    def get_value(self, key: str) -> Any:
        from threads.services.values import value_get

        return value_get(thread=self._thread, key=key)

    def set_value(self, key: str, value: Any) -> None:
        from threads.services.values import value_set

        value_set(thread=self._thread, key=key, value=value, outbox=self.outbox)

    # Files -----------------------------------------------------------------------

    def write_file(
        self,
        path: str,
        data: bytes | str,
        mime_type: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        width: int | None = None,
        height: int | None = None,
    ) -> ThreadFile:
        from threads.services import files

        content = data.encode() if isinstance(data, str) else data
        record = files.file_write(
            thread=self._thread, path=path, data=content, mime_type=mime_type,
            metadata=metadata, width=width, height=height,
        )  # fmt: skip
        return record

    def read_file(self, path: str) -> bytes | None:
        from threads.services import files

        return files.file_read(thread=self._thread, path=path)

    def read_file_stream(self, path: str, *, signal: threading.Event | None = None) -> Any:
        from threads.services import files

        return files.file_read_stream(thread=self._thread, path=path, abort=signal)

    def stat_file(self, path: str) -> ThreadFile | None:
        from threads.services import files

        return files.file_stat(thread=self._thread, path=path)

    def readdir_file(self, path: str) -> list[ThreadFile]:
        from threads.services import files

        return files.file_readdir(thread=self._thread, path=path)

    def mkdir_file(self, path: str) -> ThreadFile:
        from threads.services import files

        record = files.file_mkdir(thread=self._thread, path=path)
        return record

    def rmdir_file(self, path: str) -> None:
        from threads.services import files

        files.file_rmdir(thread=self._thread, path=path)

    def unlink_file(self, path: str) -> bool:
        from threads.services import files

        return files.file_unlink(thread=self._thread, path=path)

    def get_file_stats(self) -> Any:
        from threads.services import files

        return files.file_stats(thread=self._thread)

    def grep_files(self, pattern: str, *, path: str = "/") -> Any:
        from threads.services import files

        return files.file_grep(thread=self._thread, pattern=pattern, path=path)

    def find_files(self, pattern: str) -> list[str]:
        from threads.services import files

        found: list[str] = files.file_find(thread=self._thread, pattern=pattern)
        return found

    def get_file_thumbnail(self, path: str) -> bytes | None:
        from threads.services import files

        return files.file_thumbnail(thread=self._thread, path=path)

    # Events ------------------------------------------------------------------------

    def emit(self, event: str, data: Any = None) -> None:
        """A custom event (``state.emit``): broadcast to the thread's listeners."""
        publish(self._thread, "custom", {"name": event, "data": data}, outbox=self.outbox)

    # Engine-backed (later) -----------------------------------------------------------

    def queue_tool(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """During execution: run after the current step's tool calls. At rest: starts a
        standalone execution that runs it, then lets side A respond."""
        if self.execution is not None:
            self.execution.tool_queue.append((name, dict(args or {})))
            return
        from threads.services.inbox import tool_queue

        tool_queue(thread=self._thread, name=name, args=args)

    def invoke_tool(self, name: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run a tool now and return its ToolResult. At rest a silent system message anchors
        the call in the history (``metadata.status_kind = "runtime_tool_invocation"``)."""
        from threads.runtime.invoke import tool_invoke

        return tool_invoke(state=self, name=name, args=dict(args or {}))

    def schedule_effect(self, name: str, args: Any = None, delay_ms: int = 0) -> str:
        raise _engine_only("schedule_effect", "effects runner")

    def get_scheduled_effects(self, name: str | None = None) -> list[dict[str, Any]]:
        raise _engine_only("get_scheduled_effects", "effects runner")

    def remove_scheduled_effect(self, effect_id: str) -> bool:
        raise _engine_only("remove_scheduled_effect", "effects runner")

    def run_code(self, source: str, options: Mapping[str, Any] | None = None) -> CodeExecution:
        """Run ``source`` in a fresh QuickJS sandbox (spec runtime §13, DIGEST §17); returns the
        handle at once: ``result()`` (or ``await``), ``terminate(reason)``, ``running``,
        ``reports``. Inside a flow, stopping or terminating the flow terminates it."""
        from threads.services.code import code_run

        abort = self.execution.abort_signal if self.execution is not None else None
        return code_run(source, options, abort=abort)

    def terminate(self) -> None:
        """Soft-terminate (spec runtime §10): later sends are refused (409), in-flight work
        is aborted. Idempotent."""
        from threads.services.control import thread_terminate

        thread_terminate(thread=self._thread)
        if self.execution is not None:
            self.execution.abort_signal.set()

    def stop_session(self, *, result: str = "Session stopped.", **options: Any) -> None:
        """End the current session after this step (``state_stop_session``). Needs an
        active execution."""
        if self.execution is None or self._flow is None:
            raise NotAvailable("stop_session needs an active execution (a tool or hook of a flow)")
        self._flow.stop_session(result)

    def notify_parent(self, content: str) -> None:
        raise _engine_only("notify_parent", "subagents support")

    def set_status(self, status: str) -> None:
        raise _engine_only("set_status", "subagents support")


__all__ = ["ExecutionState", "MessagesResult", "ThreadState"]

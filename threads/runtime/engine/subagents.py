"""Subagents inside a flow (spec runtime §7-§8, DIGEST §6.1, §6.3, §6.5): the agent tool of a
non-resumable relationship, the lifecycle tools that replace resumable ones
(``subagent_create``, ``subagent_message``, ``subagents``), blocking waits, and the immediate
spawns of a new thread.

A blocking call runs the child's session in this worker when it can (the child's turn is
submitted without a wake-up and driven here, so no second worker slot is needed), or waits
for the worker that holds the child; past ``SUBAGENT_WAIT_S`` it answers that the result
will arrive as a message, and the child's end then delivers it so.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from agents.documents import ImmediateConfig, ToolConfig
from agents.providers.base import ToolCall
from agents.registry import ToolResult
from common.errors import DomainError
from common.ids import new_id
from threads.models import TURN_PAUSED, SubagentLink, Thread, Turn, TurnSource
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.agent import side_prompt, tool_runner
from threads.runtime.engine.writes import message_create, stored_role
from threads.runtime.spawn import (
    IMMEDIATE_MESSAGE,
    Relationship,
    Spawned,
    SpawnRequest,
    arguments_schema,
    attachments_of,
    immediate_entries,
    live_links,
    relationship_load,
    spawn_child,
)
from threads.runtime.subagent_tools import (
    CREATE,
    LIST,
    MESSAGE,
    is_resumable,
    resumable_guidance,
)
from threads.runtime.tool_calls import FlowAborted, as_text, stored_calls
from threads.services import logs
from threads.services.attachments import attachments_copy
from threads.services.control import child_close, turn_cancel
from threads.services.env import (
    EnvInput,
    EnvValue,
    thread_env_delete,
    thread_env_get,
    thread_env_names,
)
from threads.services.inbox import message_queue
from threads.services.lock import lock_is_held
from threads.services.subagents import (
    SessionOutcome,
    children_of,
    outcome_take,
    receiver_role,
)

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow

# The driver's ``thread_drive``, handed to flows (the driver imports the engine).
DriveChild = Callable[..., Any]

# Dispatch ------------------------------------------------------------------------------------


def subagent_call(
    flow: Flow, resolved: ResolvedTool, arguments: dict[str, Any], *, side: str
) -> ToolResult:
    """Run a subagent tool call of side ``side`` (validated ``arguments``)."""
    if resolved.kind == "subagent":
        if is_resumable(resolved):  # only a runtime-forced call reaches here
            return ToolResult.failure(resumable_guidance(resolved.name))
        return _agent_call(flow, resolved, arguments, side)
    if resolved.name == CREATE:
        return _create(flow, resolved, arguments, side)
    if resolved.name == MESSAGE:
        return _message(flow, arguments)
    return ToolResult.success(registry_text(flow.thread))


def _relationship(flow: Flow, tool: ResolvedTool, side: str) -> Relationship:
    agent = flow.defs.agent(tool.name)
    if agent is None:
        raise DomainError(f"agent {tool.name!r} no longer exists")
    return Relationship(agent, tool.config, side)


def _agent_call(
    flow: Flow, resolved: ResolvedTool, arguments: dict[str, Any], side: str
) -> ToolResult:
    """A non-resumable subagent called as a tool: its arguments map to the first message,
    attachments and label (DIGEST §6.1); they are its initial arguments too."""
    relationship = _relationship(flow, resolved, side)
    config = resolved.config or ToolConfig(name=resolved.name)
    takes_arguments = arguments_schema(relationship.agent, flow.thread.tenant) is not None
    prop = config.init_user_message_property or (None if takes_arguments else "message")
    if prop is not None:
        message = as_text(arguments.get(prop, ""))
    else:
        message = json.dumps(arguments, indent=2) if arguments else ""
    paths = _paths(arguments, config.init_attachments_property)
    label_prop = config.init_agent_name_property
    label = as_text(arguments[label_prop]) if label_prop and label_prop in arguments else ""
    request = SpawnRequest(
        message=message, attachments=attachments_of(flow.thread, paths, "attachments"),
        label=label, arguments=arguments if takes_arguments else None,
        wake=not relationship.blocking,
    )  # fmt: skip
    return _start(flow, relationship, request)


def _paths(arguments: Mapping[str, Any], prop: str | None) -> list[Any]:
    if not prop or arguments.get(prop) is None:
        return []
    value = arguments[prop]
    return [value] if isinstance(value, str) else list(value)


def _create(flow: Flow, resolved: ResolvedTool, arguments: dict[str, Any], side: str) -> ToolResult:
    chosen = next(tool for tool in resolved.relationships if tool.name == arguments["agent"])
    relationship = _relationship(flow, chosen, side)
    attachments = attachments_of(flow.thread, arguments["attachments"], "attachments")
    if relationship.blocking and relationship.max_instances == 1:
        live = live_links(flow.thread, relationship.name)
        if len(live) == 1:  # DIGEST §6.3: message the one instance and await its session
            return _send(flow, live[0], arguments["message"], attachments, wait=True)
    request = SpawnRequest(
        message=arguments["message"], attachments=attachments, label=arguments["name"],
        arguments=arguments.get("arguments"), wake=not relationship.blocking,
    )  # fmt: skip
    return _start(flow, relationship, request)


def _start(flow: Flow, relationship: Relationship, request: SpawnRequest) -> ToolResult:
    spawned = spawn_child(
        parent=flow.thread, relationship=relationship, request=request,
        hooks=flow.owner_hooks(relationship.owner), fence=flow.fence, outbox=flow.outbox,
    )  # fmt: skip
    if isinstance(spawned, ToolResult):
        return spawned
    if relationship.blocking:
        return session_await(flow, spawned.link, spawned.child, spawned.turn.pk)
    return _initiated(spawned)


def _initiated(spawned: Spawned) -> ToolResult:
    reference = str(spawned.child.pk)
    return ToolResult(
        "success", result=f"The subagent was initiated successfully. Reference: {reference}",
        subagent_id=reference,
    )  # fmt: skip


def _message(flow: Flow, arguments: dict[str, Any]) -> ToolResult:
    reference = str(arguments["referenceId"]).strip()
    try:
        child_id = uuid.UUID(reference)
    except ValueError:
        child_id = None
    link = (
        SubagentLink.objects.filter(thread_id=flow.thread.pk, child_id=child_id).first()
        if child_id is not None
        else None
    )
    if link is None or link.terminated_at is not None or not link.resumable:
        live = [str(row.child_id) for row in live_links(flow.thread) if row.resumable]
        why = "is terminated" if link is not None and link.terminated_at else "is not one of yours"
        return ToolResult.failure(
            f"subagent {reference!r} {why}; live subagents: {', '.join(live) or 'none'} "
            f"(call {LIST} to see them)"
        )
    attachments = attachments_of(flow.thread, arguments["attachments"], "attachments")
    return _send(flow, link, arguments["message"], attachments, wait=False)


def _send(
    flow: Flow, link: SubagentLink, text: str, attachments: list[dict[str, Any]], *, wait: bool
) -> ToolResult:
    """Queue ``text`` to the child (after its current work, when busy); ``wait``: await the
    session it starts, as a blocking create does."""
    child = Thread.objects.select_related("tenant").get(pk=link.child_id)
    with transaction.atomic():
        copied = attachments_copy(source=flow.thread, target=child, refs=attachments)
        turn = message_queue(
            thread=child, role=receiver_role(link.receives_messages),
            content=text or None, attachments=copied, source=TurnSource.SUBAGENT, wake=not wait,
            metadata={"status_kind": "subagent_event", "subagent_event": "parent_message",
                      "parent_thread_id": str(flow.thread.pk)},
        )  # fmt: skip
        if wait:
            SubagentLink.objects.filter(pk=link.pk).update(awaited_turn=turn.pk)
        logs.log_create(
            thread=flow.thread, kind="subagent", fence=flow.fence, outbox=flow.outbox,
            data={"event": "message", "reference": str(child.pk), "turn_id": str(turn.pk)},
        )  # fmt: skip
    if wait:
        return session_await(flow, link, child, turn.pk)
    return ToolResult(
        "success", result=f"Message sent to subagent {child.pk}.", subagent_id=str(child.pk)
    )


def registry_text(thread: Thread) -> str:
    """``subagents``: one line per registry entry, ``- <ref>: <name> — <status> (<desc>)``."""
    rows = children_of(thread=thread)
    if not rows:
        return "You have no subagents."
    return "\n".join(
        f"- {row.child_id}: {row.title or row.agent_name} — {row.status}"
        + (f" ({row.description})" if row.description else "")
        for row in rows
    )


# Blocking ------------------------------------------------------------------------------------


def session_await(flow: Flow, link: SubagentLink, child: Thread, turn_id: uuid.UUID) -> ToolResult:
    """Wait for ``child``'s session ``turn_id`` (driving it here when no worker holds it)
    and answer with its outcome. A stop of this flow cancels that session. A session that
    pauses for a person, or outlasts ``SUBAGENT_WAIT_S``, answers that its result will
    arrive as a message."""
    deadline = time.monotonic() + settings.SUBAGENT_WAIT_S
    delay = 0.02
    while True:
        if flow.drive is not None and not lock_is_held(tenant_id=child.tenant_id,
                                                       thread_id=child.pk):  # fmt: skip
            flow.drive(
                thread_id=child.pk, tenant_id=child.tenant_id, runtime=flow.runtime,
                parent_abort=flow.execution.abort_signal,
            )  # fmt: skip
        found = outcome_take(link_id=link.pk, turn_id=turn_id)
        if found is not None:
            return _outcome_result(flow, link, child, found)
        if flow.aborted:
            turn = Turn.objects.filter(pk=turn_id).first()
            if turn is not None:
                turn_cancel(thread=child, turn=turn)
            outcome_take(link_id=link.pk, turn_id=turn_id, release=True)
            raise FlowAborted
        waiting = _waits_for_a_person(turn_id)
        if waiting or time.monotonic() >= deadline:
            found = outcome_take(link_id=link.pk, turn_id=turn_id, release=True)
            if found is not None:
                return _outcome_result(flow, link, child, found)
            why = (
                "waits for a person's decision (its turn is " + waiting + ")"
                if waiting
                else f"is still working after {settings.SUBAGENT_WAIT_S} s (SUBAGENT_WAIT_S)"
            )
            return ToolResult(
                "success", subagent_id=str(child.pk),
                result=f"Subagent {child.pk} {why}; its result will arrive as a message when "
                "it finishes.",
            )  # fmt: skip
        flow.idle()
        flow.execution.abort_signal.wait(delay)
        delay = min(delay * 2, 1.0)


def _waits_for_a_person(turn_id: uuid.UUID) -> str:
    """The status of the child's session turn when it rests on a person's decision (a
    blocking call does not hold its worker for that), else ""."""
    status = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first()
    return status if status in TURN_PAUSED else ""


def _outcome_result(
    flow: Flow, link: SubagentLink, child: Thread, outcome: SessionOutcome
) -> ToolResult:
    """The blocking call's result: the outcome, its attachments copied here, the reference."""
    try:
        copied = attachments_copy(source=child, target=flow.thread, refs=outcome.attachments)
    except DomainError as error:
        copied, outcome = [], SessionOutcome(
            outcome.turn_id, outcome.ok,
            f"{outcome.text}\n(its attachments could not be copied: {error.message})",
        )  # fmt: skip
    text = f"{outcome.text}\n\nReference: {child.pk}"
    logs.log_create(
        thread=flow.thread, kind="subagent", fence=flow.fence, outbox=flow.outbox,
        data={"event": "return" if outcome.ok else "failure", "reference": str(child.pk),
              "turn_id": outcome.turn_id},
    )  # fmt: skip
    if not link.resumable:
        child_close(child=child)
    refs = tuple({"type": "file", "path": ref["path"]} for ref in copied)
    if outcome.ok:
        return ToolResult("success", result=text, attachments=refs, subagent_id=str(child.pk))
    return ToolResult("error", error=text, attachments=refs, subagent_id=str(child.pk),
                      error_code="subagent_failed")  # fmt: skip


# Immediate -----------------------------------------------------------------------------------


def immediate_run(flow: Flow) -> None:
    """Spawn the immediate relationships of the flow's agent (DIGEST §6.5): ``immediate:
    true`` once; the object form once per indexed env group (``KEY``, ``KEY__2``, ... up to
    ``maxInstances``) whose keys are consumed from this thread's env. Each spawn is stored
    as a forced call of the owning side, so the model later sees the references; scoped
    values travel in the spawn, never in the call's arguments."""
    for owner, entry in immediate_entries(flow.agent, flow.thread.tenant):
        relationship = relationship_load(
            tenant=flow.thread.tenant, agent_name=entry.name, config=entry, owner=owner
        )
        if relationship is None:
            continue
        withheld = _group_names(flow.thread, entry)
        groups = _immediate_groups(flow.thread, entry, relationship, withheld)
        for request, keys in groups:
            request.exclude_env = withheld
            _immediate_spawn(flow, relationship, request)
            for key in keys:
                thread_env_delete(thread=flow.thread, name=key)


def _group_names(thread: Thread, entry: ToolConfig) -> set[str]:
    """Every name of the thread's env that belongs to an immediate group (``KEY`` or
    ``KEY__<n>``): no instance inherits another's values, nor those of groups past the cap."""
    immediate = entry.immediate
    if not isinstance(immediate, ImmediateConfig):
        return set()
    keys = {immediate.name_env, immediate.description_env, *(immediate.scoped_env or [])}
    return {
        found.name for found in thread_env_names(thread=thread)
        if re.sub(r"__\d+$", "", found.name) in keys
    }  # fmt: skip


def _immediate_groups(
    thread: Thread, entry: ToolConfig, relationship: Relationship, present: set[str]
) -> list[tuple[SpawnRequest, list[str]]]:
    """One spawn per indexed group of the object form (``present``: the env names of its
    groups, :func:`_group_names`), or one for ``immediate: true``."""
    immediate = entry.immediate
    blocking = relationship.blocking
    if not isinstance(immediate, ImmediateConfig):
        return [(SpawnRequest(IMMEDIATE_MESSAGE, label=relationship.name, wake=not blocking), [])]
    base = [key for key in (immediate.name_env, immediate.description_env) if key]
    scoped = list(immediate.scoped_env or [])
    cap = relationship.max_instances or settings.SUBAGENT_MAX_CHILDREN
    groups: list[tuple[SpawnRequest, list[str]]] = []
    for index in range(1, cap + 1):
        suffix = "" if index == 1 else f"__{index}"
        found: dict[str, EnvValue] = {}
        for key in [*base, *scoped]:
            value = None
            if key + suffix in present:  # decrypt only what is there
                value = thread_env_get(thread=thread, name=key + suffix)
            if value is not None:
                found[key] = value
        if not found:
            break
        name = found.get(immediate.name_env or "")
        description = found.get(immediate.description_env or "")
        groups.append((SpawnRequest(
            IMMEDIATE_MESSAGE, label=name.value if name else f"{relationship.name} {index}",
            description=description.value if description else "",
            scoped_env={key: EnvInput(found[key].value, found[key].type)
                        for key in scoped if key in found},
            spawn_group_id=f"immediate:{relationship.name}", wake=not blocking,
        ), [key + suffix for key in found]))  # fmt: skip
    return groups


def _immediate_spawn(flow: Flow, relationship: Relationship, request: SpawnRequest) -> None:
    owner = relationship.owner
    if relationship.resumable:
        name, visible = CREATE, {"agent": relationship.name, "message": request.message,
                                 "attachments": [], "name": request.label}  # fmt: skip
    else:
        name, visible = relationship.name, {"message": request.message}
    call = ToolCall(id=f"immediate_{new_id().hex[:12]}", name=name, arguments=visible)
    issuer = message_create(
        flow, role=stored_role(owner), content=None, tool_calls=stored_calls([call]),
        side=owner, metadata={"flow_id": flow.flow_id, "immediate": True},
    )  # fmt: skip
    runner = tool_runner(flow, side_prompt(flow, "a" if owner == "a" else "b"), owner, parent=None)
    runner.run_one(call, issuer=issuer, execute=lambda: _start(flow, relationship, request))

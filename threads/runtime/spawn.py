"""Creating child threads (spec runtime §7, DIGEST §6.3 "Create flow", §11).

:func:`spawn_child` is the one way a child comes to exist, for a model's call, an immediate
relationship and a completed variable-bootstrap request: it validates the initial arguments,
enforces ``maxInstances`` (and the platform's caps) under the parent's row lock, defers the
spawn into a variable request when required scoped variables are missing, then creates the
child (parent link, session root, env inherited minus its scoped names plus the spawn's
scoped values, ``name:<label>`` tag), runs ``after_thread_created`` on the child and
``after_subagent_created`` on the parent, keeps the registry entry, and submits the child's
first turn. Everything commits together, so a refusal leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.documents import AgentDoc, PromptDoc, ResumableConfig, ToolConfig
from agents.graph import agent_graph_variables
from agents.registry import HookName, ToolResult
from agents.schemas import ArgumentsInvalid, SchemaProblem, validate_args
from threads.events import Outbox, publish
from threads.models import SubagentLink, Thread, Turn, TurnKind, TurnSource
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.hooks import Hooks, thread_hooks
from threads.runtime.subagent_tools import MAX_LABEL
from threads.services import logs
from threads.services.attachments import attachment_at, attachments_copy
from threads.services.env import EnvInput, thread_env_copy, thread_env_set
from threads.services.inbox import message_queue, turn_submit
from threads.services.messages import message_inject
from threads.services.subagents import receiver_role
from threads.services.threads import thread_create
from threads.services.variable_requests import variable_request_create
from threads.state import ThreadState

IMMEDIATE_MESSAGE = "You were started automatically when this thread was created. Begin your task."
ENV_REQUIRED = "subagent_env_required"


@dataclass(frozen=True)
class Relationship:
    """A subagent entry of a prompt's ``tools[]`` (0.1.0 SubagentToolConfig): a dual_ai
    agent exposed as a tool, owned by side ``owner`` of the parent. Its name is the agent's."""

    agent: AgentDoc
    config: ToolConfig | None
    owner: str

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def blocking(self) -> bool:
        return self.config is None or self.config.blocking is not False

    @property
    def resumable(self) -> bool:
        return self._resumable is not None

    @property
    def _resumable(self) -> ResumableConfig | None:
        resumable = self.config.resumable if self.config is not None else None
        return resumable or None

    @property
    def max_instances(self) -> int | None:
        return self._resumable.max_instances if self._resumable else None

    @property
    def receives_messages(self) -> str:
        return self._resumable.receives_messages if self._resumable else "side_a"

    @property
    def parent_communication(self) -> str:
        resumable = self._resumable
        return (resumable.parent_communication if resumable else None) or "implicit"

    @property
    def description(self) -> str:
        return self.agent.tool_description or self.agent.description


@dataclass
class SpawnRequest:
    """What a spawn asks for: the first message, the parent's attachments to copy, the
    instance label, the initial arguments, and scoped values that come with the spawn."""

    message: str
    attachments: list[dict[str, Any]] = field(default_factory=list)
    label: str = ""
    arguments: dict[str, Any] | None = None
    scoped_env: dict[str, EnvInput] = field(default_factory=dict)
    description: str = ""
    spawn_group_id: str = ""
    wake: bool = True  # False: the caller drives the child itself (a blocking call)
    exclude_env: set[str] = field(default_factory=set)  # parent env names not inherited

    def as_json(self) -> dict[str, Any]:
        """What a variable request keeps (never a value: scoped values stay out)."""
        return {"message": self.message, "attachments": self.attachments, "label": self.label,
                "arguments": self.arguments, "description": self.description,
                "spawn_group_id": self.spawn_group_id}  # fmt: skip


@dataclass(frozen=True)
class Spawned:
    child: Thread
    link: SubagentLink
    turn: Turn


def _definitions(tenant: Any) -> FlowDefinitions:
    """The tenant's definitions through the shared cache (a spawn reads a few of them)."""
    return FlowDefinitions(tenant=tenant, model_env=lambda _name: None)


def side_a_prompt(agent: AgentDoc, tenant: Any) -> PromptDoc | None:
    return _definitions(tenant).prompt(agent.side_a.prompt)


def arguments_schema(agent: AgentDoc, tenant: Any) -> dict[str, Any] | None:
    """The schema a child's initial arguments are validated against: its side A prompt's
    ``required_schema`` (None: it takes none)."""
    prompt = side_a_prompt(agent, tenant)
    return prompt.required_schema if prompt is not None else None


def arguments_check(agent: AgentDoc, tenant: Any, arguments: Any) -> dict[str, Any] | None:
    """``arguments`` validated against the child's schema (problems under ``arguments``);
    raises ArgumentsInvalid."""
    schema = arguments_schema(agent, tenant)
    if schema is None:
        if arguments:
            raise ArgumentsInvalid([SchemaProblem("arguments", (
                f"agent {agent.name!r} takes no initial arguments (its side A prompt declares "
                "no required_schema); pass {} or leave arguments out"))])  # fmt: skip
        return None
    try:
        return validate_args(schema, arguments or {})
    except ArgumentsInvalid as error:
        raise ArgumentsInvalid([
            SchemaProblem(f"arguments.{p.path}".rstrip("."), p.message) for p in error.errors
        ]) from error  # fmt: skip


def depth_of(thread: Thread) -> int:
    """How many ancestors ``thread`` has (0: top level)."""
    depth, parent_id = 0, thread.parent_id
    while parent_id is not None:
        depth += 1
        parent_id = Thread.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()
    return depth


def scoped_requirements(agent: AgentDoc, tenant: Any) -> tuple[list[str], set[str]]:
    """The required scoped variables of ``agent``'s graph, and every scoped name in it."""
    found = [v for v in agent_graph_variables(tenant=tenant, agent_name=agent.name)
             if v.scoped and not v.beyond]  # fmt: skip
    return sorted({v.name for v in found if v.required}), {v.name for v in found}


def spawn_child(
    *,
    parent: Thread,
    relationship: Relationship,
    request: SpawnRequest,
    hooks: Hooks | None = None,
    fence: int | None = None,
    outbox: Outbox | None = None,
) -> Spawned | ToolResult:
    """Create and start a child of ``parent`` (see the module docstring); a refusal is an
    error ToolResult the model can act on. ``hooks``: the parent's (its flow's owning prompt;
    at rest its thread hooks); ``fence``/``outbox``: the parent's running flow's."""
    agent, tenant = relationship.agent, parent.tenant
    if not request.message.strip() and not request.attachments:
        return ToolResult.failure("the subagent needs a message: say what it should do")
    try:
        arguments = arguments_check(agent, tenant, request.arguments)
    except ArgumentsInvalid as error:
        return ToolResult.failure(error.message, code=error.code)
    if parent.terminated_at is not None:
        return ToolResult.failure("this thread is terminated; it cannot start subagents")
    if depth_of(parent) + 1 > settings.SUBAGENT_MAX_DEPTH:
        return ToolResult.failure(
            f"subagent {relationship.name!r} was not created: subagents may nest "
            f"{settings.SUBAGENT_MAX_DEPTH} deep (SUBAGENT_MAX_DEPTH) and this thread is at "
            "that depth; do the work here or in an existing subagent"
        )
    required, scoped = scoped_requirements(agent, tenant)
    with transaction.atomic():
        Thread.objects.select_for_update().filter(pk=parent.pk).first()
        refused = _instances_check(parent, relationship)
        if refused is not None:
            return refused
        missing = [name for name in required if name not in request.scoped_env]
        if missing:
            return _variables_request(parent, relationship, request, required, missing)
        spawned = _create(parent, relationship, request, arguments, scoped, hooks, outbox)
        logs.log_create(
            thread=parent, kind="subagent", fence=fence, outbox=outbox,
            data={"event": "create", "reference": str(spawned.child.pk),
                  "relationship": relationship.name, "label": request.label,
                  "blocking": relationship.blocking, "turn_id": str(spawned.turn.pk)},
        )  # fmt: skip
    return spawned


def live_links(parent: Thread, relationship: str | None = None) -> list[SubagentLink]:
    rows = SubagentLink.objects.filter(thread_id=parent.pk, terminated_at__isnull=True)
    if relationship is not None:
        rows = rows.filter(relationship=relationship)
    return list(rows.order_by("created_at", "id"))


def _instances_check(parent: Thread, relationship: Relationship) -> ToolResult | None:
    """``maxInstances`` over the relationship's live entries, and the platform's cap on a
    thread's live children (the caller holds the parent's row lock)."""
    cap = relationship.max_instances
    if cap is not None:
        live = live_links(parent, relationship.name)
        if len(live) >= cap:
            listed = ", ".join(f"{link.child_id} ({link.title or link.agent_name}, "
                               f"{link.status})" for link in live)  # fmt: skip
            return ToolResult.failure(
                f"subagent {relationship.name!r} was not created: it allows at most {cap} live "
                f"instance{'s' if cap != 1 else ''} (maxInstances) and has {len(live)}: "
                f"{listed}. Send work to one of them with subagent_message (referenceId), or "
                "wait until one finishes",
                code="subagent_max_instances",
                data={"max_instances": cap, "live": [str(link.child_id) for link in live]},
            )
    total = SubagentLink.objects.filter(thread_id=parent.pk, terminated_at__isnull=True).count()
    if total >= settings.SUBAGENT_MAX_CHILDREN:
        return ToolResult.failure(
            f"subagent {relationship.name!r} was not created: this thread has {total} live "
            f"subagents, the platform's cap (SUBAGENT_MAX_CHILDREN is "
            f"{settings.SUBAGENT_MAX_CHILDREN}); message or finish existing ones first",
            code="subagent_max_children",
        )
    return None


def _variables_request(
    parent: Thread,
    relationship: Relationship,
    request: SpawnRequest,
    required: list[str],
    missing: list[str],
) -> ToolResult:
    """Defer the spawn until someone provides the missing scoped values (runtime §7.5)."""
    config = relationship.config
    pending = variable_request_create(
        parent=parent, relationship=relationship.name, agent_name=relationship.agent.name,
        required=required, missing=missing, values=request.scoped_env,
        spawn={**request.as_json(), "owner": relationship.owner,
               "config": config.model_dump(mode="json") if config is not None else None},
    )  # fmt: skip
    endpoint = f"/api/v1/threads/{parent.pk}/variables/{pending.pk}"
    return ToolResult.failure(
        f"subagent {relationship.name!r} needs scoped variables that were not provided: "
        f"{', '.join(missing)}. A person must provide them at {endpoint} (request "
        f"{pending.pk}); the subagent starts as soon as they do and its result arrives then",
        code=ENV_REQUIRED,
        data={"request_id": str(pending.pk), "endpoint": endpoint, "required": required,
              "missing": missing, "agent": relationship.agent.name},
    )  # fmt: skip


def _create(
    parent: Thread,
    relationship: Relationship,
    request: SpawnRequest,
    arguments: dict[str, Any] | None,
    scoped: set[str],
    hooks: Hooks | None,
    outbox: Outbox | None,
) -> Spawned:
    label = request.label.strip()[:MAX_LABEL]
    child = thread_create(
        tenant=parent.tenant, agent_name=relationship.agent.name, user_id=parent.user_id,
        tags=[f"name:{label}"] if label else [], parent=parent,
        relationship=relationship.name, arguments=arguments,
    )  # fmt: skip
    thread_env_copy(source=parent, target=child, exclude=scoped | request.exclude_env)
    for name, item in request.scoped_env.items():
        thread_env_set(thread=child, name=name, value=item.value, type=item.type)
    child_state = ThreadState(child)
    thread_hooks(child_state).notify(HookName.AFTER_THREAD_CREATED)
    (hooks or thread_hooks(ThreadState(parent))).notify(
        HookName.AFTER_SUBAGENT_CREATED, child_state
    )
    if arguments:
        message_inject(
            thread=child, role="system", silent=True,
            content="Your initial arguments:\n" + json.dumps(arguments, indent=2),
            metadata={"status_kind": "subagent_event", "subagent_event": "initial_arguments",
                      "subagentInitialArguments": arguments},
        )  # fmt: skip
    if immediate_entries(relationship.agent, parent.tenant):
        immediate_submit(child)
    copied = attachments_copy(source=parent, target=child, refs=request.attachments)
    turn = message_queue(
        thread=child, role=receiver_role(relationship.receives_messages),
        content=request.message or None, attachments=copied, source=TurnSource.SUBAGENT,
        wake=request.wake,
        metadata={"status_kind": "subagent_event", "subagent_event": "parent_message",
                  "parent_thread_id": str(parent.pk)},
    )  # fmt: skip
    # The registry entry comes after after_subagent_created (DIGEST §6.3's order), with the
    # turn a blocking call awaits.
    link = SubagentLink.objects.create(
        tenant_id=parent.tenant_id, thread=parent, child=child, relationship=relationship.name,
        owner=relationship.owner, agent_name=relationship.agent.name, title=label,
        description=request.description or relationship.description,
        blocking=relationship.blocking, resumable=relationship.resumable,
        receives_messages=relationship.receives_messages,
        parent_communication=relationship.parent_communication,
        initial_arguments=arguments, spawn_group_id=request.spawn_group_id,
        awaited_turn=None if request.wake else turn.pk,
    )  # fmt: skip
    publish(
        parent, "subagent.spawned",
        {"subagent_id": str(child.pk), "relationship": relationship.name, "name": label,
         "status": link.status},
        outbox=outbox,
    )  # fmt: skip
    return Spawned(child, link, turn)


# Immediate relationships ---------------------------------------------------------------------


def immediate_entries(agent: AgentDoc, tenant: Any) -> list[tuple[str, ToolConfig]]:
    """``(owner side, entry)`` of every ``immediate`` entry of the agent's AI side prompts
    (read through the definitions cache: this runs for every new thread)."""
    sides = [("a", agent.side_a)]
    if agent.type == "dual_ai" and agent.side_b is not None:
        sides.append(("b", agent.side_b))
    defs = _definitions(tenant)
    found: list[tuple[str, ToolConfig]] = []
    for owner, side in sides:
        prompt = defs.prompt(side.prompt)
        if prompt is None:
            continue
        found.extend(
            (owner, ref) for ref in prompt.tools
            if isinstance(ref, ToolConfig) and ref.immediate
        )  # fmt: skip
    return found


def immediate_submit(thread: Thread, outbox: Outbox | None = None) -> Turn:
    """The turn that spawns a new thread's immediate subagents before anything else runs."""
    return turn_submit(
        thread=thread, kind=TurnKind.SPAWN, payload={}, source=TurnSource.IMMEDIATE,
        outbox=outbox,
    )  # fmt: skip


def relationship_load(
    *, tenant: Any, agent_name: str, config: ToolConfig | None, owner: str
) -> Relationship | None:
    """The relationship to ``agent_name`` (None unless it is a dual_ai agent)."""
    agent = _definitions(tenant).agent(agent_name)
    if agent is None or agent.type != "dual_ai":
        return None
    return Relationship(agent, config, owner)


def attachments_of(parent: Thread, paths: Sequence[object], field: str) -> list[dict[str, Any]]:
    """The AttachmentRefs of ``parent``'s files at ``paths`` (NotFound names the path)."""
    return [
        attachment_at(thread=parent, path=path, field=f"{field}[{index}]")
        for index, path in enumerate(paths)
    ]

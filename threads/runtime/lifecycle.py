"""Opening a thread: its required variables checked (spec DIGEST §11), the stored thread,
then its ``after_thread_created`` hooks (spec DIGEST §8), which run before any execution, in
the transaction that creates it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack

from django.db import transaction

from agents.registry import HookName
from agents.selectors import definitions_scope
from tenancy.models import Tenant
from threads.models import Thread
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.hooks import thread_hooks
from threads.runtime.spawn import immediate_entries, immediate_submit
from threads.services.env import EnvInput
from threads.services.threads import NO_COUNTS, thread_counts, thread_create
from threads.services.variables import required_variables_check
from threads.state import ThreadState


class OpenOptions(TypedDict, total=False):
    """What a new thread may be given besides its agent (see :func:`thread_create`)."""

    user_id: str
    title: str
    tags: Sequence[str]
    metadata: Mapping[str, Any] | None
    env: Mapping[str, EnvInput] | None


def thread_open(*, tenant: Tenant, agent_name: str, **options: Unpack[OpenOptions]) -> Thread:
    """:func:`required_variables_check` (ValidationFailed naming ``env.<NAME>`` when a required
    variable is missing), :func:`thread_create`, then ``after_thread_created``: a failing hook
    is logged and does not undo the thread; a turn spawns the agent's immediate subagents."""
    return _opened(tenant, agent_name, options)[0]


def thread_open_counted(
    *, tenant: Tenant, agent_name: str, **options: Unpack[OpenOptions]
) -> tuple[Thread, dict[str, int]]:
    """:func:`thread_open`, and the new thread's counts (:func:`thread_counts`): all zero
    without reading them unless its ``after_thread_created`` hooks ran or it spawned
    subagents, which may have written to it."""
    thread, bare = _opened(tenant, agent_name, options)
    return thread, dict(NO_COUNTS) if bare else thread_counts(thread=thread)


def _opened(tenant: Tenant, agent_name: str, options: OpenOptions) -> tuple[Thread, bool]:
    """The thread, and whether it is bare: no hook ran and no subagent was submitted."""
    with definitions_scope():  # one read of the definitions version for all of it
        required_variables_check(tenant=tenant, agent_name=agent_name, env=options.get("env") or {})
        with transaction.atomic():
            thread = thread_create(tenant=tenant, agent_name=agent_name, **options)
            hooks = thread_hooks(ThreadState(thread))
            hooks.notify(HookName.AFTER_THREAD_CREATED)
            agent = FlowDefinitions(tenant=tenant, model_env=lambda _name: None).agent(agent_name)
            spawns = agent is not None and bool(immediate_entries(agent, tenant))
            if spawns:
                immediate_submit(thread)  # its immediate subagents start now (DIGEST §6.5)
    return thread, not spawns and not hooks.has(HookName.AFTER_THREAD_CREATED)

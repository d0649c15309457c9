"""Opening a thread: its required variables checked (spec DIGEST §11), the stored thread,
then its ``after_thread_created`` hooks (spec DIGEST §8), which run before any execution, in
the transaction that creates it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from agents.registry import HookName
from agents.selectors import definitions_scope
from tenancy.models import Tenant
from threads.models import Thread
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.hooks import thread_hooks
from threads.runtime.spawn import immediate_entries, immediate_submit
from threads.services.env import EnvInput
from threads.services.threads import thread_create
from threads.services.variables import required_variables_check
from threads.state import ThreadState


def thread_open(
    *,
    tenant: Tenant,
    agent_name: str,
    user_id: str = "",
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    env: Mapping[str, EnvInput] | None = None,
) -> Thread:
    """:func:`required_variables_check` (ValidationFailed naming ``env.<NAME>`` when a required
    variable is missing), :func:`thread_create`, then ``after_thread_created``: a failing hook
    is logged and does not undo the thread; a turn spawns the agent's immediate subagents."""
    with definitions_scope():  # one read of the definitions version for all of it
        return _thread_open(
            tenant=tenant, agent_name=agent_name, user_id=user_id, tags=tags, metadata=metadata,
            env=env,
        )  # fmt: skip


def _thread_open(
    *,
    tenant: Tenant,
    agent_name: str,
    user_id: str,
    tags: Sequence[str],
    metadata: Mapping[str, Any] | None,
    env: Mapping[str, EnvInput] | None,
) -> Thread:
    required_variables_check(tenant=tenant, agent_name=agent_name, env=env or {})
    with transaction.atomic():
        thread = thread_create(
            tenant=tenant, agent_name=agent_name, user_id=user_id, tags=tags,
            metadata=metadata, env=env,
        )  # fmt: skip
        thread_hooks(ThreadState(thread)).notify(HookName.AFTER_THREAD_CREATED)
        agent = FlowDefinitions(tenant=tenant, model_env=lambda _name: None).agent(agent_name)
        if agent is not None and immediate_entries(agent, tenant):
            immediate_submit(thread)  # its immediate subagents start now (DIGEST §6.5)
    return thread

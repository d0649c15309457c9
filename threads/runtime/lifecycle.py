"""Opening a thread: the stored thread, then its ``after_thread_created`` hooks (spec DIGEST
§8), which run before any execution, in the transaction that creates it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from agents.registry import HookName
from tenancy.models import Tenant
from threads.models import Thread
from threads.runtime.hooks import thread_hooks
from threads.services.threads import EnvInput, thread_create
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
    """:func:`thread_create`, then ``after_thread_created``: a failing hook is logged and does
    not undo the thread."""
    with transaction.atomic():
        thread = thread_create(
            tenant=tenant, agent_name=agent_name, user_id=user_id, tags=tags,
            metadata=metadata, env=env,
        )  # fmt: skip
        thread_hooks(ThreadState(thread)).notify(HookName.AFTER_THREAD_CREATED)
    return thread

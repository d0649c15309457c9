"""Who a thread's work spends for, and where its budgets stand (the read model's
``routing_limit_summary``): the scope :mod:`usage.budgets` reserves against.

A thread's spend counts against its tenant, its agent, its end user, itself and every
ancestor thread (a subagent's spend is its parent chain's), and its turn and the ancestors'
turns that are running or waiting.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection

from threads.models import Thread, Turn
from usage import budgets, quotas
from usage.budgets import Scope

# The thread's ancestors (nearest first) and each one's running or waiting turn.
_ANCESTORS = (
    "WITH RECURSIVE up(id, parent_id, depth) AS (SELECT id, parent_id, 0 FROM threads_thread "
    "WHERE id = %s UNION ALL SELECT t.id, t.parent_id, up.depth + 1 FROM threads_thread t "
    "JOIN up ON t.id = up.parent_id WHERE up.depth < 64) "
    "SELECT up.id, (SELECT u.id FROM threads_turn u WHERE u.thread_id = up.id AND u.status "
    "IN ('running', 'retrying', 'waiting_permission', 'waiting_input', 'waiting_resource') "
    "ORDER BY u.position LIMIT 1) FROM up WHERE up.depth > 0 ORDER BY up.depth"
)


def spend_scope(
    *,
    thread: Thread,
    turn_id: uuid.UUID | None,
    user: str,
    lease: tuple[str, str] | None = None,
) -> Scope:
    """The scope of ``thread``'s work in turn ``turn_id`` for end user ``user``; its
    reservations live as long as the lock ``lease`` (key, token)."""
    threads: tuple[uuid.UUID, ...] = (thread.pk,)
    turns: tuple[uuid.UUID, ...] = () if turn_id is None else (turn_id,)
    if thread.parent_id is not None:
        with connection.cursor() as cursor:
            cursor.execute(_ANCESTORS, [thread.pk])
            rows = cursor.fetchall()
        threads += tuple(row[0] for row in rows)
        turns += tuple(row[1] for row in rows if row[1] is not None)
    key, token = lease or ("", "")
    return Scope(
        tenant_id=thread.tenant_id, time_zone=thread.tenant.time_zone, agent=thread.agent_name,
        user=user, threads=threads, turns=turns, lock_key=key, lock_token=token,
    )  # fmt: skip


def routing_limit_summary(*, thread: Thread, turn: Turn | None) -> dict[str, Any]:
    """Where the budgets of ``thread``'s work (in ``turn``, when given) stand: each one's
    limit, spent, reserved and remaining; ``cost_state`` ``within``, ``near`` (80 % used) or
    ``exhausted`` (a budget has nothing left, or the turn waits because its next call does
    not fit); what the turn waits for, if it waits; and the tenant's quotas."""
    user = (turn.user if turn is not None else "") or thread.user_id
    scope = spend_scope(thread=thread, turn_id=turn.pk if turn is not None else None, user=user)
    standing = budgets.standing(scope)
    state = "within"
    for row in standing:
        if row["remaining_tokens"] == 0 or row["remaining_cost"] == "0.000000":
            state = "exhausted"
            break
        if row["used_percent"] >= 80:
            state = "near"
    waiting = (turn.resume or {}).get("waiting") if turn is not None else None
    if waiting is not None and waiting.get("reason") == "budget":
        state = "exhausted"  # its next call does not fit
    return {
        "cost_state": state,
        "budgets": standing,
        "waiting": waiting,
        "quotas": quotas.quota_limits(tenant_id=thread.tenant_id),
    }


def work_admit(*, thread: Thread, user: str | None = None) -> None:
    """Refuse new work on ``thread`` before anything is written: any ``reject`` budget of the
    work's scope with nothing left (402, :class:`usage.budgets.BudgetRejected`), then the
    tenant's turns-per-minute quota (429, :class:`usage.quotas.QuotaExceeded`; a refused
    budget uses none of it)."""
    budgets.admit(spend_scope(thread=thread, turn_id=None, user=user or thread.user_id))
    quotas.turn_admit(tenant_id=thread.tenant_id)

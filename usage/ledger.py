"""The ledger: one append-only row per model call, tool call, sandbox call and finished turn,
and the rollups kept up to date with it.

:func:`record` is one statement: the row is inserted unless its idempotency key was counted
before, and only then are its hour and day rollups added to (an upsert each), so a retried
step never counts twice and the rollups always equal the ledger. Run it inside the
transaction that stores what it counts (the model's answer, the tool's result), so the two
commit or fail together.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import connection

from common.time import now_us
from usage.windows import day_start, hour_start

# The entry, then its two rollup cells (hour, day) when the entry was new.
_RECORD = (
    "WITH e AS (INSERT INTO usage_ledgerentry (tenant_id, key, kind, created_at, agent, "
    'thread_id, turn_id, "user", model, name, input_tokens, output_tokens, cached_tokens, '
    "cost_micros, currency, price_version, cpu_ms) "
    "VALUES (%(tenant)s, %(key)s, %(kind)s, %(at)s, %(agent)s, %(thread)s, %(turn)s, "
    "%(user)s, %(model)s, %(name)s, %(input)s, %(output)s, %(cached)s, %(cost)s, "
    "%(currency)s, %(version)s, %(cpu)s) "
    "ON CONFLICT (tenant_id, key) DO NOTHING RETURNING 1) "
    'INSERT INTO usage_rollup (tenant_id, period, start, kind, agent, "user", thread_id, '
    "model, calls, input_tokens, output_tokens, cached_tokens, cost_micros, "
    "unknown_cost_calls, cpu_ms) "
    "SELECT %(tenant)s, p.period, p.start, %(kind)s, %(agent)s, %(user)s, %(thread_text)s, "
    "%(cell_model)s, 1, %(input)s, %(output)s, %(cached)s, COALESCE(%(cost)s, 0), "
    "CASE WHEN %(cost)s IS NULL THEN 1 ELSE 0 END, %(cpu)s "
    "FROM (VALUES ('hour', %(hour)s::bigint), ('day', %(day)s::bigint)) p(period, start) "
    "WHERE EXISTS (SELECT 1 FROM e) "
    'ON CONFLICT (tenant_id, period, start, kind, agent, "user", thread_id, model) '
    "DO UPDATE SET calls = usage_rollup.calls + 1, "
    "input_tokens = usage_rollup.input_tokens + EXCLUDED.input_tokens, "
    "output_tokens = usage_rollup.output_tokens + EXCLUDED.output_tokens, "
    "cached_tokens = usage_rollup.cached_tokens + EXCLUDED.cached_tokens, "
    "cost_micros = usage_rollup.cost_micros + EXCLUDED.cost_micros, "
    "unknown_cost_calls = usage_rollup.unknown_cost_calls + EXCLUDED.unknown_cost_calls, "
    "cpu_ms = usage_rollup.cpu_ms + EXCLUDED.cpu_ms"
)


@dataclass(frozen=True)
class Entry:
    """One ledger row. ``cost_micros`` None: a model call whose model has no prices (cost
    unknown); calls that cost nothing of themselves (tools, the sandbox) and turn rows
    keep 0."""

    tenant_id: uuid.UUID
    key: str
    kind: str
    time_zone: str = "UTC"
    agent: str = ""
    thread_id: uuid.UUID | None = None
    turn_id: uuid.UUID | None = None
    user: str = ""
    model: str = ""
    name: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_micros: int | None = 0
    currency: str = "USD"
    price_version: str = ""
    cpu_ms: int = 0
    created_at: int | None = None


def record(entry: Entry) -> bool:
    """Append ``entry`` and add it to its rollups; False when its key was counted before
    (nothing changes)."""
    at = entry.created_at if entry.created_at is not None else now_us()
    with connection.cursor() as cursor:
        cursor.execute(
            _RECORD,
            {"tenant": entry.tenant_id, "key": entry.key[:200], "kind": entry.kind, "at": at,
             "agent": entry.agent[:64], "thread": entry.thread_id, "turn": entry.turn_id,
             "user": entry.user[:200], "model": entry.model[:200], "name": entry.name[:200],
             "input": entry.input_tokens, "output": entry.output_tokens,
             "cached": entry.cached_tokens, "cost": entry.cost_micros,
             "currency": entry.currency, "version": entry.price_version, "cpu": entry.cpu_ms,
             "thread_text": str(entry.thread_id) if entry.thread_id else "",
             "cell_model": (entry.model or entry.name)[:200],
             "hour": hour_start(at), "day": day_start(at, entry.time_zone)},
        )  # fmt: skip
        return bool(cursor.rowcount > 0)

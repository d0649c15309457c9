"""Budgets enforced before the call: reserve the worst case, then commit what was spent.

Before a call, :func:`reserve` takes every budget that applies to the call's :class:`Scope`
(the tenant's, its agent's, its user's, its thread's and each ancestor thread's, its turn's),
and in one transaction, with the counters of all of them locked (in id order, so concurrent
reservations never deadlock), checks that the worst case fits each and reserves it on each:
all or nothing. The call's output is **clamped** to what the tightest budget still allows
(:attr:`Hold.max_output_tokens`), so no budget can be overshot, however many calls run at
once. After the call, :func:`commit` writes the ledger row and moves the actual cost from
reserved to spent, in the caller's transaction; :func:`release` gives back a reservation whose
call never happened.

A reservation lives as long as the lock of the flow that made it (its key and token are
stored with it): once the lock is gone (a killed worker), the reservation is dead and
:func:`reservations_sweep` releases it; a flow that takes the thread over releases its
predecessors' at once (:func:`release_thread`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection, transaction

from common import tenant_wall
from common.errors import DomainError
from common.outages import OUTAGE_ERRORS
from common.redis_client import redis_client
from common.time import from_us, now_us
from usage.ledger import Entry, record
from usage.models import Budget, BudgetPolicy, BudgetScope, BudgetWindow
from usage.prices import TokenPrices, micros_text
from usage.signals import budget_changed
from usage.windows import day_start, month_start, next_start

logger = logging.getLogger(__name__)

# A reservation older than this is checked against its lock (younger ones are alive).
CHECK_AFTER_US = 5_000_000


@dataclass(frozen=True)
class Scope:
    """Who a call spends for. ``threads`` is the thread then its ancestors up to the root;
    ``turns`` the turn then the ancestors' turns that asked for it (when known). The lock
    is the flow's: the reservation dies with it."""

    tenant_id: uuid.UUID
    time_zone: str = "UTC"
    agent: str = ""
    user: str = ""
    threads: tuple[uuid.UUID, ...] = ()
    turns: tuple[uuid.UUID, ...] = ()
    lock_key: str = ""
    lock_token: str = ""


@dataclass(frozen=True)
class BudgetRow:
    id: uuid.UUID
    name: str
    scope: str
    subject: str
    window: str
    limit_micros: int | None
    limit_tokens: int | None
    policy: str
    thresholds: tuple[int, ...]
    operator: bool

    def describe(self) -> str:
        limits = []
        if self.limit_micros is not None:
            limits.append(f"{micros_text(self.limit_micros)} USD")
        if self.limit_tokens is not None:
            limits.append(f"{self.limit_tokens} tokens")
        who = "the operator's" if self.operator else "the"
        caps = " and ".join(limits)
        return f"{who} budget {self.name!r} ({self.scope}, per {self.window}: {caps})"


@dataclass(frozen=True)
class Cell:
    """One budget's counter for one subject in one window."""

    budget: BudgetRow
    subject: str
    window_start: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (str(self.budget.id), self.subject, self.window_start)


class BudgetExceeded(Exception):
    """A budget has no room for the call (its smallest useful answer). ``retry_at`` is when
    its window rolls over (None: it never does; only a raised limit makes room)."""

    code = "budget_exceeded"

    def __init__(
        self, cell: Cell, message: str, *, retry_at: int | None, contended: bool = False
    ) -> None:
        super().__init__(message)
        self.budget = cell.budget
        self.subject = cell.subject
        self.window_start = cell.window_start
        self.retry_at = retry_at
        self.message = message
        # Only what other calls hold reserved leaves no room: it frees when they settle.
        self.contended = contended


@dataclass
class Part:
    counter_id: int
    micros: int
    tokens: int
    cell: Cell


@dataclass
class Hold:
    """What :func:`reserve` holds for one call; ``max_output_tokens`` is the clamp (None
    when no budget applies: the request keeps its own)."""

    reservation_id: uuid.UUID | None = None
    parts: list[Part] = field(default_factory=list)
    max_output_tokens: int | None = None
    done: bool = False


@dataclass(frozen=True)
class Crossing:
    """A commit took a budget's counter past one of its thresholds (percent)."""

    budget: BudgetRow
    subject: str
    window_start: int
    threshold: int
    spent_micros: int
    spent_tokens: int


# A tenant's budgets are cached per process under the version Redis holds for them: every
# change (the budget_changed signal) bumps it once committed, so the next call anywhere reads
# them again. Entries also expire after BUDGETS_CACHE_S, in case a bump was lost to an outage.
BUDGETS_CACHE_S = 60.0
# By tenant and by the context that read them (common.tenant_wall): what code acting for one
# context read is never answered to another.
_cached: dict[tuple[uuid.UUID, tuple[str, str]], tuple[bytes | None, float, list[BudgetRow]]] = {}


def _version_key(tenant_id: Any) -> str:
    return f"{tenant_id}:budgets:version"


def budgets_of(tenant_id: uuid.UUID) -> list[BudgetRow]:
    """The tenant's budgets: from this process's cache while their version in Redis is the
    one cached (one GET), else read again. While Redis is unreachable they are read each
    time."""
    try:
        version = cast(bytes | None, redis_client().get(_version_key(tenant_id)))
    except OUTAGE_ERRORS:
        return _budgets_read(tenant_id)
    key = (tenant_id, tenant_wall.current())
    hit = _cached.get(key)
    now = time.monotonic()
    if hit is not None and hit[0] == version and hit[1] > now:
        return hit[2]
    rows = _budgets_read(tenant_id)
    if len(_cached) > 10_000:
        _cached.clear()
    _cached[key] = (version, now + BUDGETS_CACHE_S, rows)
    return rows


def budgets_forget(sender: object = None, *, tenant_id: Any = None, **_: Any) -> None:
    """Drop the cached budgets of ``tenant_id`` (all when None) and, once the caller's
    transaction commits, bump their version so every process reads them again: connected
    to ``budget_changed``."""
    if tenant_id is None:
        _cached.clear()
        return
    tenant = uuid.UUID(str(tenant_id))
    _uncache(tenant)
    transaction.on_commit(lambda: _bump(tenant), robust=True)


def _uncache(tenant_id: uuid.UUID) -> None:
    for key in [key for key in list(_cached) if key[0] == tenant_id]:
        _cached.pop(key, None)


def _bump(tenant_id: uuid.UUID) -> None:
    _uncache(tenant_id)
    try:
        client = redis_client()
        key = _version_key(tenant_id)
        client.incr(key)
        client.expire(key, 30 * 86_400)
    except OUTAGE_ERRORS:
        logger.warning("budgets of %s changed; other processes see it within %g s",
                       tenant_id, BUDGETS_CACHE_S)  # fmt: skip


budget_changed.connect(budgets_forget, dispatch_uid="usage.budgets_forget")


def _budgets_read(tenant_id: uuid.UUID) -> list[BudgetRow]:
    rows = Budget.objects.filter(tenant_id=tenant_id).values_list(
        "id", "name", "scope", "subject", "window", "limit_micros", "limit_tokens", "policy",
        "thresholds", "operator",
    )  # fmt: skip
    return [
        BudgetRow(*row[:8], thresholds=tuple(sorted(int(t) for t in row[8] or ())), operator=row[9])
        for row in rows
    ]


def cells_of(scope: Scope, budgets: Iterable[BudgetRow], now: int) -> list[Cell]:
    """The counters a call of ``scope`` at ``now`` spends against."""
    cells = []
    for budget in budgets:
        start = _window_start(budget.window, now, scope.time_zone)
        for subject in _subjects(budget, scope):
            cells.append(Cell(budget=budget, subject=subject, window_start=start))
    return sorted(cells, key=lambda cell: cell.key)


def _subjects(budget: BudgetRow, scope: Scope) -> list[str]:
    wanted = budget.subject
    match budget.scope:
        case BudgetScope.TENANT:
            return [""]
        case BudgetScope.AGENT:
            return [scope.agent] if scope.agent and wanted in ("", scope.agent) else []
        case BudgetScope.USER:
            return [scope.user] if scope.user and wanted in ("", scope.user) else []
        case BudgetScope.THREAD:
            return [str(t) for t in scope.threads if wanted in ("", str(t))]
        case BudgetScope.TURN:
            return [str(t) for t in scope.turns if wanted in ("", str(t))]
    return []


def _window_start(window: str, now: int, time_zone: str) -> int:
    if window == BudgetWindow.DAY:
        return day_start(now, time_zone)
    if window == BudgetWindow.MONTH:
        return month_start(now, time_zone)
    return 0


# Reserving -----------------------------------------------------------------------------------

# One round trip (the function usage_reserve, usage/migrations/0002): the counters of every
# cell exist, are locked in id order, each one's room is checked and the smallest clamps the
# output; then the worst case is added to each and the reservation row written.
_RESERVE = (
    "SELECT * FROM usage_reserve(%s, %s::uuid[], %s::text[], %s::bigint[], %s::bigint[], "
    "%s::bigint[], %s, %s, %s, %s::numeric, %s::numeric, %s, %s, %s, %s, %s, %s)"
)


def reserve(
    scope: Scope,
    *,
    prices: TokenPrices,
    input_tokens: int,
    output_tokens: int,
    min_output_tokens: int,
    thread_id: uuid.UUID,
    turn_id: uuid.UUID | None,
    budgets: Sequence[BudgetRow] | None = None,
) -> Hold:
    """Reserve the worst case of a call (``input_tokens`` in, at most ``output_tokens`` out,
    at ``prices``) on every budget of ``scope``, clamping the output to what the tightest
    allows. Raises :class:`BudgetExceeded` (naming the budget) when some budget cannot fit
    ``min_output_tokens`` of answer (or the call's input alone); nothing is reserved then.
    A budget in cost and a model without prices: raises too, since the call's cost could
    not be bounded."""
    now = now_us()
    rows = budgets_of(scope.tenant_id) if budgets is None else budgets
    cells = cells_of(scope, rows, now)
    if not cells:
        return Hold(max_output_tokens=None)
    try:
        return _reserve(scope, cells, prices, input_tokens, output_tokens, min_output_tokens,
                        thread_id, turn_id, now)  # fmt: skip
    except BudgetExceeded:
        if not reservations_sweep(tenant_id=scope.tenant_id):
            raise
    # Dead reservations held room: try again without them.
    return _reserve(scope, cells, prices, input_tokens, output_tokens, min_output_tokens,
                    thread_id, turn_id, now)  # fmt: skip


def _reserve(
    scope: Scope,
    cells: list[Cell],
    prices: TokenPrices,
    input_tokens: int,
    output_tokens: int,
    min_output_tokens: int,
    thread_id: uuid.UUID,
    turn_id: uuid.UUID | None,
    now: int,
) -> Hold:
    reservation = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            _RESERVE,
            [scope.tenant_id, [str(cell.budget.id) for cell in cells],
             [cell.subject for cell in cells], [cell.window_start for cell in cells],
             [cell.budget.limit_micros for cell in cells],
             [cell.budget.limit_tokens for cell in cells], input_tokens, output_tokens,
             min_output_tokens, prices.input, prices.output, reservation, thread_id, turn_id,
             scope.lock_key, scope.lock_token, now],
        )  # fmt: skip
        allowed, blocked, contended, ids, positions, micros = cursor.fetchone()
    if blocked is not None:
        raise _exceeded(cells[blocked - 1], scope, prices, contended=contended)
    tokens = input_tokens + allowed
    parts = [
        Part(counter_id=counter_id, tokens=tokens, cell=cells[n - 1],
             micros=micros if cells[n - 1].budget.limit_micros is not None else 0)
        for counter_id, n in zip(ids, positions, strict=True)
    ]  # fmt: skip
    return Hold(reservation_id=reservation, parts=parts, max_output_tokens=allowed)


def _exceeded(cell: Cell, scope: Scope, prices: TokenPrices, *, contended: bool) -> BudgetExceeded:
    budget = cell.budget
    retry_at = next_start(budget.window, cell.window_start, scope.time_zone)
    if budget.limit_micros is not None and not prices.known:
        return BudgetExceeded(
            cell,
            f"{budget.describe()} caps cost, and the model has no prices, so its calls' "
            "cost cannot be bounded: give the model inputPrice and outputPrice",
            retry_at=None,
        )
    whom = f" for {budget.scope} {cell.subject}" if cell.subject else ""
    return BudgetExceeded(
        cell, f"{budget.describe()}{whom} has no room left for this call", retry_at=retry_at,
        contended=contended,
    )  # fmt: skip


# Committing and releasing --------------------------------------------------------------------

# One round trip (the function usage_settle, usage/migrations/0002): the counters locked in id
# order, the reservation deleted and, if it was still held, its amounts taken off them; the
# spend added.
_SETTLE = "SELECT * FROM usage_settle(%s, %s::bigint[], %s::bigint[], %s::bigint[], %s, %s)"


def commit(hold: Hold, entry: Entry) -> tuple[bool, list[Crossing]]:
    """Record ``entry`` in the ledger and settle ``hold``: its reservation is released and
    the entry's actual cost and tokens are added to the counters it was reserved on. Run it
    in the transaction that stores the call's result. Returns whether the entry was new (a
    repeated key counts nothing) and the thresholds it crossed."""
    counted = record(entry)
    hold.done = True
    if hold.reservation_id is None:
        return counted, []
    micros = (entry.cost_micros or 0) if counted else 0
    tokens = entry.input_tokens + entry.output_tokens if counted else 0
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        settled = _settle(cursor, hold, micros, tokens)
        crossings = _crossings(hold, settled)
        if crossings:
            cursor.execute(
                "UPDATE usage_budgetcounter c SET announced = v.a FROM unnest(%s::bigint[], "
                "%s::int[]) AS v(id, a) WHERE c.id = v.id AND c.announced < v.a",
                [[c[0] for c in crossings], [c[1].threshold for c in crossings]],
            )
    return counted, [crossing for _, crossing in crossings]


def _settle(cursor: Any, hold: Hold, micros: int, tokens: int) -> list[tuple[Any, ...]]:
    cursor.execute(
        _SETTLE,
        [hold.reservation_id, [part.counter_id for part in hold.parts],
         [part.micros for part in hold.parts], [part.tokens for part in hold.parts], micros,
         tokens],
    )  # fmt: skip
    return list(cursor.fetchall())


def _crossings(hold: Hold, settled: Sequence[Sequence[Any]]) -> list[tuple[int, Crossing]]:
    by_id = {part.counter_id: part.cell for part in hold.parts}
    found = []
    for counter_id, spent_m, spent_t, announced in settled:
        cell = by_id[counter_id]
        budget = cell.budget
        used = max(_percent(spent_m, budget.limit_micros), _percent(spent_t, budget.limit_tokens))
        passed = [t for t in budget.thresholds if announced < t <= used]
        if passed:
            crossing = Crossing(budget=budget, subject=cell.subject,
                                window_start=cell.window_start, threshold=max(passed),
                                spent_micros=spent_m, spent_tokens=spent_t)  # fmt: skip
            found.append((counter_id, crossing))
    return found


def _percent(spent: int, limit: int | None) -> float:
    return 0.0 if not limit else spent * 100 / limit


_RELEASE = (
    "WITH d AS (DELETE FROM usage_reservation WHERE id = ANY(%s) RETURNING parts), "
    "p AS (SELECT (x->>0)::bigint AS id, SUM((x->>1)::bigint) AS m, SUM((x->>2)::bigint) AS t "
    "FROM d, jsonb_array_elements(d.parts) x GROUP BY 1) "
    "UPDATE usage_budgetcounter c SET reserved_micros = c.reserved_micros - p.m, "
    "reserved_tokens = c.reserved_tokens - p.t FROM p WHERE c.id = p.id"
)


def release(hold: Hold) -> None:
    """Give back what ``hold`` reserved (its call did not happen or failed before
    committing). A no-op once committed or released."""
    if hold.done:
        return
    hold.done = True
    if hold.reservation_id is not None:
        with connection.cursor() as cursor:
            _settle(cursor, hold, 0, 0)


def _release_ids(ids: Sequence[uuid.UUID]) -> int:
    """Release reservations by id (their counters locked in id order first)."""
    if not ids:
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM usage_budgetcounter WHERE id IN (SELECT DISTINCT "
            "(jsonb_array_elements(parts)->>0)::bigint FROM usage_reservation "
            "WHERE id = ANY(%s)) ORDER BY id FOR UPDATE",
            [list(ids)],
        )
        cursor.execute(_RELEASE, [list(ids)])
        return len(ids)


def release_thread(*, thread_id: uuid.UUID, keep_token: str = "") -> int:
    """Release the reservations of ``thread_id``'s earlier flows (a flow taking the thread
    over: its predecessor's lock is gone). Answers how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM usage_reservation WHERE thread_id = %s AND lock_token <> %s",
            [thread_id, keep_token],
        )
        ids = [row[0] for row in cursor.fetchall()]
    return _release_ids(ids)


def reservations_sweep(*, tenant_id: uuid.UUID | None = None) -> int:
    """Release the reservations whose flow's lock is gone (older than a few seconds, so a
    reservation being made is never taken for dead); of one tenant or all. Answers how many.
    While Redis cannot be asked, nothing is released."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, lock_key, lock_token FROM usage_reservation WHERE created_at < %s "
            "AND (%s::uuid IS NULL OR tenant_id = %s) LIMIT 1000",
            [now_us() - CHECK_AFTER_US, tenant_id, tenant_id],
        )
        rows = cursor.fetchall()
    if not rows:
        return 0
    try:
        holders = cast(list[bytes | None], redis_client().mget([key or "-" for _, key, _ in rows]))
    except OUTAGE_ERRORS:
        return 0
    dead = [
        id for (id, key, token), holder in zip(rows, holders, strict=True)
        if not key or holder is None or holder.decode() != token
    ]  # fmt: skip
    return _release_ids(dead)


# Standing ------------------------------------------------------------------------------------

_READ = (
    "SELECT c.budget_id, c.subject, c.window_start, c.spent_micros, c.spent_tokens, "
    "c.reserved_micros, c.reserved_tokens FROM usage_budgetcounter c "
    "JOIN unnest(%s::uuid[], %s::text[], %s::bigint[]) AS v(b, s, w) "
    "ON c.budget_id = v.b AND c.subject = v.s AND c.window_start = v.w"
)


def _figures(
    scope: Scope, budgets: Sequence[BudgetRow] | None, now: int | None
) -> list[tuple[Cell, tuple[int, int, int, int]]]:
    """The cells of ``scope`` with their (spent micros, spent tokens, reserved micros,
    reserved tokens), read without locking."""
    rows = budgets_of(scope.tenant_id) if budgets is None else budgets
    cells = cells_of(scope, rows, now_us() if now is None else now)
    if not cells:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _READ,
            [[str(c.budget.id) for c in cells], [c.subject for c in cells],
             [c.window_start for c in cells]],
        )  # fmt: skip
        found = {(str(row[0]), row[1], row[2]): tuple(row[3:]) for row in cursor.fetchall()}
    return [(cell, cast(Any, found.get(cell.key, (0, 0, 0, 0)))) for cell in cells]


def standing(
    scope: Scope, *, now: int | None = None, budgets: Sequence[BudgetRow] | None = None
) -> list[dict[str, Any]]:
    """How every budget a call of ``scope`` would spend against (of ``budgets``, by default
    all the tenant's) stands now: its limits, what is spent, what calls in flight hold
    reserved and what remains, per counter (the spec's ``routing_limit_summary``). Reads
    only."""
    return [_standing(cell, figures, scope) for cell, figures in _figures(scope, budgets, now)]


def _standing(cell: Cell, figures: Sequence[int], scope: Scope) -> dict[str, Any]:
    budget = cell.budget
    spent_m, spent_t, held_m, held_t = figures
    left_m = None if budget.limit_micros is None else budget.limit_micros - spent_m - held_m
    left_t = None if budget.limit_tokens is None else budget.limit_tokens - spent_t - held_t
    used = max(_percent(spent_m, budget.limit_micros), _percent(spent_t, budget.limit_tokens))
    return {
        "budget_id": str(budget.id), "budget": budget.name, "scope": budget.scope,
        "subject": cell.subject, "window": budget.window, "window_start": cell.window_start,
        "resets_at": next_start(budget.window, cell.window_start, scope.time_zone),
        "policy": budget.policy, "operator": budget.operator,
        "limit_cost": micros_text(budget.limit_micros), "limit_tokens": budget.limit_tokens,
        "spent_cost": micros_text(spent_m), "spent_tokens": spent_t,
        "reserved_cost": micros_text(held_m), "reserved_tokens": held_t,
        "remaining_cost": micros_text(None if left_m is None else max(0, left_m)),
        "remaining_tokens": None if left_t is None else max(0, left_t),
        "used_percent": round(used, 2),
    }  # fmt: skip


def dry_run(
    scope: Scope, *, prices: TokenPrices, input_tokens: int, output_tokens: int
) -> list[dict[str, Any]]:
    """What :func:`reserve` would decide for a call now, per budget, without reserving: each
    budget's standing with the output it would allow (``allowed_output_tokens``, at most
    ``output_tokens``) and whether the call ``fits`` (allows at least one token)."""
    cells = _figures(scope, None, None)
    if not cells:
        return []
    # The room each would leave, by the same function usage_reserve decides with.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT usage_room(lm, lt, um, ut, %s, %s::numeric, %s::numeric) FROM "
            "unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "WITH ORDINALITY AS v(lm, lt, um, ut, n) ORDER BY n",
            [input_tokens, prices.input, prices.output,
             [cell.budget.limit_micros for cell, _ in cells],
             [cell.budget.limit_tokens for cell, _ in cells],
             [figures[0] + figures[2] for _, figures in cells],
             [figures[1] + figures[3] for _, figures in cells]],
        )  # fmt: skip
        rooms = [row[0] for row in cursor.fetchall()]
    found = []
    for (cell, figures), room in zip(cells, rooms, strict=True):
        found.append(
            {**_standing(cell, figures, scope),
             "allowed_output_tokens": int(max(0, min(output_tokens, room))), "fits": room >= 1}
        )  # fmt: skip
    return found


class BudgetRejected(DomainError):
    """A ``reject`` budget of the new work's scope has nothing left: the work is refused
    before anything is written (402, naming the budget and when its window rolls over)."""

    code = "budget_exceeded"
    status = 402


def admit(scope: Scope, *, min_output_tokens: int = 1) -> None:
    """Refuse new work of ``scope`` while a budget with the ``reject`` policy has no room
    for even the smallest call (turn budgets aside: a new turn has spent nothing). Raises
    :class:`BudgetRejected`; one read, and none when the tenant has no such budget."""
    rejecting = [
        row for row in budgets_of(scope.tenant_id)
        if row.policy == BudgetPolicy.REJECT and row.scope != BudgetScope.TURN
    ]  # fmt: skip
    if not rejecting:
        return
    for cell, (spent_m, spent_t, held_m, held_t) in _figures(scope, rejecting, None):
        budget = cell.budget
        left = [
            None if budget.limit_tokens is None else budget.limit_tokens - spent_t - held_t,
            None if budget.limit_micros is None else budget.limit_micros - spent_m - held_m,
        ]
        if any(value is not None and value < min_output_tokens for value in left):
            row = _standing(cell, (spent_m, spent_t, held_m, held_t), scope)
            resets = row["resets_at"]
            when = (
                "" if resets is None
                else f"; its window rolls over at {from_us(resets).isoformat()}"
            )  # fmt: skip
            raise BudgetRejected(
                f"the budget {row['budget']!r} ({row['scope']}, per {row['window']}) has "
                f"nothing left and refuses new work{when}",
                details={"budget_id": row["budget_id"], "budget": row["budget"],
                         "resets_at": resets},
            )  # fmt: skip

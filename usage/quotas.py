"""Per-tenant quotas: rate limits on API requests, turns started and model tokens, counted
in Redis with the generic cell rate algorithm (GCRA).

* **What is limited.** API requests per minute per tenant (``requests_per_minute``) and per
  API key (``key_requests_per_minute``), turns started through the API per minute per
  tenant (``turns_per_minute``), model tokens per minute and per day per tenant
  (``tokens_per_minute``, ``tokens_per_day``). Each limit is its setting
  (``USAGE_<NAME>``), or the tenant's :class:`~usage.models.TenantQuota` value when that
  is not None; 0 is unlimited and costs nothing.
* **How it counts.** A limit of *n* per period lets *n* through at once, then one more
  each period/*n* as the earlier ones age (a bucket of *n* refilled continuously). Each
  counter is one Redis key holding its theoretical arrival time, so a check is one script
  call whatever the limits, run atomically: a request held to two limits (its key's and
  its tenant's) is counted by both or by neither. A refused attempt is not counted.
* **Tokens are counted on what was spent.** :func:`tokens_admit` refuses a model call
  while the tenant's tokens per minute or per day are used up; :func:`tokens_spent` adds
  what the call really used. A call admitted under a quota may therefore finish above it;
  the tenant then waits until the excess has drained at the quota's rate. Quotas are rate
  limits; budgets (:mod:`usage.models` ``Budget``) are the hard caps.
* **Cheap.** A tenant's overrides are read once per :data:`OVERRIDES_FOR_S` per process,
  so the hot path runs no SQL. A counter found used up is refused by this process without
  asking Redis again for up to :data:`REFUSED_FOR_S` (never past the moment it has room),
  so a tenant hammering at its limits costs Redis little and nobody else anything: every
  counter is its tenant's own key. While Redis is unreachable nothing is refused.

Refusals raise :class:`QuotaExceeded`: a 429 whose ``Retry-After`` is when the attempt
would fit, and whose message and details name the limit, where its value comes from and
when to retry.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast
from uuid import UUID

from django.conf import settings

from common.errors import RetryLater
from common.outages import OUTAGE_ERRORS
from common.redis_client import redis_client
from usage.models import TenantQuota

logger = logging.getLogger(__name__)

# How long a tenant's overrides are trusted by one process before being read again: a
# change in the admin reaches every process within this.
OVERRIDES_FOR_S: Final = 5.0
# How long a counter found used up is refused here without asking Redis (see above).
REFUSED_FOR_S: Final = 1.0
MAX_REMEMBERED: Final = 10_000

Mode = Literal["take", "peek", "add"]

# KEYS: the counters. ARGV: mode, cost, then (period_ms, limit) per counter.
# take: count ``cost`` against every counter if each has room for it, else none;
# peek: answer whether each has room for ``cost``, counting nothing;
# add: count ``cost`` against every counter, room or not.
# Answers {0, 0}, or the 1-based index of the counter that waits longest and its wait (ms).
_GCRA_LUA: Final = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local mode, cost = ARGV[1], tonumber(ARGV[2])
local tats, worst, wait = {}, 0, 0
for i, key in ipairs(KEYS) do
  local period, limit = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  local stored = redis.call('GET', key)
  local tat = math.max(stored and tonumber(stored) or now, now)
  tats[i] = tat + cost * period / limit
  local over = tats[i] - now - period
  if mode ~= 'add' and over > wait then worst, wait = i, over end
end
if worst > 0 then return {worst, math.ceil(wait)} end
if mode ~= 'peek' then
  for i, key in ipairs(KEYS) do
    redis.call('SET', key, string.format('%.3f', tats[i]), 'PX', math.ceil(tats[i] - now))
  end
end
return {0, 0}
"""


@dataclass(frozen=True)
class Quota:
    name: str  # the TenantQuota field and the error's details.limit
    setting: str
    period_s: int
    counts: str  # what it counts, for messages

    @property
    def per(self) -> str:
        return {60: "minute", 86_400: "day"}[self.period_s]


REQUESTS: Final = Quota(
    "requests_per_minute", "USAGE_REQUESTS_PER_MINUTE", 60, "API requests of this tenant"
)
KEY_REQUESTS: Final = Quota(
    "key_requests_per_minute", "USAGE_KEY_REQUESTS_PER_MINUTE", 60, "API requests with this key"
)
TURNS: Final = Quota("turns_per_minute", "USAGE_TURNS_PER_MINUTE", 60, "turns started")
TOKENS_PER_MINUTE: Final = Quota("tokens_per_minute", "USAGE_TOKENS_PER_MINUTE", 60, "model tokens")
TOKENS_PER_DAY: Final = Quota("tokens_per_day", "USAGE_TOKENS_PER_DAY", 86_400, "model tokens")
QUOTAS: Final = (REQUESTS, KEY_REQUESTS, TURNS, TOKENS_PER_MINUTE, TOKENS_PER_DAY)


@dataclass(frozen=True)
class Counter:
    """One Redis counter held to one limit."""

    key: str
    quota: Quota
    value: int
    overridden: bool  # the value is the tenant's TenantQuota's, not the setting's


class QuotaExceeded(RetryLater):
    """A tenant (or one of its API keys) is over one of its quotas; ``details`` names the
    limit (``limit``), its value and ``retry_after_s``."""

    code = "quota_exceeded"
    status = 429

    @classmethod
    def of(cls, counter: Counter, *, wait_ms: float) -> QuotaExceeded:
        quota, value = counter.quota, counter.value
        retry_after_s = max(1, math.ceil(wait_ms / 1000))
        source = f"this tenant's quota {quota.name}" if counter.overridden else quota.setting
        return cls(
            f"quota exceeded: {quota.counts} ({source}: {value} per {quota.per}); retry in "
            f"{retry_after_s} s",
            retry_after_s=retry_after_s,
            details={"limit": quota.name, "value": value, "retry_after_s": retry_after_s},
        )


def request_admit(*, tenant_id: UUID | str, key_id: str | None) -> None:
    """Count one API request against the tenant's ``requests_per_minute`` and, with
    ``key_id``, that key's ``key_requests_per_minute`` (both or neither). Raises
    :class:`QuotaExceeded` when either has no room."""
    quotas = [REQUESTS] if key_id is None else [KEY_REQUESTS, REQUESTS]
    _check(_counters(tenant_id, quotas, key_id=key_id), mode="take", cost=1)


def turn_admit(*, tenant_id: UUID | str) -> None:
    """Count one turn started through the API against the tenant's ``turns_per_minute``.
    Raises :class:`QuotaExceeded` when it has no room (nothing is counted then)."""
    _check(_counters(tenant_id, [TURNS]), mode="take", cost=1)


def tokens_admit(*, tenant_id: UUID | str) -> None:
    """Before a model call: raises :class:`QuotaExceeded` while the tenant's
    ``tokens_per_minute`` or ``tokens_per_day`` is used up. Counts nothing: the call's
    tokens are counted by :func:`tokens_spent` once known."""
    _check(_counters(tenant_id, [TOKENS_PER_MINUTE, TOKENS_PER_DAY]), mode="peek", cost=1)


def tokens_spent(*, tenant_id: UUID | str, tokens: int) -> None:
    """After a model call: count the ``tokens`` it used against the tenant's token quotas,
    even past them (the tenant then waits for the excess to drain). Never raises for a
    quota; nothing is counted while Redis is unreachable."""
    if tokens > 0:
        counters = _counters(tenant_id, [TOKENS_PER_MINUTE, TOKENS_PER_DAY])
        _check(counters, mode="add", cost=tokens)


def quota_limits(*, tenant_id: UUID | str) -> dict[str, int]:
    """Each quota's value for the tenant (0: unlimited), by name, as the checks see it."""
    overrides = _overrides(tenant_id)
    return {quota.name: _value(quota, overrides)[0] for quota in QUOTAS}


def quota_counters_forget() -> None:
    """Forget what this process remembers (overrides read, counters found used up), so the
    next checks read both afresh: for tests, and after an operator's change here."""
    with _guard:
        _overrides_read.clear()
        _refused.clear()


# Counters --------------------------------------------------------------------------------------


def _counters(
    tenant_id: UUID | str, quotas: Sequence[Quota], *, key_id: str | None = None
) -> list[Counter]:
    """The limited counters (value above 0) of ``quotas`` for the tenant; the per-key
    quota's is ``key_id``'s."""
    overrides = _overrides(tenant_id)
    counters = []
    for quota in quotas:
        value, overridden = _value(quota, overrides)
        if value > 0:
            key = f"{tenant_id}:quota:{quota.name}"
            if quota is KEY_REQUESTS:
                key = f"{key}:{key_id}"
            counters.append(Counter(key, quota, value, overridden))
    return counters


def _value(quota: Quota, overrides: Mapping[str, int | None]) -> tuple[int, bool]:
    override = overrides.get(quota.name)
    if override is not None:
        return override, True
    return int(getattr(settings, quota.setting)), False


def _check(counters: Sequence[Counter], *, mode: Mode, cost: int) -> None:
    """One script call over ``counters`` (none when there are none, or when one of them
    was found used up here moments ago); raises :class:`QuotaExceeded` naming the counter
    that waits longest. Lets everything through while Redis is unreachable."""
    if not counters:
        return
    if mode != "add":
        _refuse_remembered(counters)
    args = [mode, str(cost)]
    for counter in counters:
        args += [str(counter.quota.period_s * 1000), str(counter.value)]
    try:
        answer = redis_client().eval(
            _GCRA_LUA, len(counters), *(counter.key for counter in counters), *args
        )
    except OUTAGE_ERRORS as error:
        logger.warning("quotas unreadable, not limiting: %s", error)
        return
    index, wait_ms = (int(part) for part in cast(Sequence[int], answer))
    if index:
        refused = counters[index - 1]
        _remember_refusal(refused, wait_ms)
        raise QuotaExceeded.of(refused, wait_ms=wait_ms)


# What this process remembers ---------------------------------------------------------------------

_guard = threading.Lock()
# tenant id -> (monotonic time trusted until, the TenantQuota's values by quota name)
_overrides_read: dict[str, tuple[float, dict[str, int | None]]] = {}
# counter key -> (monotonic time it has room again, monotonic time trusted until, counter)
_refused: dict[str, tuple[float, float, Counter]] = {}


def _overrides(tenant_id: UUID | str) -> Mapping[str, int | None]:
    """The tenant's TenantQuota values (None: the setting), read at most once per
    :data:`OVERRIDES_FOR_S` per process."""
    now = time.monotonic()
    cached = _overrides_read.get(str(tenant_id))
    if cached is not None and cached[0] > now:
        return cached[1]
    names = [quota.name for quota in QUOTAS]
    row = TenantQuota.objects.filter(tenant_id=tenant_id).values(*names).first()
    values: dict[str, int | None] = dict.fromkeys(names) if row is None else dict(row)
    with _guard:
        if len(_overrides_read) >= MAX_REMEMBERED:
            _overrides_read.clear()
        _overrides_read[str(tenant_id)] = (now + OVERRIDES_FOR_S, values)
    return values


def _refuse_remembered(counters: Sequence[Counter]) -> None:
    now = time.monotonic()
    for counter in counters:
        remembered = _refused.get(counter.key)
        if remembered is not None and remembered[1] > now and remembered[2] == counter:
            raise QuotaExceeded.of(counter, wait_ms=(remembered[0] - now) * 1000)


def _remember_refusal(counter: Counter, wait_ms: float) -> None:
    now = time.monotonic()
    room_at = now + wait_ms / 1000
    with _guard:
        if len(_refused) >= MAX_REMEMBERED:
            _refused.clear()
        _refused[counter.key] = (room_at, min(room_at, now + REFUSED_FOR_S), counter)

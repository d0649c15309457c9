"""Failed API-key authentications, counted in Redis per client address and per (presented
key prefix, client address), so that guessing keys is slow and costs nobody else.

* **Fixed windows.** A counter starts at an address's (or pair's) first failure and expires
  ``API_KEY_FAILURE_WINDOW_S`` later; failures inside the window add to it. Once a counter
  reaches its limit (``API_KEY_FAILURES_PER_ADDRESS``, ``API_KEY_FAILURES_PER_PREFIX``),
  every key presented from that address (with that prefix) is refused unchecked with
  :class:`~common.errors.AuthThrottled` (429, ``Retry-After`` = what is left of the window),
  a valid one too. Refused attempts are not counted: the window ends when it says.
* **Only guesses count.** A malformed key or a wrong one (``malformed_api_key``,
  ``invalid_api_key``). A revoked or expired key, or one of a deactivated tenant, proves
  its secret: its 401 says what to fix, and counting it would let one retired integration
  lock every other key out of the host it shares.
* **Nobody else's address.** Counters are keyed by the client address, so failures from one
  address never refuse a key presented from another.
* **Cheap.** A counter this process found under its limit is trusted for
  ``CLEAR_FOR_S`` (one second) unless this process counts a failure against it, so a
  steady stream of good requests costs no Redis call; otherwise the check is one ``MGET``
  and a failure one script call. Failures counted by another process are seen within that
  second. While Redis is unreachable nothing is counted or refused (keys are still
  checked).

The client address is ``REMOTE_ADDR`` (a socket's ``scope["client"]``) as the ASGI server
set it; an IPv6 address counts as its /64 network, which one host usually holds whole.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Final, cast

from django.conf import settings

from common.errors import AuthThrottled
from common.outages import OUTAGE_ERRORS
from common.redis_client import redis_client

logger = logging.getLogger(__name__)

KEY_PREFIX: Final = "platform:authfail:"
# The part of a presented key that names a key row (tenancy.services' key format).
_PRESENTED_PREFIX = re.compile(r"^sap_([a-z0-9]{12})_")
# The failures that could be guesses (see the module docstring).
COUNTED_CODES: Final = frozenset({"malformed_api_key", "invalid_api_key"})
UNKNOWN_ADDRESS: Final = "unknown"
IPV6_NETWORK_BITS: Final = 64
# How long a counter found under its limit is trusted without asking Redis again (see the
# module docstring), and how many such counters one process remembers.
CLEAR_FOR_S: Final = 1.0
MAX_CLEAR: Final = 10_000
_clear: dict[str, float] = {}  # counter key -> monotonic time it is trusted until
_clear_guard = threading.Lock()

# Adds one to each counter, starting its window at its first failure; answers the counts.
_COUNT_LUA: Final = """
local counts = {}
for i, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  if count == 1 then redis.call('PEXPIRE', key, ARGV[1]) end
  counts[i] = count
end
return counts
"""


def client_address(remote_addr: str | None) -> str | None:
    """The address failures are counted under: ``remote_addr``, an IPv6 one as its /64
    network; None when there is none or it is not an IP address."""
    if not remote_addr:
        return None
    try:
        address = ipaddress.ip_address(remote_addr.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        network = ipaddress.IPv6Network((address, IPV6_NETWORK_BITS), strict=False)
        return str(network.network_address)
    return str(address)


def _counters(*, address: str | None, raw_key: str) -> list[tuple[str, str, int]]:
    """(Redis key, setting, limit) of each counter a key presented from ``address`` is held
    to: the address's, and the (prefix, address) pair's when the key has a prefix."""
    where = address or UNKNOWN_ADDRESS
    limits = [(f"{KEY_PREFIX}address:{where}", "API_KEY_FAILURES_PER_ADDRESS")]
    match = _PRESENTED_PREFIX.match(raw_key)
    if match is not None:
        limits.append(
            (f"{KEY_PREFIX}prefix:{match.group(1)}:{where}", "API_KEY_FAILURES_PER_PREFIX")
        )
    return [(key, setting, int(getattr(settings, setting))) for key, setting in limits]


_WHOM = {
    "API_KEY_FAILURES_PER_ADDRESS": "from this address",
    "API_KEY_FAILURES_PER_PREFIX": "with this key prefix from this address",
}


def api_key_throttle_check(*, address: str | None, raw_key: str) -> None:
    """Refuse a key presented from ``address`` while the address, or the key's prefix from
    it, is over its failure limit: raises :class:`AuthThrottled` naming the limit, its setting
    and when to retry. One ``MGET`` (and a ``PTTL`` when refusing); lets everything through
    while Redis is unreachable."""
    counters = _counters(address=address, raw_key=raw_key)
    now = time.monotonic()
    if all(_clear.get(key, 0.0) > now for key, _, _ in counters):
        return
    client = redis_client()
    try:
        counts = cast(Sequence[bytes | None], client.mget([key for key, _, _ in counters]))
        over = [
            (key, setting, limit)
            for (key, setting, limit), count in zip(counters, counts, strict=True)
            if count is not None and int(count) >= limit
        ]
        if not over:
            _trust(key for key, _, _ in counters)
            return
        pipeline = client.pipeline(transaction=False)
        for key, _, _ in over:
            pipeline.pttl(key)
        # The longest wait, when both are over: until then one of them still refuses.
        left_ms, setting, limit = max(
            (int(left), setting, limit)
            for left, (_, setting, limit) in zip(pipeline.execute(), over, strict=True)
        )
    except OUTAGE_ERRORS as error:
        logger.warning("API-key failures unreadable, not throttling: %s", error)
        return
    retry_after_s = max(1, -(-left_ms // 1000))
    raise AuthThrottled(
        f"too many failed API key authentications {_WHOM[setting]} ({setting}: {limit} "
        f"per {settings.API_KEY_FAILURE_WINDOW_S} s); retry in {retry_after_s} s",
        retry_after_s=retry_after_s,
        details={"setting": setting, "limit": limit, "retry_after_s": retry_after_s},
    )


def api_key_failure_record(*, address: str | None, raw_key: str, code: str) -> None:
    """Count a failure with ``code`` against ``address`` and the key's (prefix, address)
    when it could be a guess (:data:`COUNTED_CODES`). One script call; nothing while Redis
    is unreachable."""
    if code not in COUNTED_CODES:
        return
    keys = [key for key, _, _ in _counters(address=address, raw_key=raw_key)]
    with _clear_guard:
        for key in keys:
            _clear.pop(key, None)
    window_ms = settings.API_KEY_FAILURE_WINDOW_S * 1000
    try:
        redis_client().eval(_COUNT_LUA, len(keys), *keys, str(window_ms))
    except OUTAGE_ERRORS as error:
        logger.warning("API-key failure not counted: %s", error)


def _trust(keys: Iterable[str]) -> None:
    until = time.monotonic() + CLEAR_FOR_S
    with _clear_guard:
        if len(_clear) >= MAX_CLEAR:
            _clear.clear()
        for key in keys:
            _clear[key] = until


def api_key_failures_reset() -> int:
    """Forget every counted failure (an operator's reset; tests start from none). Answers how
    many counters were removed."""
    with _clear_guard:
        _clear.clear()
    client = redis_client()
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}*", count=1000))
    return int(cast(int, client.delete(*keys))) if keys else 0

"""Hours, days and months as µs since the epoch: days and months in a tenant's time zone."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from common.time import from_us, to_us

HOUR_US = 3_600_000_000


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; UTC when the name is unknown."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def hour_start(moment_us: int) -> int:
    return moment_us - moment_us % HOUR_US


def day_start(moment_us: int, time_zone: str) -> int:
    """The first moment of the local day holding ``moment_us``."""
    local = from_us(moment_us).astimezone(zone(time_zone))
    midnight = dt.datetime.combine(local.date(), dt.time(), tzinfo=local.tzinfo)
    return to_us(midnight)


def month_start(moment_us: int, time_zone: str) -> int:
    """The first moment of the local month holding ``moment_us``."""
    local = from_us(moment_us).astimezone(zone(time_zone))
    first = dt.datetime(local.year, local.month, 1, tzinfo=local.tzinfo)
    return to_us(first)


def next_start(window: str, start_us: int, time_zone: str) -> int | None:
    """When the ``day`` or ``month`` window that began at ``start_us`` rolls over; None for
    windows that never roll (``turn``, ``lifetime``)."""
    local = from_us(start_us).astimezone(zone(time_zone))
    if window == "day":
        following = local.date() + dt.timedelta(days=1)
        return to_us(dt.datetime.combine(following, dt.time(), tzinfo=local.tzinfo))
    if window == "month":
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        return to_us(dt.datetime(year, month, 1, tzinfo=local.tzinfo))
    return None

"""Time helpers. The platform speaks microseconds since the Unix epoch everywhere."""

from __future__ import annotations

import datetime as dt
import time as _time

from django.utils import timezone


def now() -> dt.datetime:
    """The current aware UTC datetime (microsecond precision, like PostgreSQL's timestamptz)."""
    return timezone.now()


def now_us() -> int:
    """Microseconds since the Unix epoch."""
    return _time.time_ns() // 1_000


def to_us(moment: dt.datetime) -> int:
    """An aware datetime as microseconds since the epoch (exact, no float rounding)."""
    if timezone.is_naive(moment):
        raise ValueError("to_us() needs an aware datetime")
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(micros: int) -> dt.datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)

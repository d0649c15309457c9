"""Timestamps: the API's are integers, microseconds since the Unix epoch (UTC), in fields
named ``..._at``."""

from __future__ import annotations

import datetime as dt

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def datetime_from_us(us: int) -> dt.datetime:
    """The aware UTC ``datetime`` of a timestamp in µs (exact: no float rounding)."""
    return _EPOCH + dt.timedelta(microseconds=us)


def us_from_datetime(when: dt.datetime) -> int:
    """The µs timestamp of ``when``; a naive ``datetime`` is taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return (when - _EPOCH) // dt.timedelta(microseconds=1)

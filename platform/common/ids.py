"""Identifiers: time-ordered UUIDs (version 7) for primary keys.

Version 7 UUIDs sort by creation time, which keeps PostgreSQL's B-tree indexes
compact and makes ``ORDER BY id`` a cheap proxy for insertion order.
"""

from __future__ import annotations

import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """A RFC 9562 version 7 UUID: 48 bits of Unix milliseconds, then 74 random bits."""
    unix_ms = time.time_ns() // 1_000_000
    value = (unix_ms & 0xFFFF_FFFF_FFFF) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 80) - 1)
    value &= ~(0xF << 76)
    value |= 0x7 << 76  # version
    value &= ~(0x3 << 62)
    value |= 0x2 << 62  # RFC 4122 variant
    return uuid.UUID(int=value)


def new_id() -> uuid.UUID:
    """The default primary key for every model of the platform."""
    return uuid7()


def id_of(value: uuid.UUID | str) -> uuid.UUID:
    """``value`` as a UUID (a string in any form :class:`uuid.UUID` takes); ValueError when
    it is none."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

"""Change tokens in Redis: a random value per key that is replaced whenever what it stands
for changes (a tenant's definitions, the credentials), so every process can tell in one
read whether what it cached is still current.

Read on every request, so through a plain Redis client (no pickling, no key munging: about
a third of Django's cache ``get``). While Redis is unreachable a read answers None, and the
caller reads from the database instead.
"""

from __future__ import annotations

from typing import cast

from django.db import transaction

from common.ids import new_id
from common.outages import OUTAGE_ERRORS
from common.redis_client import redis_client

PREFIX = "platform:token:"


def token_get(name: str) -> str | None:
    """The current token of ``name`` (made on first read); None while Redis is unreachable."""
    key = PREFIX + name
    try:
        client = redis_client()
        token = client.get(key)
        if token is None:
            client.set(key, new_id().hex, nx=True)
            token = client.get(key)
    except OUTAGE_ERRORS:
        return None
    return None if token is None else bytes(cast("bytes", token)).decode()


def token_bump(name: str) -> None:
    """Give ``name`` a new token. Raises one of ``OUTAGE_ERRORS`` while Redis is
    unreachable: a change whose token cannot move must not commit, or processes would keep
    what they cached before it once Redis is back."""
    redis_client().set(PREFIX + name, new_id().hex)


def token_bump_now_and_after_commit(name: str) -> None:
    """:func:`token_bump` now (a failure fails the caller's transaction) and again once the
    transaction commits, so that nothing read between the two stays cached."""
    token_bump(name)
    transaction.on_commit(lambda: token_bump(name), robust=True)

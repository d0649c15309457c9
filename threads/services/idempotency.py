"""``Idempotency-Key``: a POST that creates work, sent again with the same key and body
within :data:`KEY_TTL_US`, gets the first answer instead of creating the work twice.

The key's row is inserted in the transaction that creates the work, under a unique
constraint: of two racing requests, the second's insert waits for the first to commit and
then finds its answer (or, when the first rolled back, goes ahead itself). The row and the
work commit or roll back together, so a stored answer always describes committed work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils.crypto import salted_hmac

from common.errors import Conflict, ValidationFailed
from common.time import now_us
from tenancy.models import Tenant
from threads.models import IdempotencyKey

KEY_TTL_US = 24 * 3600 * 1_000_000
MAX_KEY_CHARS = 255
HEADER = "Idempotency-Key"
_HASH_SALT = "threads.idempotency.request"


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class Answer:
    status: int
    body: Mapping[str, Any]
    replayed: bool = False


def request_hash(*, method: str, path: str, body: Any) -> str:
    """What makes two requests the same: method, path and the JSON body (keys sorted).
    Keyed by the server's secret, so a stored hash of a body that carries secrets (a new
    thread's env) cannot be used to guess them."""
    canonical = json.dumps(body, sort_keys=True, cls=DjangoJSONEncoder, default=str)
    digest = salted_hmac(_HASH_SALT, f"{method}\n{path}\n{canonical}", algorithm="sha256")
    return digest.hexdigest()


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ValidationFailed(
            f"{HEADER} must be 1-{MAX_KEY_CHARS} printable characters", field=HEADER
        )
    return key


# Claim the key, or take over one that expired; nothing when a live claim exists.
_CLAIM = (
    "INSERT INTO threads_idempotencykey (tenant_id, key, request_hash, created_at) "
    "VALUES (%(tenant)s, %(key)s, %(hash)s, %(now)s) ON CONFLICT (tenant_id, key) DO UPDATE "
    "SET request_hash = EXCLUDED.request_hash, created_at = EXCLUDED.created_at, "
    "status_code = NULL, response = NULL "
    "WHERE threads_idempotencykey.created_at < %(expired)s RETURNING id"
)


def idempotent_call(
    *, tenant: Tenant, key: str, digest: str, produce: Callable[[], tuple[int, Mapping[str, Any]]]
) -> Answer:
    """Run ``produce`` once for ``key``: the first call (or the first after the key
    expired) runs it and stores its answer in the same transaction; a repeat with the same
    ``digest`` gets that answer (``replayed``). Raises IdempotencyKeyReused (409) when the
    key was used with another request. What ``produce`` raises rolls the claim back too."""
    check_key(key)
    now = now_us()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                _CLAIM,
                {"tenant": tenant.pk, "key": key, "hash": digest, "now": now,
                 "expired": now - KEY_TTL_US},
            )  # fmt: skip
            claimed = cursor.fetchone()
        if claimed is not None:
            status, body = produce()
            IdempotencyKey.objects.filter(pk=claimed[0]).update(
                status_code=status, response=json.loads(json.dumps(body, cls=DjangoJSONEncoder))
            )
            return Answer(status, body)
        first = IdempotencyKey.objects.for_tenant(tenant).get(key=key)
    if first.request_hash != digest:
        raise IdempotencyKeyReused(
            f"{HEADER} {key!r} was used for another request in the last 24 hours; "
            "send a new key for new work",
            field=HEADER,
        )
    assert first.status_code is not None
    assert first.response is not None
    return Answer(first.status_code, first.response, replayed=True)

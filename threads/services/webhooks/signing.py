"""An endpoint's secrets, sealed with the tenant's key (``secrets_encrypted``): the signing
secrets of a tenant's endpoint (the current one, and after a rotation the previous one until
its overlap ends) and the Standard Webhooks headers they sign; for an endpoint limited to a
turn, what its format keeps (:func:`secrets_open`)."""

from __future__ import annotations

import base64
import json
import secrets
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from standardwebhooks.webhooks import Webhook

from common.time import now_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from threads.models import WebhookEndpoint


def new_signing_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _context(row: WebhookEndpoint) -> str:
    return f"threads.WebhookEndpoint:{row.pk}"


def secrets_seal(row: WebhookEndpoint, items: list[dict[str, Any]] | dict[str, Any]) -> None:
    """Keep ``items`` (JSON) in ``row.secrets_encrypted``, sealed with the tenant's key and
    bound to the row."""
    row.secrets_encrypted = secret_encrypt(
        tenant=row.tenant, plaintext=json.dumps(items).encode(), context=_context(row)
    )


def secrets_open(row: WebhookEndpoint) -> Any:
    """What :func:`secrets_seal` kept in ``row``."""
    plain = secret_decrypt(
        tenant=row.tenant, ciphertext=bytes(row.secrets_encrypted), context=_context(row)
    )
    return json.loads(plain)


def _secrets_of(row: WebhookEndpoint) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = secrets_open(row)
    return items


def signing_secrets(row: WebhookEndpoint, now: int | None = None) -> list[str]:
    """The secrets deliveries are signed with now: the current one and any previous one
    still within its overlap."""
    now = now_us() if now is None else now
    return [
        item["secret"] for item in _secrets_of(row)
        if item["expires_at"] is None or item["expires_at"] > now
    ]  # fmt: skip


def secret_rotate(*, row: WebhookEndpoint) -> str:
    """A new signing secret (returned once); the previous one keeps signing for
    ``WEBHOOK_SECRET_OVERLAP_S`` so receivers can switch without missing a delivery."""
    now = now_us()
    overlap_until = now + settings.WEBHOOK_SECRET_OVERLAP_S * 1_000_000
    kept = [
        {**item, "expires_at": min(item["expires_at"] or overlap_until, overlap_until)}
        for item in _secrets_of(row)
        if item["expires_at"] is None or item["expires_at"] > now
    ]
    secret = new_signing_secret()
    secrets_seal(row, [{"secret": secret, "created_at": now, "expires_at": None}, *kept])
    row.updated_at = now
    row.save(update_fields=["secrets_encrypted", "updated_at"])
    return secret


def signature_headers(row: WebhookEndpoint, delivery_id: str, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt: one ``v1`` signature per secret."""
    moment = datetime.now(tz=UTC).replace(microsecond=0)
    signatures = [
        Webhook(secret).sign(msg_id=delivery_id, timestamp=moment, data=body)
        for secret in signing_secrets(row)
    ]
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": " ".join(signatures),
    }

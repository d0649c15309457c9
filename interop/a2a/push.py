"""A2A push notifications: a task's push configs, each a webhook endpoint limited to the
task's turn (``threads.services.webhooks.turn_endpoint_save``), so its notifications are
webhook deliveries: written with their events, retried with backoff, sent through the
egress guard, their attempts logged.

A config's URL is judged when saved as a webhook's is (``https``; an address the egress
guard refuses is invalid params naming the field). Its ``token`` (sent back in
``X-A2A-Notification-Token``) and its ``authentication`` (``scheme`` and ``credentials``:
``Authorization: <scheme> <credentials>``) are sealed with the tenant's key and never read
back: Get and List answer the URL, the id and the scheme only.

A notification's body is one A2A ``StreamResponse`` (JSON), a status update as the task's
stream sends it (:class:`interop.a2a.stream.TaskUpdates`): *working* when the turn starts,
*input-required* when it waits for a person's decision, and its final status (with the
last answer, or why it failed) when it ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

from a2a.types import (
    AuthenticationInfo,
    InvalidParamsError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from common.errors import ValidationFailed
from interop.a2a.stream import TaskUpdates
from threads.models import TURN_TERMINAL, Turn, WebhookDelivery, WebhookEndpoint
from threads.services.webhooks import (
    MAX_TENANT_TURN_ENDPOINTS,
    MAX_TURN_ENDPOINTS,
    WebhookRequest,
    endpoint_secrets,
    turn_endpoint_delete,
    turn_endpoint_save,
    turn_endpoints,
    webhook_url_check,
)

FORMAT: Final = "a2a"
TOKEN_HEADER: Final = "X-A2A-Notification-Token"  # noqa: S105 - a header name
MAX_ID_CHARS: Final = 200
MAX_SECRET_CHARS: Final = 4096
# An HTTP authentication scheme is a token (RFC 9110); credentials and the token are
# visible ASCII (a header value that cannot split or smuggle a header).
_SCHEME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_VISIBLE = re.compile(r"[\x21-\x7e]+( [\x21-\x7e]+)*")

# The config of a message (SendMessage's configuration) or of CreateTaskPushNotificationConfig.
SEND_FIELD: Final = "configuration.taskPushNotificationConfig."


def push_render(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> WebhookRequest | None:
    """The notification of one event of the config's task: its ``StreamResponse`` and the
    config's headers; None when the event says nothing to the task's client (a queue
    change that neither ended nor removed it)."""
    turn = endpoint.turn
    assert turn is not None  # an A2A endpoint is always a task's
    responses, _ = TaskUpdates(turn).responses(delivery.payload)
    if not responses:
        return None
    secrets = endpoint_secrets(endpoint)
    headers = {"content-type": "application/json"}
    if secrets.get("token"):
        headers[TOKEN_HEADER] = secrets["token"]
    if secrets.get("scheme") and secrets.get("credentials"):
        headers["authorization"] = f"{secrets['scheme']} {secrets['credentials']}"
    return WebhookRequest(json.dumps(MessageToDict(responses[0])), headers)


def _secrets(config: TaskPushNotificationConfig, prefix: str) -> dict[str, str]:
    """The config's token and credentials, checked: InvalidParamsError naming the field."""
    kept: dict[str, str] = {}
    if config.token:
        if len(config.token) > MAX_SECRET_CHARS or not _VISIBLE.fullmatch(config.token):
            raise InvalidParamsError(
                f"{prefix}token: at most {MAX_SECRET_CHARS} visible ASCII characters"
            )
        kept["token"] = config.token
    if config.HasField("authentication"):
        auth = config.authentication
        if not _SCHEME.fullmatch(auth.scheme):
            raise InvalidParamsError(
                f"{prefix}authentication.scheme: an HTTP authentication scheme (e.g. Bearer)"
            )
        if auth.credentials and (
            len(auth.credentials) > MAX_SECRET_CHARS or not _VISIBLE.fullmatch(auth.credentials)
        ):
            raise InvalidParamsError(
                f"{prefix}authentication.credentials: at most {MAX_SECRET_CHARS} visible "
                "ASCII characters"
            )
        kept["scheme"] = auth.scheme
        if auth.credentials:
            kept["credentials"] = auth.credentials
    return kept


def _refusal(error: ValidationFailed, prefix: str) -> str:
    if error.field == "turn":
        return f"a task has at most {MAX_TURN_ENDPOINTS} push configs; delete one first"
    if error.field == "tenant":
        return (
            f"the tenant's open tasks have at most {MAX_TENANT_TURN_ENDPOINTS} push configs "
            "together"
        )
    return f"{prefix}{error.message}"


def push_config_check(
    config: TaskPushNotificationConfig, *, prefix: str = ""
) -> Callable[[Turn], TaskPushNotificationConfig]:
    """Judge ``config`` (its id, URL, token and credentials; InvalidParamsError naming the
    field, ``prefix`` before its name), then the save of it for a turn (see
    :func:`push_config_save`), to run in the transaction that submits the turn."""
    if len(config.id) > MAX_ID_CHARS or not config.id.isprintable():
        raise InvalidParamsError(f"{prefix}id: at most {MAX_ID_CHARS} printable characters")
    if not config.url:
        raise InvalidParamsError(f"{prefix}url: required")
    try:
        webhook_url_check(config.url)
    except ValidationFailed as error:
        raise InvalidParamsError(_refusal(error, prefix)) from error
    secrets = _secrets(config, prefix)

    def save(turn: Turn) -> TaskPushNotificationConfig:
        try:
            row = turn_endpoint_save(
                turn=turn, key=config.id or str(turn.pk), url=config.url, body_format=FORMAT,
                secrets=secrets,
            )  # fmt: skip
        except ValidationFailed as error:
            raise InvalidParamsError(_refusal(error, prefix)) from error
        return push_config_json(row)

    return save


def push_config_save(
    *, turn: Turn, config: TaskPushNotificationConfig
) -> TaskPushNotificationConfig:
    """Create or replace (same ``id``; none: the task's id) a push config of the task of
    ``turn``, which must not be over (UnsupportedOperationError). At most
    ``MAX_TURN_ENDPOINTS`` per task, ``MAX_TENANT_TURN_ENDPOINTS`` per tenant
    (InvalidParamsError)."""
    if turn.status in TURN_TERMINAL:
        raise UnsupportedOperationError(
            f"task {turn.pk} is over; nothing would be pushed (GetTask reads it)"
        )
    return push_config_check(config)(turn)


def push_config_json(row: WebhookEndpoint) -> TaskPushNotificationConfig:
    """A config as Get and List answer it: without its token and credentials."""
    config = TaskPushNotificationConfig(id=row.key, task_id=str(row.turn_id), url=row.url)
    scheme = endpoint_secrets(row).get("scheme")
    if scheme:
        config.authentication.CopyFrom(AuthenticationInfo(scheme=scheme))
    return config


def push_configs(*, turn: Turn) -> list[TaskPushNotificationConfig]:
    return [push_config_json(row) for row in turn_endpoints(turn=turn)
            if row.body_format == FORMAT]  # fmt: skip


def _row(turn: Turn, config_id: str) -> WebhookEndpoint | None:
    wanted = config_id or str(turn.pk)
    return next((row for row in turn_endpoints(turn=turn)
                 if row.body_format == FORMAT and row.key == wanted), None)  # fmt: skip


def push_config_get(*, turn: Turn, config_id: str) -> TaskPushNotificationConfig:
    """The task's config ``config_id``; TaskNotFoundError when it has none of that id."""
    row = _row(turn, config_id)
    if row is None:
        raise TaskNotFoundError(f"task {turn.pk} has no push config {config_id!r}")
    return push_config_json(row)


def push_config_delete(*, turn: Turn, config_id: str) -> None:
    """Stop and remove the task's config ``config_id`` (none of that id: nothing to do)."""
    row = _row(turn, config_id)
    if row is not None:
        turn_endpoint_delete(row=row)

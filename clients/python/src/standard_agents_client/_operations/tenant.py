"""The tenant's configuration: schedules, webhooks, definitions, bundles, permission
rules and the registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

from standard_agents_client._call import (
    Call,
    Upload,
    body,
    idempotency,
    query,
    read_json,
    read_nothing,
    read_page,
    read_text,
    segment,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import (
    AgentDefinition,
    Bundle,
    BundleReport,
    CodeToolDefinition,
    ModelDefinition,
    PermissionRule,
    PromptDefinition,
    RegistryKind,
    Schedule,
    Webhook,
    WebhookDelivery,
    WebhookSecret,
)

D = TypeVar("D")


# Schedules ------------------------------------------------------------------------------------


def schedule_list(
    *, thread_id: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[Page[Schedule]]:
    """The tenant's schedules, oldest first; ``thread_id`` keeps one thread's."""
    return Call(
        "GET", "/schedules", read_page, query(thread_id=thread_id, limit=limit, cursor=cursor)
    )


def schedule_create(
    cron: str,
    *,
    agent: str | None = None,
    thread_id: str | None = None,
    input: str | Mapping[str, Any] | None = None,
    effect: Mapping[str, Any] | None = None,
    action: Literal["turn", "effect"] | None = None,
    timezone: str | None = None,
    name: str | None = None,
    paused: bool | None = None,
    idempotency_key: str | None = None,
) -> Call[Schedule]:
    """A recurring schedule on ``cron`` (five fields) in ``timezone`` (default UTC):
    each run submits ``input`` (a message's content, or ``{content, role?, metadata?}``)
    to ``thread_id``, or to a new thread of ``agent``; or, with ``action="effect"``, fires
    ``effect`` (``{name, args?}``) on ``thread_id``. A repeat with the same
    ``idempotency_key`` answers the first schedule instead of a second."""
    turn = {"content": input} if isinstance(input, str) else input
    payload = body(
        cron=cron, agent=agent, thread_id=thread_id, input=turn, effect=effect, action=action,
        timezone=timezone, name=name, paused=paused,
    )  # fmt: skip
    return Call("POST", "/schedules", read_json, json=payload, headers=idempotency(idempotency_key))


def schedule_get(schedule_id: str) -> Call[Schedule]:
    """One schedule."""
    return Call("GET", f"/schedules/{segment(schedule_id)}", read_json)


def schedule_update(
    schedule_id: str,
    *,
    cron: str | None = None,
    timezone: str | None = None,
    input: str | Mapping[str, Any] | None = None,
    effect: Mapping[str, Any] | None = None,
    name: str | None = None,
    paused: bool | None = None,
) -> Call[Schedule]:
    """Change a schedule (merged; a new ``cron`` or ``timezone`` moves its next run)."""
    turn = {"content": input} if isinstance(input, str) else input
    payload = body(
        cron=cron, timezone=timezone, input=turn, effect=effect, name=name, paused=paused
    )
    return Call("PATCH", f"/schedules/{segment(schedule_id)}", read_json, json=payload)


def schedule_delete(schedule_id: str) -> Call[None]:
    """Delete a schedule."""
    return Call("DELETE", f"/schedules/{segment(schedule_id)}", read_nothing)


def schedule_pause(schedule_id: str) -> Call[Schedule]:
    """Pause a schedule: no run until it is resumed."""
    return Call("POST", f"/schedules/{segment(schedule_id)}/pause", read_json)


def schedule_resume(schedule_id: str) -> Call[Schedule]:
    """Resume a schedule from its next slot after now (missed slots are not made up)."""
    return Call("POST", f"/schedules/{segment(schedule_id)}/resume", read_json)


# Webhooks -------------------------------------------------------------------------------------


def webhook_list(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[Webhook]]:
    """The tenant's webhook endpoints (admins)."""
    return Call("GET", "/webhooks", read_page, query(limit=limit, cursor=cursor))


def webhook_create(
    url: str,
    event_types: Sequence[str],
    *,
    description: str | None = None,
    enabled: bool | None = None,
) -> Call[Webhook]:
    """A webhook endpoint for ``event_types`` (admins); the answer's ``secret``
    (``whsec_…``) signs deliveries and is shown this once."""
    payload = body(url=url, event_types=list(event_types), description=description,
                   enabled=enabled)  # fmt: skip
    return Call("POST", "/webhooks", read_json, json=payload)


def webhook_get(webhook_id: str) -> Call[Webhook]:
    """One webhook endpoint."""
    return Call("GET", f"/webhooks/{segment(webhook_id)}", read_json)


def webhook_update(
    webhook_id: str,
    *,
    url: str | None = None,
    event_types: Sequence[str] | None = None,
    description: str | None = None,
    enabled: bool | None = None,
) -> Call[Webhook]:
    """Change a webhook endpoint (merged); ``enabled=True`` turns a disabled one back on."""
    payload = body(
        url=url, event_types=list(event_types) if event_types is not None else None,
        description=description, enabled=enabled,
    )  # fmt: skip
    return Call("PATCH", f"/webhooks/{segment(webhook_id)}", read_json, json=payload)


def webhook_delete(webhook_id: str) -> Call[None]:
    """Delete a webhook endpoint."""
    return Call("DELETE", f"/webhooks/{segment(webhook_id)}", read_nothing)


def webhook_rotate_secret(webhook_id: str) -> Call[WebhookSecret]:
    """A new signing secret; the previous one keeps signing alongside it for a while."""
    return Call("POST", f"/webhooks/{segment(webhook_id)}/rotate-secret", read_json)


def webhook_deliveries(
    webhook_id: str,
    *,
    status: Literal["pending", "sending", "delivered", "failed"] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[WebhookDelivery]]:
    """The endpoint's deliveries, newest first, each with its attempts' log."""
    params = query(status=status, limit=limit, cursor=cursor)
    return Call("GET", f"/webhooks/{segment(webhook_id)}/deliveries", read_page, params)


def webhook_redeliver(webhook_id: str, delivery_id: str) -> Call[WebhookDelivery]:
    """Send a delivery again now (same ``webhook-id``, so receivers can deduplicate)."""
    path = f"/webhooks/{segment(webhook_id)}/deliveries/{segment(delivery_id)}/redeliver"
    return Call("POST", path, read_json)


# Definitions ----------------------------------------------------------------------------------


class DefinitionOperations(Generic[D]):
    """CRUD by name for one kind of definition (``models``, ``prompts``, ``agents``,
    ``code-tools``). Writes validate the tenant's definitions as a whole: a problem is a
    ``ValidationError`` naming the definition and field; warnings come back in the
    answer's ``warnings``."""

    def __init__(self, collection: str) -> None:
        self.collection = collection

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Call[Page[D]]:
        """The tenant's definitions of this kind."""
        return Call("GET", f"/{self.collection}", read_page, query(limit=limit, cursor=cursor))

    def get(self, name: str) -> Call[D]:
        """One definition, by name."""
        return Call("GET", f"/{self.collection}/{segment(name)}", read_json)

    def create(self, document: Mapping[str, Any]) -> Call[D]:
        """Create a definition from its document (the fields bundles and the REST API
        share)."""
        return Call("POST", f"/{self.collection}", read_json, json=dict(document))

    def replace(self, name: str, document: Mapping[str, Any]) -> Call[D]:
        """Replace a definition with ``document`` (a new ``name`` in it renames it)."""
        return Call("PUT", f"/{self.collection}/{segment(name)}", read_json, json=dict(document))

    def update(self, name: str, changes: Mapping[str, Any]) -> Call[D]:
        """Change some fields of a definition (merged into its current document)."""
        return Call("PATCH", f"/{self.collection}/{segment(name)}", read_json, json=dict(changes))

    def delete(self, name: str) -> Call[None]:
        """Delete a definition (``Conflict`` while others refer to it)."""
        return Call("DELETE", f"/{self.collection}/{segment(name)}", read_nothing)


MODELS: DefinitionOperations[ModelDefinition] = DefinitionOperations("models")
PROMPTS: DefinitionOperations[PromptDefinition] = DefinitionOperations("prompts")
AGENTS: DefinitionOperations[AgentDefinition] = DefinitionOperations("agents")
CODE_TOOLS: DefinitionOperations[CodeToolDefinition] = DefinitionOperations("code-tools")


def bundle_export() -> Call[Bundle]:
    """The tenant's definitions as one bundle (never API keys)."""
    return Call("GET", "/bundles", read_json)


def bundle_export_yaml() -> Call[str]:
    """The tenant's definitions as one bundle in YAML."""
    return Call("GET", "/bundles", read_text, query(format="yaml"))


def bundle_import(
    bundle: Mapping[str, Any] | str | bytes, *, dry_run: bool = False, replace: bool = False
) -> Call[BundleReport]:
    """Import a bundle (a mapping, or YAML or JSON text): definitions are upserted by name
    (``replace`` also deletes what the bundle does not hold), all or nothing. With
    ``dry_run`` nothing changes and the report says what would. A bundle with problems is
    a ``ValidationError`` whose ``details`` list every one with its path."""
    params = query(dry_run=dry_run or None, replace=replace or None)
    if isinstance(bundle, Mapping):
        return Call("POST", "/bundles", read_json, params, json=dict(bundle))
    raw = bundle.encode() if isinstance(bundle, str) else bundle
    headers = {"Content-Type": "application/yaml"}
    return Call("POST", "/bundles", read_json, params, content=Upload(raw), headers=headers)


def permission_rule_list(
    *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[PermissionRule]]:
    """The tenant's permission rules for tool calls, oldest first."""
    return Call("GET", "/permission-rules", read_page, query(limit=limit, cursor=cursor))


def permission_rule_create(
    decision: Literal["allow", "ask", "deny"],
    *,
    agent: str | None = None,
    tool: str | None = None,
    when: Any = None,
    expires_in: int | None = None,
    on_expiry: Literal["deny", "allow"] | None = None,
    description: str | None = None,
) -> Call[PermissionRule]:
    """A rule (admins): ``decision`` for calls of ``tool`` by ``agent`` (None: every
    tool, every agent), limited by the JSON-logic condition ``when``. An ``ask`` rule may
    say how long a person has (``expires_in`` seconds) and what expiry decides."""
    payload = body(
        decision=decision, agent=agent, tool=tool, when=when, expires_in=expires_in,
        on_expiry=on_expiry, description=description,
    )  # fmt: skip
    return Call("POST", "/permission-rules", read_json, json=payload)


def permission_rule_get(rule_id: str) -> Call[PermissionRule]:
    """One permission rule."""
    return Call("GET", f"/permission-rules/{segment(rule_id)}", read_json)


def permission_rule_replace(rule_id: str, rule: Mapping[str, Any]) -> Call[PermissionRule]:
    """Replace a rule with ``rule`` (``{decision, agent?, tool?, when?, ...}``)."""
    return Call("PUT", f"/permission-rules/{segment(rule_id)}", read_json, json=dict(rule))


def permission_rule_update(rule_id: str, changes: Mapping[str, Any]) -> Call[PermissionRule]:
    """Change some fields of a rule (merged)."""
    return Call("PATCH", f"/permission-rules/{segment(rule_id)}", read_json, json=dict(changes))


def permission_rule_delete(rule_id: str) -> Call[None]:
    """Delete a rule."""
    return Call("DELETE", f"/permission-rules/{segment(rule_id)}", read_nothing)


def registry_list(
    kind: RegistryKind, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[dict[str, Any]]]:
    """What the operator's Python registry offers this tenant: its ``tools``, ``hooks``,
    ``effects`` or ``endpoints``."""
    return Call("GET", f"/registry/{segment(kind)}", read_page, query(limit=limit, cursor=cursor))

"""The cross-tenant matrix: tenant B's admin key gets 404 on every tenant-A object route.

Every API route that takes an object id must appear in ``OBJECT_ROUTES``; a new
route without an entry fails ``test_every_object_route_is_covered``, so the
matrix grows with the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from agents.bundles import bundle_export
from agents.credentials import credential_save
from agents.models import PermissionRule, ProviderCredential
from agents.registry import thread_endpoint, use_registry
from common.time import now_us
from compaction.models import Compaction
from config.routing import websocket_urlpatterns
from connectors.a2a import a2a_agent_save
from connectors.models import A2aAgent, McpServer
from connectors.servers import mcp_server_save
from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import ApiKey, Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_api_key, make_thread
from threads.models import (
    Action,
    Event,
    IdempotencyKey,
    Log,
    Message,
    Schedule,
    ScheduledEffect,
    SubagentLink,
    Thread,
    ThreadEnv,
    ThreadFile,
    ThreadValue,
    Turn,
    VariableRequest,
    WebhookDelivery,
    WebhookEndpoint,
)
from threads.services.control import turn_cancel
from threads.services.env import thread_env_set
from threads.services.files import file_write
from threads.services.inbox import message_queue
from threads.services.logs import log_create
from threads.services.messages import message_inject
from threads.services.values import value_set
from threads.services.webhooks import endpoint_save
from threads.state import ThreadState
from usage.ledger import Entry, record
from usage.models import Budget, BudgetCounter

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")


def _owned_api_key(tenant: Tenant) -> str:
    return str(make_api_key(tenant, name="victim", role=Role.MEMBER).api_key.id)


def _owned_definition(name: str) -> Callable[[Tenant], dict[str, str]]:
    def build(tenant: Tenant) -> dict[str, str]:
        seed_rich(tenant)
        return {"name": name}

    return build


def _owned_permission_rule(tenant: Tenant) -> str:
    return str(PermissionRule.objects.create(tenant=tenant, tool="refund", decision="deny").id)


def _owned_credential(tenant: Tenant) -> dict[str, str]:
    credential_save(
        tenant=tenant, data={"name": "team_key", "provider": "openai", "api_key": "sk-victim"}
    )
    return {"name": "team_key"}


def _owned_mcp_server(tenant: Tenant) -> dict[str, str]:
    """The tenant's MCP server ``weather`` (several routes of one test may ask for it)."""
    if McpServer.objects.for_tenant(tenant).filter(name="weather").exists():
        return {"name": "weather"}
    mcp_server_save(
        tenant=tenant,
        data={"name": "weather", "url": "https://mcp.example.com/mcp",
              "auth": {"type": "bearer", "token": "victim-token"}},
    )  # fmt: skip
    return {"name": "weather"}


def _owned_a2a_agent(tenant: Tenant) -> dict[str, str]:
    """The tenant's remote A2A agent ``translator``."""
    if A2aAgent.objects.for_tenant(tenant).filter(name="translator").exists():
        return {"name": "translator"}
    a2a_agent_save(
        tenant=tenant,
        data={"name": "translator", "url": "https://a2a.example.com/",
              "auth": {"type": "bearer", "token": "victim-token"}},
    )  # fmt: skip
    return {"name": "translator"}


def _owned_thread(tenant: Tenant) -> dict[str, str]:
    return {"thread_id": str(make_thread(tenant).id)}


def _owned_compaction(tenant: Tenant) -> dict[str, str]:
    """An active compaction of the tenant's thread (the one a revert may revert)."""
    thread = make_thread(tenant)
    compaction = Compaction.objects.create(
        tenant=tenant, thread=thread, side="a", tier="summary", trigger="proactive",
        from_seq=2, to_seq=3, summary={"intent": "private"}, summary_text="private",
    )  # fmt: skip
    return {"thread_id": str(thread.id), "compaction_id": str(compaction.id)}


def _owned_message(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    message = message_inject(thread=thread, role="user", content="private")
    return {"thread_id": str(thread.id), "message_id": str(message.id)}


def _owned_log(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    log = log_create(thread=thread, kind="llm", data={"secret": "private"})
    return {"thread_id": str(thread.id), "log_id": str(log.id)}


def _owned_events(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    ThreadState(thread).emit("secret", {"private": True})
    return {"thread_id": str(thread.id)}


def _owned_value(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    value_set(thread=thread, key="plan", value={"private": True})
    return {"thread_id": str(thread.id), "key": "plan"}


def _owned_env(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    thread_env_set(thread=thread, name="TOKEN", value="private")
    return {"thread_id": str(thread.id), "name": "TOKEN"}


def _owned_file(tenant: Tenant) -> dict[str, str]:
    thread = make_thread(tenant)
    file_write(thread=thread, path="/notes/plan.txt", data=b"private", mime_type="text/plain")
    return {"thread_id": str(thread.id), "file_path": "notes/plan.txt"}


def _owned_turn(tenant: Tenant) -> dict[str, str]:
    """A finished turn: its wait answers at once for its owner."""
    thread = make_thread(tenant)
    turn = message_queue(thread=thread, role="user", content="private")
    turn_cancel(thread=thread, turn=turn)
    return {"turn_id": str(turn.pk)}


def _owned_variable_request(tenant: Tenant) -> dict[str, str]:
    """A pending variable-bootstrap request of the tenant's thread."""
    thread = make_thread(tenant)
    request = VariableRequest.objects.create(
        tenant=tenant, thread=thread, relationship="helper", agent_name="helper",
        required=["TOKEN"], missing=["TOKEN"], spawn={"message": "private"},
        expires_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    return {"thread_id": str(thread.id), "request_id": str(request.pk)}


def _owned_action(tenant: Tenant) -> dict[str, str]:
    """A pending approval on a turn of the tenant's thread."""
    thread = make_thread(tenant)
    turn = message_queue(thread=thread, role="user", content="private")
    action = Action.objects.create(
        tenant=tenant, thread=thread, turn=turn, kind="approval", tool_call_id="c",
        tool_name="refund", arguments={"amount": 1}, decisions=["approve", "deny", "edit"],
        expires_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    return {"thread_id": str(thread.id), "action_id": str(action.pk)}


def _owned_effect(tenant: Tenant) -> dict[str, str]:
    """A pending effect of the tenant's thread."""
    thread = make_thread(tenant)
    row = ScheduledEffect.objects.create(
        tenant=tenant, thread=thread, name="remind", args={"private": True},
        scheduled_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    return {"thread_id": str(thread.id), "effect_id": str(row.pk)}


def _owned_schedule(tenant: Tenant) -> str:
    """A schedule of the tenant's thread."""
    thread = make_thread(tenant)
    return str(
        Schedule.objects.create(
            tenant=tenant, thread=thread, cron="0 9 * * *", action="turn",
            input={"content": "private"}, next_run_at=now_us() + 3_600_000_000,
        ).pk
    )  # fmt: skip


def _owned_webhook(tenant: Tenant) -> str:
    row, _secret = endpoint_save(
        tenant=tenant, data={"url": "https://example.com/private", "event_types": ["thread.status"]}
    )
    return str(row.pk)


def _owned_delivery(tenant: Tenant) -> dict[str, str]:
    endpoint = _owned_webhook(tenant)
    delivery = WebhookDelivery.objects.create(
        tenant=tenant, endpoint_id=endpoint, event_type="thread.status", payload={"private": 1}
    )
    return {"pk": endpoint, "delivery_id": str(delivery.pk)}


def _owned_children(tenant: Tenant) -> dict[str, str]:
    """A parent thread with one registry entry (its child's id must not leak)."""
    parent = make_thread(tenant)
    child = make_thread(tenant, parent=parent, root_id=parent.pk, parent_relationship="pair")
    SubagentLink.objects.create(
        tenant=tenant, thread=parent, child=child, relationship="pair", owner="a",
        agent_name="pair", title="private",
    )  # fmt: skip
    return {"thread_id": str(parent.id)}


def _owned_budget(tenant: Tenant) -> str:
    """A budget of the tenant with a counter (its standing must not leak)."""
    budget = Budget.objects.create(
        tenant=tenant, name="private", scope="agent", window="day", limit_tokens=10
    )
    BudgetCounter.objects.create(
        tenant=tenant, budget=budget, subject="helper", window_start=0, spent_tokens=3
    )
    return str(budget.pk)


# Route name -> builds an object of the given tenant and returns the URL kwargs.
OBJECT_ROUTES: dict[str, Callable[[Tenant], dict[str, str]]] = {
    "thread-detail": lambda tenant: {"pk": str(make_thread(tenant).id)},
    "thread-messages": _owned_thread,
    "thread-message-inject": _owned_thread,
    "thread-continue": _owned_thread,
    "thread-stop": _owned_thread,
    "thread-terminate": _owned_thread,
    "thread-run-code": _owned_thread,
    "thread-message-detail": _owned_message,
    "thread-logs": _owned_thread,
    "thread-log-detail": _owned_log,
    "thread-events": _owned_events,
    "thread-storage": _owned_events,
    "thread-compactions": _owned_thread,
    "thread-tools": _owned_thread,
    "session-detail": lambda tenant: {"session_id": str(make_thread(tenant).id)},
    "thread-export": _owned_events,
    "session-export": lambda tenant: {"session_id": _owned_events(tenant)["thread_id"]},
    "thread-compaction-detail": _owned_compaction,
    "thread-compaction-revert": _owned_compaction,
    "thread-endpoint": lambda tenant: {**_owned_thread(tenant), "route": "ping"},
    "thread-kv": _owned_thread,
    "thread-kv-detail": _owned_value,
    "thread-env": _owned_thread,
    "thread-env-detail": _owned_env,
    "thread-fs-root": _owned_thread,
    "thread-fs-root-slash": _owned_thread,
    "thread-fs": _owned_file,
    "thread-fs-search": _owned_thread,
    "thread-fs-stats": _owned_thread,
    "thread-turns": _owned_thread,
    "thread-turns-wait": _owned_thread,
    "thread-turns-estimate": _owned_thread,
    "thread-children": _owned_children,
    "thread-variables": _owned_variable_request,
    "thread-actions": _owned_thread,
    "thread-action": _owned_action,
    "thread-effects": _owned_thread,
    "thread-effect": _owned_effect,
    "thread-effect-run": _owned_effect,
    "thread-effect-replay": _owned_effect,
    "turn-detail": _owned_turn,
    "turn-cancel": _owned_turn,
    "turn-promote": _owned_turn,
    "turn-wait": _owned_turn,
    "turn-stream": _owned_turn,
    "turn-tools": _owned_turn,
    "api-key-detail": lambda tenant: {"pk": _owned_api_key(tenant)},
    "api-key-revoke": lambda tenant: {"pk": _owned_api_key(tenant)},
    "model-detail": _owned_definition("fast"),
    "prompt-detail": _owned_definition("assistant"),
    "agent-detail": _owned_definition("helper"),
    "code-tool-detail": _owned_definition("tally_words"),
    "permission-rule-detail": lambda tenant: {"pk": _owned_permission_rule(tenant)},
    "credential-detail": _owned_credential,
    "mcp-server-detail": _owned_mcp_server,
    "mcp-server-tools": _owned_mcp_server,
    "mcp-server-refresh": _owned_mcp_server,
    "a2a-agent-detail": _owned_a2a_agent,
    "a2a-agent-card": _owned_a2a_agent,
    "a2a-agent-refresh": _owned_a2a_agent,
    "schedule-detail": lambda tenant: {"pk": _owned_schedule(tenant)},
    "schedule-pause": lambda tenant: {"pk": _owned_schedule(tenant)},
    "schedule-resume": lambda tenant: {"pk": _owned_schedule(tenant)},
    "webhook-detail": lambda tenant: {"pk": _owned_webhook(tenant)},
    "webhook-rotate-secret": lambda tenant: {"pk": _owned_webhook(tenant)},
    "webhook-deliveries": lambda tenant: {"pk": _owned_webhook(tenant)},
    "webhook-redeliver": _owned_delivery,
    "budget-detail": lambda tenant: {"pk": _owned_budget(tenant)},
    "agui-run": lambda tenant: {"agent": _owned_definition("helper")(tenant)["name"]},
}


# Routes with parameters that do not address a tenant's object, and where their
# tenant isolation is tested instead.
NOT_TENANT_OBJECTS = {
    "tenant-env-detail": "names a variable of the caller's own tenant (no foreign id in the "
    "URL); tests/threads/test_env_api.py",
}


def _tenant_state(tenant: Tenant) -> object:
    """Everything the matrix checks stays untouched: keys, definitions, threads and rows."""
    return (
        list(ApiKey.objects.for_tenant(tenant).values()),
        bundle_export(tenant=tenant),
        list(PermissionRule.objects.for_tenant(tenant).values()),
        list(ProviderCredential.objects.for_tenant(tenant).values()),
        list(McpServer.objects.for_tenant(tenant).values()),
        list(Thread.objects.for_tenant(tenant).values()),
        list(Message.objects.for_tenant(tenant).values()),
        list(Compaction.objects.for_tenant(tenant).values()),
        list(Log.objects.for_tenant(tenant).values()),
        list(ThreadValue.objects.for_tenant(tenant).values()),
        list(ThreadEnv.objects.for_tenant(tenant).values()),
        list(ThreadFile.objects.for_tenant(tenant).values()),
        list(Event.objects.for_tenant(tenant).values()),
        list(Turn.objects.for_tenant(tenant).values()),
        list(IdempotencyKey.objects.for_tenant(tenant).values()),
        list(VariableRequest.objects.for_tenant(tenant).values()),
        list(Action.objects.for_tenant(tenant).values()),
        list(ScheduledEffect.objects.for_tenant(tenant).values()),
        list(Schedule.objects.for_tenant(tenant).values()),
        list(WebhookEndpoint.objects.for_tenant(tenant).values()),
        list(WebhookDelivery.objects.for_tenant(tenant).values()),
        list(SubagentLink.objects.for_tenant(tenant).values()),
        list(Budget.objects.for_tenant(tenant).values()),
        list(BudgetCounter.objects.for_tenant(tenant).values()),
    )


@pytest.fixture(autouse=True)
def _a_thread_endpoint() -> Iterator[None]:
    """thread-endpoint needs a registered endpoint for the owner's control request."""
    with use_registry():

        @thread_endpoint("ping", methods=["GET"])
        def ping(request: object, state: object, params: object) -> dict[str, bool]:
            return {"pong": True}

        yield


def _api_patterns(
    patterns: list[URLPattern | URLResolver], prefix: str = ""
) -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _api_patterns(entry.url_patterns, route)
        elif route.startswith("api/v1/") and entry.pattern.regex.groupindex:
            yield route, entry


def test_every_object_route_is_covered() -> None:
    names = {pattern.name for _, pattern in _api_patterns(get_resolver().url_patterns)}

    known = set(OBJECT_ROUTES) | set(NOT_TENANT_OBJECTS)
    assert names <= known, f"add to OBJECT_ROUTES: {names - known}"
    assert names, "no object routes found; the walker is broken"


@pytest.mark.parametrize("route_name", sorted(OBJECT_ROUTES))
def test_other_tenants_admin_gets_404_on_every_method(
    route_name: str,
    tenant: Tenant,
    other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    intruder = client_for(other_tenant, Role.ADMIN)
    url = reverse(route_name, kwargs=OBJECT_ROUTES[route_name](tenant))
    before = _tenant_state(tenant)

    statuses = {method: getattr(intruder, method)(url, {}, format="json") for method in METHODS}

    answered = {m: r.status_code for m, r in statuses.items() if r.status_code != 405}
    assert answered, f"{url} allows no method at all"
    assert set(answered.values()) == {404}, answered
    for response in statuses.values():
        assert response.json()["error"]["code"] in {"not_found", "method_not_allowed"}
    assert _tenant_state(tenant) == before
    # Control: the URL is right, since its own tenant's admin does not get 404 from it.
    owner = client_for(tenant, Role.ADMIN)
    owner_statuses = [getattr(owner, m)(url, {}, format="json").status_code for m in answered]
    assert any(code != 404 for code in owner_statuses), owner_statuses


def test_other_tenants_objects_never_appear_in_lists(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    make_api_key(tenant, name="a-only")

    listed = client_for(other_tenant, Role.ADMIN).get("/api/v1/api-keys").json()

    assert "a-only" not in {item["name"] for item in listed["results"]}


def test_other_tenants_budgets_and_usage_never_appear(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    _owned_budget(tenant)
    record(Entry(tenant_id=tenant.pk, key="a-only", kind="model", agent="private",
                 input_tokens=7, cost_micros=1))  # fmt: skip
    intruder = client_for(other_tenant, Role.ADMIN)

    budgets = intruder.get("/api/v1/budgets").json()
    usage = intruder.get("/api/v1/usage", {"group_by": "agent"}).json()
    exported = intruder.get("/api/v1/usage/export", {"group_by": "agent"})

    assert budgets["results"] == []
    assert usage["results"] == []
    assert b"private" not in b"".join(exported.streaming_content)  # type: ignore[attr-defined]


def test_other_tenants_audit_entries_never_appear(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    owner = client_for(tenant, Role.ADMIN)
    created = owner.post("/api/v1/api-keys", {"name": "a-only"}, format="json").json()
    intruder = client_for(other_tenant, Role.ADMIN)

    listed = intruder.get("/api/v1/audit").json()
    by_target = intruder.get("/api/v1/audit", {"target_id": created["id"]}).json()

    assert owner.get("/api/v1/audit").json()["results"][0]["target_id"] == created["id"]
    assert listed["results"] == []
    assert by_target["results"] == []


# WebSocket paths ------------------------------------------------------------------------------

# Socket route name -> builds an object of the given tenant and returns the path to open.
SOCKET_ROUTES: dict[str, Callable[[Tenant], str]] = {
    "ws-thread-events": lambda tenant: f"/ws/threads/{_owned_events(tenant)['thread_id']}/",
}


def test_every_socket_route_with_a_parameter_is_covered() -> None:
    names = {entry.name for entry in websocket_urlpatterns if entry.pattern.regex.groupindex}
    assert names == set(SOCKET_ROUTES)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route_name", sorted(SOCKET_ROUTES))
async def test_other_tenants_key_is_closed_4404_on_every_socket_and_receives_nothing(
    route_name: str, tenant: Tenant, other_tenant: Tenant
) -> None:
    path = await database_sync_to_async(SOCKET_ROUTES[route_name])(tenant)
    secret = (await database_sync_to_async(make_api_key)(other_tenant, role=Role.ADMIN)).secret
    socket = WebsocketCommunicator(
        TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        path,
        headers=[(b"authorization", f"Bearer {secret}".encode())],
    )

    connected, _ = await socket.connect()

    assert connected  # accepted so that the close code reaches browsers
    output = await socket.receive_output(timeout=5)
    assert (output["type"], output.get("code")) == ("websocket.close", 4404)
    await socket.wait()

"""Schemathesis over every operation of the OpenAPI schema, against a real uvicorn server
(issue: every bad input is a 4xx with the error shape).

Each operation that writes gets a tenant of its own (the reads share one), with an admin key
and real objects (definitions, a thread with a message, a log, a KV entry, an env variable,
a file, turns, a variable request), whose ids fill the path: the generated queries, headers
and bodies then reach the views instead of stopping at a 404, and what one operation
deletes or revokes cannot change another's outcome.

Every response must be: not a 5xx; a status the operation documents; in a documented media
type and shape; never an HTML page; for a 4xx, JSON with the error shape
``{"error": {"code", "message", ...}}``. Credentials are enforced: each operation is also
tried without its key and with a made-up one (a 401).

A second run leaves each operation's last path parameter to generation (ids that match
their pattern but name nothing, and, in the coverage phase, values that break it), the
ones before it naming real objects: a malformed id must match no route (a JSON 404),
never reach a view. Both runs also cover the two views the schema
leaves out, ``/api/schema/`` and ``/api/docs/``: their page answers a ``GET``; every other
method is a JSON 405.

The run is bounded and reproducible: ``MAX_EXAMPLES`` per operation and phase, a fixed
seed, derandomized generation, no example database.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from pytest_django.fixtures import Settings
from schemathesis import Case, CheckContext, Response
from schemathesis.schemas import BaseSchema

from agents.credentials import credential_save
from agents.models import PermissionRule
from common.time import now_us
from compaction.models import Compaction
from config.launcher import background_server
from connectors.a2a import a2a_agent_save
from connectors.servers import mcp_server_save
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_api_key, make_tenant, make_thread
from tests.support import current_database_url, server_warm_up
from tests.worker import private_queue, queue_delete, tasks_routed_to
from threads.models import (
    Action,
    Schedule,
    ScheduledEffect,
    Thread,
    VariableRequest,
    WebhookDelivery,
)
from threads.services.control import turn_cancel
from threads.services.env import tenant_env_set, thread_env_set
from threads.services.files import file_write
from threads.services.inbox import message_queue
from threads.services.logs import log_create
from threads.services.messages import message_inject
from threads.services.values import value_set
from threads.services.webhooks import endpoint_save
from usage.ledger import Entry, record
from usage.models import Budget

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability]

MAX_EXAMPLES = 10
MAX_EXAMPLES_GENERATED_IDS = 5
SEED = 20_251_118
REQUEST_TIMEOUT_S = 30
# OPTIONS answers on every route by design (docs/api.md); any other undocumented method
# must be a 405.
UNEXPECTED_METHODS = ["get", "put", "post", "delete", "patch", "trace"]
JSON_TYPES = ("application/json", "application/problem+json")

schema = schemathesis.pytest.from_fixture("api_schema")
schema_generated_ids = schemathesis.pytest.from_fixture("api_schema_generated_ids")

# The views the schema leaves out, described here so the runs cover them: a GET answers
# the view's own page (YAML or JSON, Swagger UI's HTML); every other method must be a 405.
UNLISTED: dict[str, Any] = {
    "/api/schema/": {
        "get": {
            "operationId": "schema_document",
            "security": [],
            "responses": {
                "200": {"content": {
                    media: {"schema": {}}
                    for media in ("application/vnd.oai.openapi", "application/yaml",
                                  "application/vnd.oai.openapi+json", "application/json")
                }},
                "406": {"content": {"application/json": {"schema": {}}}},
            },
        }
    },
    "/api/docs/": {
        "get": {
            "operationId": "docs_page",
            "security": [],
            "responses": {"200": {"content": {"text/html": {"schema": {"type": "string"}}}}},
        }
    },
}  # fmt: skip


@dataclass(frozen=True)
class World:
    """One operation's tenant: its admin key and the ids of its objects (``other_key``: a
    second key, the one the api-key routes address, so a revoke never hits the caller's)."""

    key: str
    thread: str
    message: str
    log: str
    request: str
    queued_turn: str
    ended_turn: str
    other_key: str
    rule: str
    action: str
    effect: str
    schedule: str
    webhook: str
    delivery: str
    budget: str
    compaction: str


def _world() -> World:
    tenant = make_tenant()
    seed_rich(tenant)
    tenant_env_set(tenant=tenant, name="COMPANY", value="Acme")
    credential_save(
        tenant=tenant, data={"name": "team_key", "provider": "openai", "api_key": "sk-team"}
    )
    # .invalid never resolves (RFC 2606): a listing fails at once, and is answered as such.
    mcp_server_save(tenant=tenant, data={"name": "weather", "url": "https://mcp.invalid/mcp"})
    a2a_agent_save(tenant=tenant, data={"name": "translator", "url": "https://a2a.invalid/"})
    thread = make_thread(tenant)
    message = message_inject(thread=thread, role="user", content="hello")
    log = log_create(thread=thread, kind="llm", data={"model": "fast"})
    value_set(thread=thread, key="plan", value={"steps": [1, 2]})
    thread_env_set(thread=thread, name="TOKEN", value="secret")
    file_write(thread=thread, path="/notes/plan.txt", data=b"plan", mime_type="text/plain")
    ended = message_queue(thread=thread, role="user", content="first")
    turn_cancel(thread=thread, turn=ended)
    queued = message_queue(thread=thread, role="user", content="second")
    action = Action.objects.create(
        tenant=tenant, thread=thread, turn=queued, kind="approval", tool_call_id="c",
        tool_name="refund", arguments={"amount": 1}, decisions=["approve", "deny", "edit"],
        schema={"type": "object", "properties": {"amount": {"type": "number"}}},
        expires_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    effect = ScheduledEffect.objects.create(
        tenant=tenant, thread=thread, name="remind", args={"text": "tea"},
        scheduled_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    schedule = Schedule.objects.create(
        tenant=tenant, thread=thread, cron="0 9 * * *", action="turn",
        input={"content": "hello"}, next_run_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    webhook, _secret = endpoint_save(
        tenant=tenant, data={"url": "https://example.com/hooks", "event_types": ["thread.status"]}
    )
    delivery = WebhookDelivery.objects.create(
        tenant=tenant, endpoint=webhook, event_type="thread.status", payload={"type": "x"}
    )
    record(Entry(tenant_id=tenant.pk, key="call", kind="model", agent="helper",
                 thread_id=thread.pk, model="fast", input_tokens=10, cost_micros=5))  # fmt: skip
    budget = Budget.objects.create(
        tenant=tenant, name="daily", scope="tenant", window="day", limit_tokens=1_000_000
    )
    return World(
        key=make_api_key(tenant, role=Role.ADMIN).secret,
        thread=str(thread.pk),
        message=str(message.pk),
        log=str(log.pk),
        request=str(_variable_request(tenant, thread).pk),
        queued_turn=str(queued.pk),
        ended_turn=str(ended.pk),
        other_key=str(make_api_key(tenant, name="other", role=Role.MEMBER).api_key.id),
        rule=str(PermissionRule.objects.create(tenant=tenant, tool="refund", decision="deny").id),
        action=str(action.pk),
        effect=str(effect.pk),
        schedule=str(schedule.pk),
        webhook=str(webhook.pk),
        delivery=str(delivery.pk),
        budget=str(budget.pk),
        compaction=str(
            Compaction.objects.create(
                tenant=tenant,
                thread=thread,
                side="a",
                tier="summary",
                trigger="proactive",
                from_seq=1,
                to_seq=1,
                summary_text="Summary",
            ).pk
        ),
    )


def _variable_request(tenant: Tenant, thread: Thread) -> VariableRequest:
    return VariableRequest.objects.create(
        tenant=tenant, thread=thread, relationship="helper", agent_name="helper",
        required=["TOKEN"], missing=["TOKEN"], spawn={"message": "hi"},
        expires_at=now_us() + 3_600_000_000,
    )  # fmt: skip


# A definition's name per collection; the env variable per level.
NAMES = {
    "/api/v1/agents/": "helper",
    "/api/v1/models/": "fast",
    "/api/v1/prompts/": "assistant",
    "/api/v1/code-tools/": "tally_words",
    "/api/v1/credentials/": "team_key",
    "/api/v1/mcp-servers/": "weather",
    "/api/v1/a2a-agents/": "translator",
    "/api/v1/env/": "COMPANY",
    "/api/v1/threads/{thread_id}/env/": "TOKEN",
}


# Body fields a view checks against the tenant's definitions: fixed to real names, so the
# rest of the body reaches the rules behind them.
BODY_VALUES: dict[str, dict[str, Any]] = {
    "POST /api/v1/threads/": {"body.agent": "helper"},
    "POST /api/v1/threads/{thread_id}/messages": {"body.content": "hello"},
    "POST /api/v1/threads/{thread_id}/turns": {"body.input.content": "hello"},
    # No worker runs the turn: a wait of 0 s answers at once, where a generated one would
    # hold the request until its timeout.
    "POST /api/v1/threads/{thread_id}/turns/wait": {
        "body.input.content": "hello",
        "query.timeout": 0,
    },
    "POST /api/v1/threads/wait": {
        "body.agent": "helper",
        "body.input.content": "hello",
        "query.timeout": 0,
    },
    "POST /api/v1/prompts/": {"body.model": "fast"},
    "PUT /api/v1/prompts/{name}/": {"body.model": "fast"},
    "POST /api/v1/agents/": {"body.side_a.prompt": "assistant"},
    "PUT /api/v1/agents/{name}/": {"body.side_a.prompt": "assistant"},
    # An AG-UI run streams its turn until the turn ends, and no worker runs turns here: no
    # messages (a 400 naming them) keeps every answer bounded; the rest is generated.
    "POST /api/v1/agui/{agent}": {"body.messages": []},
}


def _path_values(path: str, world: World) -> dict[str, str]:
    """Real values for the path parameters of ``path`` (``kind`` is left to generation)."""
    turn = world.ended_turn if path.endswith(("/wait", "/stream")) else world.queued_turn
    values = {
        "thread_id": world.thread,
        "session_id": world.thread,
        "id": world.other_key
        if path.startswith("/api/v1/api-keys/")
        else world.rule
        if path.startswith("/api/v1/permission-rules/")
        else world.schedule
        if path.startswith("/api/v1/schedules/")
        else world.webhook
        if path.startswith("/api/v1/webhooks/")
        else world.budget
        if path.startswith("/api/v1/budgets/")
        else world.thread,
        "name": next((name for prefix, name in NAMES.items() if path.startswith(prefix)), ""),
        "message_id": world.message,
        "compaction_id": world.compaction,
        "log_id": world.log,
        "key": "plan",
        "file_path": "notes/plan.txt",
        "request_id": world.request,
        "turn_id": turn,
        "action_id": world.action,
        "effect_id": world.effect,
        "delivery_id": world.delivery,
        "agent": "helper",
    }
    return {f"path.{name}": values[name] for name in values if "{" + name + "}" in path}


def _operations(document: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """``(label, operationId, path)`` of every operation."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "put", "post", "patch", "delete"):
                yield f"{method.upper()} {path}", operation["operationId"], path


def _config(
    base_url: str, document: Mapping[str, Any], keys: dict[str, str], *, real_ids: bool
) -> schemathesis.Config:
    """The run's configuration; ``keys`` gets each operation's API key, by label. With
    ``real_ids``, path parameters name real objects; without, the last one is generated
    and those before it name real objects, so that a made-up id reaches the view that
    looks it up (one tenant serves every operation: what a made-up id names does not
    exist)."""
    operations = []
    reader = _world()  # reads change nothing: they share one tenant
    for label, operation_id, path in _operations(document):
        world = reader if label.startswith("GET ") or not real_ids else _world()
        keys[label] = world.key
        parameters = _path_values(path, world)
        if not real_ids:
            generated = re.findall(r"\{(\w+)\}", path)[-1:]
            parameters = {
                name: value
                for name, value in parameters.items()
                if name.removeprefix("path.") not in generated
            }
        parameters |= BODY_VALUES.get(label, {})
        operations.append({"include-operation-id": operation_id, "parameters": parameters})
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "base-url": base_url,
            "request-timeout": REQUEST_TIMEOUT_S,
            "generation": {
                "max-examples": MAX_EXAMPLES if real_ids else MAX_EXAMPLES_GENERATED_IDS,
                "deterministic": True,
                "database": "none",
            },
            "phases": {
                "stateful": {"enabled": False},
                "coverage": {"unexpected-methods": UNEXPECTED_METHODS},
            },
            "checks": {
                # The schema says what a valid input looks like, not every rule a view
                # keeps (a name must be a definition's): valid-looking input may be a 4xx.
                "positive_data_acceptance": {"enabled": False},
                # Unknown query parameters and extra properties are ignored, not refused.
                "negative_data_rejection": {"enabled": False},
            },
            "operations": operations,
        }
    )


@pytest.fixture
def keys() -> dict[str, str]:
    """Each operation's admin API key, by label (``GET /api/v1/me/``)."""
    return {}


@pytest.fixture
def answered() -> Iterator[dict[str, set[int]]]:
    """The statuses each operation answered; at the end, every operation must have
    answered something besides a 404 (its real ids reached the view)."""
    statuses: dict[str, set[int]] = defaultdict(set)
    yield statuses
    for label in sorted(statuses):
        print(f"{label}: {sorted(statuses[label])}")
    only_404 = sorted(label for label, seen in statuses.items() if seen <= {404, 405})
    assert not only_404, f"operations that never got past a 404: {only_404}"


@pytest.fixture
def api_schema(
    transactional_db: None, settings: Settings, keys: dict[str, str]
) -> Iterator[BaseSchema]:
    yield from _served_schema(settings, keys, real_ids=True)


@pytest.fixture
def api_schema_generated_ids(
    transactional_db: None, settings: Settings, keys: dict[str, str]
) -> Iterator[BaseSchema]:
    yield from _served_schema(settings, keys, real_ids=False)


def _served_schema(
    settings: Settings, keys: dict[str, str], *, real_ids: bool
) -> Iterator[BaseSchema]:
    """The schema of a running server, with the views it leaves out (:data:`UNLISTED`)."""
    queue = private_queue()
    server_environment = {
        "DATABASE_URL": current_database_url(),
        "CELERY_QUEUE": queue,  # no worker: the turns it queues stay queued
        "MEDIA_ROOT": settings.MEDIA_ROOT,  # the files this test writes, and the test's own
        # Every operation is also tried with made-up keys, all from this loopback address:
        # the answer under test is their 401, not the 429 that throttling would give later.
        "API_KEY_FAILURES_PER_ADDRESS": "1000000",
        "API_KEY_FAILURES_PER_PREFIX": "1000000",
    }
    try:
        with tasks_routed_to(queue), background_server(server_environment) as (port, _):
            server_warm_up(port, timeout=30)
            base_url = f"http://127.0.0.1:{port}"
            document = _schema_document(base_url)
            config = _config(base_url, document, keys, real_ids=real_ids)
            document["paths"] |= UNLISTED
            yield schemathesis.openapi.from_dict(document, config=config)
    finally:
        queue_delete(queue)


def _schema_document(base_url: str) -> dict[str, Any]:
    # Our own loopback server, never caller input.
    url, accept = f"{base_url}/api/schema/", "application/vnd.oai.openapi+json"
    request = urllib.request.Request(url, headers={"Accept": accept})  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        document: dict[str, Any] = json.load(answer)
    return document


@schemathesis.check
def errors_have_the_error_shape(ctx: CheckContext, response: Response, case: Case[Any]) -> None:
    """A 4xx or 5xx is JSON ``{"error": {"code": str, "message": str, ...}}``."""
    if response.status_code < 400:
        return
    media_type = _media_type(response)
    assert media_type in JSON_TYPES, f"a {response.status_code} answered {media_type!r}"
    body = json.loads(response.content)
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"no error object in {body!r:.300}"
    assert isinstance(error.get("code"), str), error
    assert error["code"], error
    assert isinstance(error.get("message"), str), error
    assert error["message"], error


@schemathesis.check
def never_html(ctx: CheckContext, response: Response, case: Case[Any]) -> None:
    """No answer under /api/ is an HTML page (a debug page, a CSRF page, a login form),
    but for the docs page itself."""
    if case.operation.path == "/api/docs/" and response.status_code == 200:
        return
    media_type = _media_type(response)
    assert media_type != "text/html", f"a {response.status_code} answered an HTML page"
    assert not response.content.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))


def _media_type(response: Response) -> str:
    content_type = response.headers.get("content-type", [""])[0]
    return content_type.split(";")[0].strip().lower()


# Headers that frame the HTTP message itself: a made-up value is refused by the HTTP server
# (uvicorn's plain-text 400) before the application sees the request, so it says nothing of
# the API.
FRAMING_HEADERS = {"content-length", "transfer-encoding"}


@schema.parametrize()
def test_every_operation_answers_documented_json_and_no_5xx(
    case: Case[Any], keys: dict[str, str], answered: dict[str, set[int]]
) -> None:
    answered[case.operation.label].add(_call(case, keys))


@schema_generated_ids.parametrize()
def test_every_operation_with_generated_ids_answers_documented_json_and_no_5xx(
    case: Case[Any], keys: dict[str, str]
) -> None:
    _call(case, keys)


def _call(case: Case[Any], keys: dict[str, str]) -> int:
    """Send ``case`` with its operation's key, check the answer, return its status."""
    # Passed explicitly, so ``ignored_auth`` knows them for real: it repeats the request
    # without them and with made-up ones, and expects a 401.
    key = keys.get(case.operation.label)
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    for name in [name for name in case.headers or {} if name.lower() in FRAMING_HEADERS]:
        del case.headers[name]
    response = case.call(headers=headers)
    case.validate_response(response, headers=headers)
    return response.status_code

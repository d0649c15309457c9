"""Prometheus metrics (observability.metrics): ``/metrics`` is served only with its bearer
token, and a scrape of the web process after a real turn through a real worker process
finds every family with the figures of that turn (the processes share
``PROMETHEUS_MULTIPROC_DIR``, as ``make run``'s do)."""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from config import env
from observability import metrics_events
from observability.families import families
from tenancy.models import Tenant
from tests.factories import make_api_key
from tests.live import Live, live_platform, working_for
from threads.services.webhooks import endpoint_save

TOKEN = "metrics-scrape-token"
TIMEOUT_S = 30.0
UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
Samples = dict[str, list[tuple[dict[str, str], float]]]
# The sample names of a family (a counter's ``_total``, a histogram's series).
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")


def _samples(text: str) -> Samples:
    """Each sample name's (labels, value) pairs."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def _total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for found, value in samples.get(name, [])
        if all(found.get(key) == wanted for key, wanted in labels.items())
    )


# Access -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_is_not_found_while_no_token_is_set(settings: Settings) -> None:
    settings.METRICS = {**settings.METRICS, "token": ""}

    response = Client().get("/metrics", headers={"Authorization": "Bearer anything"})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer "])
def test_metrics_refuses_a_missing_or_wrong_token(settings: Settings, header: str | None) -> None:
    settings.METRICS = {**settings.METRICS, "token": TOKEN}
    headers = {"Authorization": header} if header is not None else {}

    response = Client().get("/metrics", headers=headers)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


@pytest.mark.django_db
def test_metrics_with_its_token_counts_requests_by_route_template(
    settings: Settings,
) -> None:
    settings.METRICS = {**settings.METRICS, "token": TOKEN}
    client = Client()
    assert client.get(f"/api/v1/threads/{uuid.uuid4()}").status_code == 401

    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = _samples(response.content.decode())
    route = "api/v1/threads/<pk>"  # the router's regular expression, as a template
    assert _total(samples, "agents_http_requests_total", route=route, status="401") >= 1
    assert _total(samples, "agents_http_request_duration_seconds_count", route=route) >= 1


# A real turn through a real worker -----------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """uvicorn and a Celery worker sharing a metrics directory, with a token."""
    shared = tmp_path / "metrics"
    shared.mkdir()
    with live_platform(
        tmp_path, {"METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    ) as started:
        yield started


def _define(tenant: Tenant) -> None:
    """Agent ``chat`` on a priced scripted model that first calls the code tool ``crunch``
    (it runs in the sandbox), then answers."""
    report = bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                        "input_price": "2", "output_price": "8",
                        "config": {"rules": [
                            {"when": {"last_role": "tool"}, "respond": {"text": "Crunched."}},
                            {"respond": {"tool_calls": [{"name": "crunch", "arguments": {}}]}},
                        ]}}],
            "code_tools": [{"name": "crunch", "description": "Crunches numbers",
                            "language": "javascript",
                            "args_schema": {"type": "object", "properties": {}},
                            "source": "export default () => 6 * 7;"}],
            "prompts": [{"name": "p", "tool_description": "The chat prompt",
                         "prompt": "You help.", "model": "m", "include_chat": True,
                         "tools": ["crunch"]}],
            "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip
    assert report.errors == [], report.errors


def _request(
    live: Live, method: str, path: str, *, token: str, body: Any = None
) -> tuple[int, bytes]:
    server = http.client.HTTPConnection("127.0.0.1", live.port, timeout=TIMEOUT_S + 10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        server.request(method, path, body=json.dumps(body) if body is not None else None,
                       headers=headers)  # fmt: skip
        response = server.getresponse()
        return response.status, response.read()
    finally:
        server.close()


def _scrape_until(live: Live, ready: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``ready(samples)`` holds (the worker records an event once it has sent
    it, just after the commit the turn's waiter saw)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        status, body = _request(live, "GET", "/metrics", token=TOKEN)
        assert status == 200, body
        samples = _samples(body.decode())
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_scrape_after_a_turn_through_a_worker_finds_every_family(
    live: Live, tenant: Tenant
) -> None:
    _define(tenant)
    endpoint_save(
        tenant=tenant,
        data={"url": "https://hooks.invalid/turns", "event_types": ["turn.completed"]},
    )
    key = make_api_key(tenant).secret
    with working_for(live, tenant):
        status, created = _request(live, "POST", "/api/v1/threads", token=key,
                                   body={"agent": "chat"})  # fmt: skip
        assert status == 201, created
        thread_id = json.loads(created)["id"]
        status, ended = _request(
            live, "POST", f"/api/v1/threads/{thread_id}/turns/wait?timeout={TIMEOUT_S}",
            token=key, body={"input": {"content": "crunch it"}},
        )  # fmt: skip
        assert status == 200, ended
        assert json.loads(ended)["turn"]["status"] == "completed", ended

        def ready(samples: Samples) -> bool:
            return (
                _total(samples, "agents_turns_finished_total") >= 1
                and _total(samples, "agents_webhook_deliveries_total") >= 1
            )

        samples = _scrape_until(live, ready)

    assert _total(samples, "agents_turns_started_total", resumed="false") >= 1
    assert _total(samples, "agents_turns_finished_total", outcome="completed") >= 1
    assert _total(samples, "agents_turn_queue_wait_seconds_count") >= 1
    assert _total(samples, "agents_turn_duration_seconds_count", outcome="completed") >= 1
    assert _total(samples, "agents_turn_duration_seconds_sum", outcome="completed") > 0
    model = {"provider": "scripted", "model": "scripted"}
    assert _total(samples, "agents_model_calls_total", outcome="completed", **model) >= 2
    assert _total(samples, "agents_model_call_duration_seconds_count", **model) >= 2
    assert _total(samples, "agents_model_tokens_total", kind="input", **model) > 0
    assert _total(samples, "agents_model_tokens_total", kind="output", **model) > 0
    assert _total(samples, "agents_model_cost_usd_total", **model) > 0
    assert _total(samples, "agents_tool_calls_total", outcome="success") >= 1
    assert _total(samples, "agents_sandbox_calls_total", status="success") >= 1
    assert _total(samples, "agents_sandbox_runners", state="busy") >= 0
    assert _total(samples, "agents_sandbox_runners", state="idle") >= 1
    assert _total(samples, "agents_turn_takeovers_total", kind="takeover") == 0
    assert _total(samples, "agents_turn_takeovers_total", kind="outage") == 0
    assert samples["agents_sweeper_recoveries_total"][0][1] >= 0
    assert _total(samples, "agents_webhook_deliveries_total") >= 1
    ((queue, depth),) = samples["agents_celery_queue_depth"]
    assert queue == {"queue": live.worker.queue}
    assert depth >= 0
    assert _total(samples, "agents_event_fanout_lag_seconds_count") > 0
    turn_route = "api/v1/threads/<uuid:thread_id>/turns/wait"
    assert _total(samples, "agents_http_requests_total", route=turn_route, method="POST",
                  status="200") == 1  # fmt: skip
    assert _total(samples, "agents_http_request_duration_seconds_count", route=turn_route) == 1
    labels = {value for pairs in samples.values() for found, _ in pairs for value in found.values()}
    assert [value for value in labels if UUID.search(value)] == []


def test_the_grafana_dashboard_queries_only_families_the_platform_exports() -> None:
    dashboard = json.loads((env.REPO_DIR / "platform/observability/grafana-dashboard.json")
                           .read_text())  # fmt: skip
    found = families()
    exported = {"agents_celery_queue_depth"}
    for field in dataclasses.fields(found):
        if field.name != "tenant":
            for metric in getattr(found, field.name).describe():
                exported |= {metric.name + suffix for suffix in SUFFIXES}
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"agents_\w+", target["expr"])
    }

    assert queried - exported == set()
    assert len(queried) >= 15  # every family has a panel


def test_model_labels_stop_growing_past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Model ids come from tenants' definitions: a tenant defining ever new ones must not grow
    # the series without bound.
    monkeypatch.setattr(metrics_events, "_models_seen", set())
    monkeypatch.setattr(metrics_events, "MAX_MODELS", 2)
    envelope = {"type": "cost.recorded", "tenant_id": str(uuid.uuid4())}
    labels = [
        metrics_events._model(envelope, {"provider": "openai", "model_id": name})["model"]
        for name in ("a", "b", "c", "a", "d")
    ]
    assert labels == ["a", "b", "other", "a", "other"]

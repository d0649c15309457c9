"""CORS (django-cors-headers): pages on the origins in ``CORS_ALLOWED_ORIGINS`` may call
``/api/``: preflights are answered, the platform's own headers allowed and exposed; any
other origin gets no CORS headers, and nothing outside ``/api/`` gets them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from config import env
from tenancy.models import Role, Tenant
from tests.factories import make_thread

pytestmark = pytest.mark.django_db

APP = "https://app.example.com"


@pytest.fixture(autouse=True)
def _allowed(settings: Settings) -> None:
    settings.CORS_ALLOWED_ORIGINS = [APP]


def test_a_preflight_from_an_allowed_origin_allows_the_platforms_headers(
    client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    thread = make_thread(tenant)

    response = client_for(tenant, Role.MEMBER).options(
        f"/api/v1/threads/{thread.id}/turns",
        headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, idempotency-key, content-type"},
    )  # fmt: skip

    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == APP
    allowed = response["Access-Control-Allow-Headers"].lower()
    assert {"authorization", "idempotency-key", "content-type"} <= set(allowed.split(", "))
    assert "POST" in response["Access-Control-Allow-Methods"]


def test_an_allowed_origin_reads_the_answer_and_the_platforms_response_headers(
    client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    response = client_for(tenant, Role.READ_ONLY).get("/api/v1/me", headers={"Origin": APP})

    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == APP
    assert "Idempotent-Replayed" in response["Access-Control-Expose-Headers"]


def test_errors_carry_the_cors_headers_too(client_for: Callable[..., APIClient]) -> None:
    response = APIClient().get("/api/v1/me", headers={"Origin": APP})

    assert response.status_code == 401
    assert response["Access-Control-Allow-Origin"] == APP


def test_another_origin_and_pages_outside_the_api_get_no_cors_headers(
    client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    api = client_for(tenant, Role.READ_ONLY)

    elsewhere = api.get("/api/v1/me", headers={"Origin": "https://evil.example.com"})
    page = api.get("/healthz", headers={"Origin": APP})

    assert "Access-Control-Allow-Origin" not in elsewhere
    assert "Access-Control-Allow-Origin" not in page


def test_the_allowed_origins_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORS_ALLOWED_ORIGINS", f"{APP}, http://localhost:5173")
    assert env.cors_allowed_origins() == [APP, "http://localhost:5173"]
    monkeypatch.delenv("CORS_ALLOWED_ORIGINS")
    assert env.cors_allowed_origins() == []

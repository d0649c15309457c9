"""Every answer under /api/ is JSON, the schema and docs views' too: their own page (YAML or
JSON, Swagger UI's HTML) answers a GET; an error (a 405, a 406) or an OPTIONS is JSON with
the error shape."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

VIEWS = ["/api/docs/", "/api/schema/"]


def _json_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]


@pytest.mark.parametrize("path", VIEWS)
@pytest.mark.parametrize("method", ["delete", "put", "patch", "post", "trace"])
def test_an_undocumented_method_on_the_schema_and_docs_is_a_json_405(
    client: Client, path: str, method: str
) -> None:
    response = getattr(client, method)(path)

    _json_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET, HEAD, OPTIONS"


@pytest.mark.parametrize("path", VIEWS)
def test_options_on_the_schema_and_docs_answers_json(client: Client, path: str) -> None:
    response = client.options(path)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["allowed_methods"] == ["GET", "HEAD", "OPTIONS"]


def test_the_schema_in_a_format_it_cannot_give_is_a_json_406(client: Client) -> None:
    _json_error(client.get("/api/schema/", HTTP_ACCEPT="text/csv"), 406, "not_acceptable")


def test_the_docs_page_and_the_schema_still_answer_their_own_formats(client: Client) -> None:
    page = client.get("/api/docs/")
    schema = client.get("/api/schema/")
    as_json = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert schema.status_code == 200
    assert schema["Content-Type"].startswith("application/vnd.oai.openapi")
    assert schema.content.startswith(b"openapi: 3.1.0")
    assert as_json.status_code == 200
    assert as_json.json()["openapi"] == "3.1.0"

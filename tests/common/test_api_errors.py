from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from typing import Any

import django.db
import kombu.exceptions
import pytest
import redis
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django.test import RequestFactory
from rest_framework import exceptions, serializers
from rest_framework.test import APIClient

from common import errors
from common.api import exception_handler, json_not_found, json_server_error
from tenancy.models import Tenant

BEARER_CHALLENGE = 'Bearer realm="api"'


# Domain errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_class", "status", "code"),
    [
        (errors.ValidationFailed, 400, "invalid"),
        (errors.AuthenticationFailed, 401, "unauthenticated"),
        (errors.PermissionDenied, 403, "forbidden"),
        (errors.NotFound, 404, "not_found"),
        (errors.Conflict, 409, "conflict"),
        (errors.LimitExceeded, 413, "limit_exceeded"),
        (errors.NotAvailable, 501, "not_available"),
        (errors.DecryptionFailed, 500, "decryption_failed"),
    ],
)
def test_domain_error_maps_to_its_status_and_code(
    error_class: type[errors.DomainError], status: int, code: str
) -> None:
    response = exception_handler(error_class("something is off"), {})

    assert response.status_code == status
    assert response.data == {"error": {"code": code, "message": "something is off"}}


def test_domain_error_with_a_field_names_it() -> None:
    response = exception_handler(
        errors.ValidationFailed("name must not be empty", field="name"), {}
    )

    assert response.status_code == 400
    assert response.data == {
        "error": {"code": "invalid", "message": "name must not be empty", "field": "name"}
    }


def test_domain_error_code_can_be_overridden_per_instance() -> None:
    response = exception_handler(errors.Conflict("thread ended", code="thread_terminated"), {})

    assert response.status_code == 409
    assert response.data == {"error": {"code": "thread_terminated", "message": "thread ended"}}
    assert errors.Conflict.code == "conflict"


def test_unauthenticated_domain_error_carries_a_bearer_challenge() -> None:
    response = exception_handler(errors.AuthenticationFailed("API key revoked"), {})

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == BEARER_CHALLENGE


def test_other_domain_errors_carry_no_challenge() -> None:
    response = exception_handler(errors.PermissionDenied("admins only"), {})

    assert response.status_code == 403
    assert "WWW-Authenticate" not in response


# DRF validation errors ---------------------------------------------------------------


def test_nested_validation_error_names_the_field_path() -> None:
    exc = exceptions.ValidationError({"tools": [{"name": ["bad"]}]})

    response = exception_handler(exc, {})

    assert response.status_code == 400
    error = response.data["error"]
    assert error["code"] == "invalid"
    assert error["field"] == "tools[0].name"
    assert error["message"] == "tools[0].name: bad"
    assert error["details"] == {"tools": [{"name": ["bad"]}]}


class _ToolInput(serializers.Serializer[object]):
    name = serializers.CharField(max_length=8)


class _AgentInput(serializers.Serializer[object]):
    tools = _ToolInput(many=True)
    tags = serializers.ListField(child=serializers.IntegerField(), required=False)


def _validation_error_of(data: dict[str, object]) -> exceptions.ValidationError:
    payload = _AgentInput(data=data)
    with pytest.raises(exceptions.ValidationError) as caught:
        payload.is_valid(raise_exception=True)
    return caught.value


def test_error_in_a_later_item_of_a_nested_list_names_its_index() -> None:
    exc = _validation_error_of(
        {"tools": [{"name": "ok"}, {"name": "ok"}, {"name": "far too long"}]}
    )

    response = exception_handler(exc, {})

    assert response.status_code == 400
    error = response.data["error"]
    assert error["code"] == "invalid"
    assert error["field"] == "tools[2].name"
    assert error["message"] == "tools[2].name: Ensure this field has no more than 8 characters."


def test_error_in_a_list_field_item_names_its_index() -> None:
    exc = _validation_error_of({"tools": [], "tags": [1, "two"]})

    response = exception_handler(exc, {})

    assert response.data["error"]["field"] == "tags[1]"
    assert response.data["error"]["message"] == "tags[1]: A valid integer is required."


def test_list_error_format_skips_items_without_errors() -> None:
    # DRF's older list-based format marks the valid items with empty dicts.
    exc = exceptions.ValidationError({"tools": [{}, {}, {"args": {"limit": ["too big"]}}]})

    response = exception_handler(exc, {})

    assert response.data["error"]["field"] == "tools[2].args.limit"
    assert response.data["error"]["message"] == "tools[2].args.limit: too big"


def test_flat_field_validation_error_names_the_field() -> None:
    response = exception_handler(
        exceptions.ValidationError({"name": ["This field is required."]}), {}
    )

    assert response.data["error"]["field"] == "name"
    assert response.data["error"]["message"] == "name: This field is required."


def test_non_field_validation_error_has_no_field() -> None:
    response = exception_handler(
        exceptions.ValidationError({"non_field_errors": ["start must precede end"]}), {}
    )

    assert response.status_code == 400
    assert response.data["error"]["code"] == "invalid"
    assert response.data["error"]["message"] == "start must precede end"
    assert "field" not in response.data["error"]


def test_plain_validation_error_has_no_field() -> None:
    response = exception_handler(exceptions.ValidationError("bad input"), {})

    assert response.status_code == 400
    assert response.data["error"]["message"] == "bad input"
    assert "field" not in response.data["error"]


# Other DRF and Django errors ---------------------------------------------------------


def test_drf_not_authenticated_is_renamed_and_challenges() -> None:
    response = exception_handler(exceptions.NotAuthenticated(), {})

    assert response.status_code == 401
    assert response.data["error"]["code"] == "unauthenticated"
    assert response["WWW-Authenticate"] == BEARER_CHALLENGE


def test_drf_authentication_failed_is_renamed_and_challenges() -> None:
    response = exception_handler(exceptions.AuthenticationFailed("bad key"), {})

    assert response.status_code == 401
    assert response.data == {"error": {"code": "unauthenticated", "message": "bad key"}}
    assert response["WWW-Authenticate"] == BEARER_CHALLENGE


def test_drf_permission_denied_is_renamed_forbidden() -> None:
    response = exception_handler(exceptions.PermissionDenied(), {})

    assert response.status_code == 403
    assert response.data["error"]["code"] == "forbidden"
    assert "WWW-Authenticate" not in response


def test_drf_parse_error_is_renamed_malformed_body() -> None:
    response = exception_handler(exceptions.ParseError("JSON parse error"), {})

    assert response.status_code == 400
    assert response.data == {"error": {"code": "malformed_body", "message": "JSON parse error"}}


def test_throttled_request_says_when_to_retry() -> None:
    response = exception_handler(exceptions.Throttled(wait=7.4), {})

    assert response.status_code == 429
    assert response.data["error"]["code"] == "throttled"
    assert response["Retry-After"] == "8"  # DRF rounds the wait up


def test_other_drf_codes_pass_through() -> None:
    response = exception_handler(exceptions.MethodNotAllowed("DELETE"), {})

    assert response.status_code == 405
    assert response.data == {
        "error": {"code": "method_not_allowed", "message": 'Method "DELETE" not allowed.'}
    }


def test_django_http404_becomes_not_found() -> None:
    response = exception_handler(Http404("No Agent matches the given query."), {})

    assert response.status_code == 404
    assert response.data["error"]["code"] == "not_found"


def test_django_permission_denied_becomes_forbidden() -> None:
    response = exception_handler(DjangoPermissionDenied(), {})

    assert response.status_code == 403
    assert response.data["error"]["code"] == "forbidden"


def test_unexpected_exception_is_a_500_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        raise RuntimeError("db password is hunter2")
    except RuntimeError as error:
        with caplog.at_level(logging.ERROR, logger="common.api"):
            response = exception_handler(error, {"view": "SomeView"})

    assert response.status_code == 500
    assert response.data == {
        "error": {
            "code": "internal_error",
            "message": "The server failed to handle this request.",
        }
    }
    body = json.dumps(response.data)
    assert "Traceback" not in body
    assert "hunter2" not in body
    assert "RuntimeError" not in body
    # The details go to the log instead.
    assert any(record.exc_info is not None for record in caplog.records)
    assert "hunter2" in caplog.text


# Error pages ----------------------------------------------------------------------


def test_json_not_found_answers_json_404() -> None:
    request = RequestFactory().get("/api/v1/nothing-here")

    response = json_not_found(request, Http404())

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {
        "error": {"code": "not_found", "message": "No route for /api/v1/nothing-here"}
    }


def test_json_server_error_answers_json_500() -> None:
    response = json_server_error(RequestFactory().get("/"))

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["error"]["code"] == "internal_error"


# Over HTTP ------------------------------------------------------------------------


def test_unknown_api_url_answers_json_404(api_client: APIClient) -> None:
    response = api_client.get("/api/v1/does-not-exist")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": {"code": "not_found", "message": "No route for /api/v1/does-not-exist"}
    }


def test_malformed_json_body_is_a_400_malformed_body(
    client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    client = client_for(tenant)

    response = client.post(
        "/api/v1/api-keys", data='{"name": "ci", ', content_type="application/json"
    )

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "malformed_body"
    assert error["message"].startswith("JSON parse error")


def test_invalid_api_key_payload_is_a_400_naming_the_field(
    client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    client = client_for(tenant)

    response = client.post("/api/v1/api-keys", data={"role": "admin"}, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["field"] == "name"
    assert error["message"].startswith("name: ")


def test_request_without_credentials_is_a_401_with_a_bearer_challenge(
    api_client: APIClient, db: None
) -> None:
    response = api_client.get("/api/v1/api-keys")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == BEARER_CHALLENGE
    assert response.json()["error"]["code"] == "unauthenticated"


@pytest.mark.django_db
def test_body_over_djangos_memory_limit_is_413_naming_it(tenant, client_for, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = client_for(tenant).post(
        "/api/v1/bundles", b"#" * 2000, content_type="application/yaml"
    )

    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "limit_exceeded",
        "message": "request body exceeds 1000 bytes",
    }


# Outages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "service"),
    [
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379"), "Redis"),
        (redis.TimeoutError("Timeout reading from socket"), "Redis"),
        (kombu.exceptions.OperationalError("Error 111 connecting"), "Redis"),
        (django.db.OperationalError("server closed the connection unexpectedly"), "PostgreSQL"),
        (django.db.InterfaceError("connection already closed"), "PostgreSQL"),
    ],
)
def test_an_unreachable_service_is_a_503_with_retry_after_naming_it(
    error: Exception, service: str
) -> None:
    response = exception_handler(error, {})

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.data["error"]["code"] == "unavailable"
    assert response.data["error"]["message"].startswith(f"{service} is unreachable")


def test_a_request_meeting_a_redis_outage_answers_503_not_500(
    tenant: Tenant, client_for: Callable[..., APIClient], settings: Any
) -> None:
    client = client_for(tenant)
    with socket.socket() as probe:  # a port nothing listens on: Redis is "down"
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    settings.CACHES = {"default": {**settings.CACHES["default"],
                                   "LOCATION": f"redis://127.0.0.1:{dead}/0"}}  # fmt: skip

    response = client.post("/api/v1/ws-tickets")

    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["message"].startswith("Redis is unreachable")

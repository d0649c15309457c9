"""The client's setup and access calls against a live server: settings from the
environment, the caller, WebSocket tickets, API keys, and errors raised as their types."""

from __future__ import annotations

import datetime as dt

import pytest
from standard_agents_client import (
    ApiConnectionError,
    ApiError,
    AsyncClient,
    AuthenticationError,
    Client,
    ConfigurationError,
    NotFound,
    PermissionDenied,
    ValidationError,
    datetime_from_us,
    us_from_datetime,
)

from tests.client.conftest import LiveApi


def test_the_client_reads_its_settings_from_the_environment(
    live_api: LiveApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_API_URL", live_api.base_url + "/api/v1/")
    monkeypatch.setenv("AGENTS_API_KEY", live_api.api_key)

    with Client() as client:
        me = client.me()

    assert client.base_url == live_api.base_url
    assert (me["tenant"]["slug"], me["role"], me["kind"]) == (
        live_api.tenant_slug,
        "admin",
        "api_key",
    )
    monkeypatch.delenv("AGENTS_API_KEY")
    with pytest.raises(ConfigurationError, match="AGENTS_API_KEY"):
        Client()


def test_api_keys_are_created_listed_and_revoked(live_api: LiveApi, client: Client) -> None:
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    made = client.api_keys.create("reader", role="read_only", expires_at=expires)

    with Client(live_api.base_url, made["key"]) as reader:
        assert reader.me()["role"] == "read_only"
        with pytest.raises(PermissionDenied) as denied:
            reader.threads.create("chat")
        assert denied.value.status == 403
        revoked = client.api_keys.revoke(made["id"])
        with pytest.raises(AuthenticationError) as refused:
            reader.me()

    assert made["key"].startswith(made["prefix"])
    assert made["expires_at"] is not None
    assert abs(made["expires_at"] - us_from_datetime(expires)) < 1_000_000
    assert revoked["revoked"] is True
    assert refused.value.code == "revoked_api_key"
    assert client.api_keys.get(made["id"])["revoked_at"] is not None
    listed = [key["name"] for key in client.api_keys.iter(limit=1)]
    assert sorted(listed) == ["client tests", "reader"]


def test_a_ws_ticket_is_issued(client: Client) -> None:
    ticket = client.ws_ticket()

    assert ticket["ticket"]
    assert ticket["expires_in"] == 30


def test_errors_carry_status_code_message_and_field(client: Client) -> None:
    with pytest.raises(ValidationError) as invalid:
        client.api_keys.create("")
    with pytest.raises(NotFound) as missing:
        client.models.get("nothing_here")

    assert (invalid.value.status, invalid.value.code, invalid.value.field) == (
        400,
        "invalid",
        "name",
    )
    assert "name" in str(invalid.value)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert isinstance(missing.value, ApiError)


def test_a_wrong_key_and_an_unreachable_server_are_typed(live_api: LiveApi) -> None:
    with Client(live_api.base_url, "sap_wrong") as wrong, pytest.raises(AuthenticationError) as bad:
        wrong.me()
    with Client("http://127.0.0.1:9", "sap_x") as nowhere, pytest.raises(ApiConnectionError):
        nowhere.me()

    assert bad.value.status == 401


def test_timestamps_turn_into_datetimes_and_back() -> None:
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)

    assert us_from_datetime(moment) == 1_767_323_045_678_901
    assert datetime_from_us(1_767_323_045_678_901) == moment
    assert us_from_datetime(moment.replace(tzinfo=None)) == 1_767_323_045_678_901


@pytest.mark.asyncio
async def test_the_async_client_reads_the_caller_and_keys(
    aclient: AsyncClient, live_api: LiveApi
) -> None:
    me = await aclient.me()
    made = await aclient.api_keys.create("async")
    keys = [key["id"] async for key in aclient.api_keys.iter()]

    assert me["tenant"]["slug"] == live_api.tenant_slug
    assert made["id"] in keys
    assert (await aclient.ws_ticket())["expires_in"] == 30
    with pytest.raises(NotFound):
        await aclient.api_keys.get("01a2b3c4-0000-7000-8000-000000000000")

"""The middleware chain under ASGI (common.middleware): hooks on the event loop, the same
behaviour as Django's."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth.models import User
from django.test import AsyncClient

from tenancy.models import Role, Tenant
from tests.factories import make_api_key

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sync functions run through ``sync_to_async`` (a thread hand-off each)."""
    seen: list[str] = []
    original = SyncToAsync.__call__

    async def counting(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)
    return seen


@pytest.fixture
def key(tenant: Tenant) -> str:
    return make_api_key(tenant, role=Role.MEMBER).secret


async def test_an_api_request_hops_to_a_thread_only_for_its_view(key: str, hops: list[str]) -> None:
    response = await AsyncClient().get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    # The request-started signal, the view, rendering DRF's response and closing it
    # (request-finished): no middleware hook. Django's own middleware would add two hops
    # each (16 in all), WhiteNoise's sync call one more for the rest of the chain.
    assert len(hops) <= 4, hops
    assert not [hop for hop in hops if "process_" in hop or "middleware" in hop.lower()], hops


async def test_a_refused_url_is_answered_on_the_event_loop(hops: list[str]) -> None:
    response = await AsyncClient().get("/api/v1/me?x=%00")
    assert response.status_code == 400
    assert "NUL" in response.json()["error"]["message"]
    assert not [hop for hop in hops if "process_" in hop], hops


async def test_a_browser_login_keeps_its_session_and_csrf_still_guards_forms() -> None:
    await User.objects.acreate_user("operator", password="s3cret-pass", is_staff=True)
    client = AsyncClient(enforce_csrf_checks=True)
    form = await client.get("/admin/login/")
    assert form.status_code == 200
    token = form.cookies["csrftoken"].value

    refused = await client.post(
        "/admin/login/", {"username": "operator", "password": "s3cret-pass"}
    )
    assert refused.status_code == 403  # no token: the hook ran (on a thread: a form POST)

    logged_in = await client.post(
        "/admin/login/",
        {"username": "operator", "password": "s3cret-pass", "csrfmiddlewaretoken": token},
    )
    assert logged_in.status_code == 302
    assert "sessionid" in logged_in.cookies  # the session the view wrote was saved
    assert (await client.get("/admin/")).status_code == 200  # ... and is read back


async def test_static_files_are_served_and_everything_else_passes_through() -> None:
    client = AsyncClient()
    served = await client.get("/static/admin/css/base.css")
    assert served.status_code == 200
    assert served["Content-Type"].startswith("text/css")
    assert b"".join(served.streaming_content).strip()  # type: ignore[attr-defined]
    missing = await client.get("/static/admin/css/no-such-file.css")
    assert missing.status_code == 404

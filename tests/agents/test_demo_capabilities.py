"""The demo shows every registry capability through the API, on the scripted demo model: a
thread endpoint (``summary``), a tool that schedules an effect (``set_reminder`` schedules
``remind``) and a tool that emits a custom event (``announce``)."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.factories import make_tenant
from threads.models import EffectStatus, Event, Message, ScheduledEffect
from threads.runtime.driver import thread_drive
from threads.runtime.effects import effect_fire
from threads.runtime.engine import Runtime

pytestmark = pytest.mark.django_db

MINUTE_US = 60 * 1_000_000


@pytest.fixture
def demo(settings: Settings) -> Tenant:
    """The demo tenant seeded as `make run` seeds it without a provider key."""
    tenant = make_tenant("demo")
    settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = {}
    call_command("seed_demo_agents", stdout=StringIO())
    return tenant


@pytest.fixture
def member(demo: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(demo, Role.MEMBER)


def _chat(member: APIClient, content: str) -> str:
    """A thread of the demo assistant with one turn run to its end; its id."""
    opened = member.post("/api/v1/threads", {"agent": "assistant"}, format="json")
    assert opened.status_code == 201, opened.json()
    thread_id: str = opened.json()["id"]
    turn = member.post(
        f"/api/v1/threads/{thread_id}/turns", {"input": {"content": content}}, format="json"
    )
    assert turn.status_code == 202, turn.json()
    thread_drive(thread_id=thread_id, runtime=Runtime(retry_base_delay_s=0))
    return thread_id


def _answer(thread_id: str) -> str | None:
    last = Message.objects.filter(thread_id=thread_id, role="assistant").order_by("-seq").first()
    assert last is not None
    return last.content


def _summary(member: APIClient, thread_id: str) -> dict[str, Any]:
    response = member.get(f"/api/v1/threads/{thread_id}/endpoints/summary")
    assert response.status_code == 200, response.json()
    body: dict[str, Any] = response.json()
    return body


def test_the_summary_endpoint_counts_the_messages_and_dates_the_newest(
    member: APIClient,
) -> None:
    thread_id = _chat(member, "What time is it?")
    newest = Message.objects.filter(thread_id=thread_id).order_by("-seq").first()
    assert newest is not None

    summary = _summary(member, thread_id)

    assert summary == {
        "messages": 4,  # the question, the call, its result, the answer
        "last_message_at": newest.created_at,
        "pending_reminders": 0,
    }


def test_the_summary_of_a_new_thread_has_no_messages(member: APIClient) -> None:
    opened = member.post("/api/v1/threads", {"agent": "assistant"}, format="json").json()

    summary = _summary(member, opened["id"])

    assert summary == {"messages": 0, "last_message_at": None, "pending_reminders": 0}


def test_the_summary_endpoint_needs_a_key_and_the_callers_own_thread(
    member: APIClient, client_for: Callable[..., APIClient]
) -> None:
    thread_id = member.post("/api/v1/threads", {"agent": "assistant"}, format="json").json()["id"]
    stranger = client_for(make_tenant("globex"), Role.ADMIN)

    anonymous = APIClient().get(f"/api/v1/threads/{thread_id}/endpoints/summary")
    elsewhere = stranger.get(f"/api/v1/threads/{thread_id}/endpoints/summary")
    written = member.post(f"/api/v1/threads/{thread_id}/endpoints/summary")

    assert anonymous.status_code == 401
    assert elsewhere.status_code == 404
    assert written.status_code == 405


def test_remind_me_schedules_the_remind_effect_a_minute_ahead_and_it_posts_the_reminder(
    member: APIClient,
) -> None:
    thread_id = _chat(member, "Remind me to stretch")

    reminder = ScheduledEffect.objects.get(thread_id=thread_id)
    delay_us = reminder.scheduled_at - reminder.created_at
    pending = _summary(member, thread_id)["pending_reminders"]
    ran = member.post(f"/api/v1/threads/{thread_id}/effects/{reminder.pk}/run")  # due now
    effect_fire(reminder.pk)  # what the worker does once it is due
    reminder.refresh_from_db()

    assert (reminder.name, reminder.args) == ("remind", {"text": "Remind me to stretch"})
    assert delay_us == MINUTE_US
    assert pending == 1
    assert ran.status_code == 200, ran.json()
    assert reminder.status == EffectStatus.COMPLETED
    assert _answer(thread_id) == "Reminder: Remind me to stretch"
    assert _summary(member, thread_id)["pending_reminders"] == 0


def test_the_scripted_model_reports_the_reminder_it_set(member: APIClient) -> None:
    thread_id = _chat(member, "Remind me to stretch")

    assert _answer(thread_id) == (
        "Done: reminder set for 1 minute from now: Remind me to stretch. (scripted demo model)"
    )


def test_announce_emits_a_custom_announcement_event(member: APIClient) -> None:
    thread_id = _chat(member, "Announce that the office closes at five")

    (event,) = Event.objects.filter(thread_id=thread_id, type="custom")

    assert event.payload == {
        "name": "announcement",
        "data": {"message": "Announce that the office closes at five"},
    }
    assert event.turn_id  # written by the turn that called the tool
    assert _answer(thread_id) == (
        "Done: announced: Announce that the office closes at five. (scripted demo model)"
    )
    assert not Message.objects.filter(thread_id=thread_id, content__contains="announcement")

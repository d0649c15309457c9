"""Thread pages in the admin: readable times, latest rows inline, search by message content,
stop and terminate through the control services, and tenant staff kept to their tenant."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from tenancy.admin import format_us
from tenancy.models import Role, Tenant
from tests.factories import make_member, make_thread
from threads.admin import ThreadAdmin
from threads.models import Event, Message, Thread, Turn
from threads.services.env import thread_env_set
from threads.services.inbox import message_queue
from threads.services.messages import message_inject

pytestmark = pytest.mark.django_db

ENV_SECRET = "env-secret-value-for-admin-test-7f3a"


@pytest.fixture
def root(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    return client


def staff(client: Client, tenant: Tenant, role: Role) -> Client:
    client.force_login(make_member(tenant, role=role, is_staff=True))
    return client


def running(thread: Thread) -> tuple[Turn, Turn]:
    """A turn left running (its worker gone) and one waiting behind it."""
    first = message_queue(thread=thread, role="user", content="work")
    second = message_queue(thread=thread, role="user", content="then this")
    Turn.objects.filter(pk=first.pk).update(status="running", fence=1)
    Thread.objects.filter(pk=thread.pk).update(status="running", fence=1)
    return first, second


def messages_of(response: object) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]  # type: ignore[attr-defined]


# Times -----------------------------------------------------------------------------------------


def test_microsecond_times_read_as_utc_datetimes() -> None:
    assert format_us(1_700_000_000_123_456) == "2023-11-14 22:13:20.123 UTC"
    assert format_us(None) is None


def test_thread_list_shows_and_sorts_by_readable_times(root: Client, tenant: Tenant) -> None:
    older = make_thread(tenant, created_at=1_700_000_000_000_000)
    newer = make_thread(tenant, created_at=1_800_000_000_000_000)
    column = ThreadAdmin.list_display.index("created_at") + 1  # after the action checkbox

    ascending = root.get(f"/admin/threads/thread/?o={column}")
    descending = root.get(f"/admin/threads/thread/?o=-{column}")

    assert ascending.status_code == 200
    assert "2023-11-14 22:13:20.000 UTC" in ascending.content.decode()
    assert "2027-01-15 08:00:00.000 UTC" in ascending.content.decode()
    assert list(ascending.context["cl"].result_list) == [older, newer]
    assert list(descending.context["cl"].result_list) == [newer, older]


def test_thread_page_and_its_inlines_show_readable_times(root: Client, thread: Thread) -> None:
    Thread.objects.filter(pk=thread.pk).update(created_at=1_700_000_000_000_000)
    message = message_inject(thread=thread, role="user", content="hello")
    Message.objects.filter(pk=message.pk).update(created_at=1_750_000_000_000_000)

    text = root.get(f"/admin/threads/thread/{thread.pk}/change/").content.decode()

    assert "2023-11-14 22:13:20.000 UTC" in text
    assert "2025-06-15 15:06:40.000 UTC" in text
    assert "1700000000000000" not in text
    assert "1750000000000000" not in text


# The thread page -------------------------------------------------------------------------------


def test_thread_page_shows_the_latest_messages_and_events_and_links_to_all(
    root: Client, thread: Thread
) -> None:
    for n in range(60):
        message_inject(thread=thread, role="user", content=f"note number {n:02d}")

    page = root.get(f"/admin/threads/thread/{thread.pk}/change/")

    text = page.content.decode()
    assert page.status_code == 200
    assert "note number 59" in text
    assert "note number 10" in text
    assert "note number 09" not in text
    assert f'/admin/threads/message/?thread={thread.pk}">all 60 messages</a>' in text
    events = Event.objects.filter(thread=thread).count()
    assert f'/admin/threads/event/?thread={thread.pk}">all {events} events</a>' in text
    assert "message.created" in text
    full = root.get(f"/admin/threads/message/?thread={thread.pk}")
    assert full.status_code == 200
    assert full.context["cl"].result_count == 60


def test_thread_page_never_shows_an_env_secret(root: Client, thread: Thread) -> None:
    thread_env_set(thread=thread, name="API_TOKEN", value=ENV_SECRET)

    pages = [
        root.get(f"/admin/threads/thread/{thread.pk}/change/"),
        root.get("/admin/threads/threadenv/"),
    ]

    for page in pages:
        assert page.status_code == 200
        assert ENV_SECRET.encode() not in page.content
    assert b"API_TOKEN" in pages[1].content


def test_search_finds_a_thread_by_its_messages_content(root: Client, tenant: Tenant) -> None:
    talked = make_thread(tenant)
    quiet = make_thread(tenant)
    message_inject(thread=talked, role="user", content="Where is the Purple Elephant today?")
    message_inject(thread=quiet, role="user", content="Nothing to see.")

    found = root.get("/admin/threads/thread/?q=purple+elephant")

    assert found.status_code == 200
    assert list(found.context["cl"].result_list) == [talked]


def test_thread_list_filters_by_status(root: Client, tenant: Tenant) -> None:
    done = make_thread(tenant, status="completed")
    make_thread(tenant, status="failed")

    response = root.get("/admin/threads/thread/?status__exact=completed")

    assert list(response.context["cl"].result_list) == [done]


# Stop and terminate ----------------------------------------------------------------------------


def test_stop_action_ends_the_running_turn_and_parks_the_waiting_one(
    root: Client, thread: Thread
) -> None:
    first, second = running(thread)
    events_before = Event.objects.filter(thread=thread).count()

    response = root.post(
        "/admin/threads/thread/",
        {"action": "stop_threads", "_selected_action": [str(thread.pk)]},
    )

    assert response.status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    thread.refresh_from_db()
    assert (first.status, first.outcome) == ("cancelled", "aborted_by_user")
    assert second.status == "queued"
    assert (thread.status, thread.stop_requested) == ("cancelled", True)
    written = list(
        Event.objects.filter(thread=thread, sequence__gt=events_before).values_list(
            "type", flat=True
        )
    )
    assert "message.created" in written
    assert any(kind.startswith("turn.") for kind in written)
    assert messages_of(response) == [
        f"Thread {thread.pk}: stopped its running turn, parked 1 waiting turn(s)."
    ]


def test_terminate_button_terminates_through_the_service(root: Client, thread: Thread) -> None:
    first, second = running(thread)

    page = root.get(f"/admin/threads/thread/{thread.pk}/change/")
    response = root.post(f"/admin/threads/thread/{thread.pk}/terminate/")

    assert f'action="/admin/threads/thread/{thread.pk}/terminate/"' in page.content.decode()
    assert f'action="/admin/threads/thread/{thread.pk}/stop/"' in page.content.decode()
    assert response.status_code == 302
    assert response["Location"] == f"/admin/threads/thread/{thread.pk}/change/"
    thread.refresh_from_db()
    first.refresh_from_db()
    second.refresh_from_db()
    assert thread.terminated_at is not None
    assert thread.status == "cancelled"
    assert (first.status, second.status) == ("cancelled", "cancelled")
    assert Event.objects.filter(thread=thread, type="thread.terminated").count() == 1
    assert messages_of(response) == [f"Thread {thread.pk}: terminated."]


def test_stopping_a_terminated_thread_reports_the_refusal(root: Client, thread: Thread) -> None:
    root.post(f"/admin/threads/thread/{thread.pk}/terminate/")

    response = root.post(f"/admin/threads/thread/{thread.pk}/stop/")

    shown = messages_of(response)
    assert len(shown) == 2
    assert shown[1].startswith(f"Thread {thread.pk}: ")
    assert "terminated" in shown[1]


def test_control_views_refuse_get(root: Client, thread: Thread) -> None:
    assert root.get(f"/admin/threads/thread/{thread.pk}/stop/").status_code == 405


def test_thread_delete_goes_through_the_service(root: Client, thread: Thread) -> None:
    child = make_thread(thread.tenant, parent=thread)
    message_inject(thread=thread, role="user", content="hello")
    message_inject(thread=child, role="user", content="hello")

    confirm = root.get(f"/admin/threads/thread/{thread.pk}/delete/")
    response = root.post(f"/admin/threads/thread/{thread.pk}/delete/", {"post": "yes"})

    assert confirm.status_code == 200
    assert confirm.context["perms_lacking"] == set()
    assert list(confirm.context["model_count"]) == [
        ("threads", 1), ("turns", 0), ("messages", 1), ("events", 1), ("logs", 0),
        ("thread files", 0),
    ]  # fmt: skip
    assert response.status_code == 302
    assert not Thread.objects.filter(pk__in=[thread.pk, child.pk]).exists()
    assert not Message.objects.filter(tenant=thread.tenant).exists()


# Tenant staff ----------------------------------------------------------------------------------


def test_tenant_staff_cannot_see_or_control_another_tenants_thread(
    client: Client, tenant: Tenant, thread: Thread, other_thread: Thread
) -> None:
    staff(client, tenant, Role.MEMBER)
    first, _ = running(other_thread)

    listing = client.get("/admin/threads/thread/")
    page = client.get(f"/admin/threads/thread/{other_thread.pk}/change/")
    stop = client.post(f"/admin/threads/thread/{other_thread.pk}/stop/")
    client.post(
        "/admin/threads/thread/",
        {"action": "stop_threads", "_selected_action": [str(other_thread.pk)]},
    )
    message = client.get(f"/admin/threads/message/?thread={other_thread.pk}")

    assert list(listing.context["cl"].result_list) == [thread]
    assert "globex" not in listing.content.decode()  # not even as a filter choice
    assert page.status_code == 302
    assert page["Location"] == "/admin/"
    assert stop.status_code == 404
    first.refresh_from_db()
    other_thread.refresh_from_db()
    assert first.status == "running"
    assert other_thread.stop_requested is False
    assert message.context["cl"].result_count == 0
    assert client.get(f"/admin/threads/thread/{thread.pk}/change/").status_code == 200


def test_a_member_stops_their_own_tenants_thread(
    client: Client, tenant: Tenant, thread: Thread
) -> None:
    staff(client, tenant, Role.MEMBER)
    first, _ = running(thread)

    response = client.post(f"/admin/threads/thread/{thread.pk}/stop/")

    assert response.status_code == 302
    first.refresh_from_db()
    assert first.status == "cancelled"


def test_a_read_only_member_views_threads_but_cannot_control_them(
    client: Client, tenant: Tenant, thread: Thread
) -> None:
    staff(client, tenant, Role.READ_ONLY)
    first, _ = running(thread)

    listing = client.get("/admin/threads/thread/")
    page = client.get(f"/admin/threads/thread/{thread.pk}/change/")
    stop = client.post(f"/admin/threads/thread/{thread.pk}/stop/")
    delete = client.post(f"/admin/threads/thread/{thread.pk}/delete/", {"post": "yes"})

    assert listing.status_code == 200
    assert listing.context["action_form"] is None
    assert page.status_code == 200
    assert "/stop/" not in page.content.decode()
    assert stop.status_code == 403
    assert delete.status_code == 403
    first.refresh_from_db()
    assert first.status == "running"
    assert Thread.objects.filter(pk=thread.pk).exists()

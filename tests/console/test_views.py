"""The console's pages without a browser: scoping by membership and role, exactly as the
API scopes (another tenant's thread a 404, a read-only member's writes a 403 with no side
effect), and the tenant switcher."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse

from console import urls as console_urls
from tenancy.models import Role
from tenancy.services import membership_set
from tests.console.conftest import CAREFUL, CHAT, NEEDY, Team, agents_for, client_of, team_make
from tests.factories import make_tenant
from threads.models import Thread, Turn
from threads.runtime.lifecycle import thread_open
from usage.models import Budget, BudgetCounter

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


def _write_urls(thread: Thread) -> list[str]:
    zero = uuid.UUID(int=0)
    return [
        reverse("console:message-send", args=[thread.pk]),
        reverse("console:thread-stop", args=[thread.pk]),
        reverse("console:turn-cancel", args=[thread.pk, zero]),
        reverse("console:action-respond", args=[thread.pk, zero]),
        reverse("console:variable-request-complete", args=[thread.pk, zero]),
        reverse("console:thread-new"),
    ]


def test_anonymous_is_sent_to_the_login_page() -> None:
    answer = Client().get(reverse("console:threads"))

    assert answer.status_code == 302
    assert answer["Location"].startswith(reverse("console:login"))


def test_login_page_has_labelled_fields(db: None) -> None:
    html = Client().get(reverse("console:login")).content.decode()

    assert '<label for="id_username">' in html
    assert '<label for="id_password">' in html
    assert "<title>Log in · Standard Agents Console</title>" in html


def _thread_routes() -> list[tuple[str, dict[str, uuid.UUID]]]:
    """Every console route with a thread in its path, with its other path parameters."""
    routes = []
    for entry in console_urls.urlpatterns:
        converters = getattr(entry.pattern, "converters", {})
        if "thread_id" in converters:
            others = {name: uuid.UUID(int=0) for name in converters if name != "thread_id"}
            routes.append((f"console:{entry.name}", others))
    return routes


def test_every_console_thread_route_is_covered() -> None:
    names = {name for name, _ in _thread_routes()}

    assert names == {
        "console:thread", "console:message-send", "console:thread-stop",
        "console:turn-cancel", "console:action-respond", "console:ws-ticket",
        "console:variable-requests", "console:variable-request-complete",
        "console:thread-files", "console:thread-file-download", "console:thread-file-thumbnail",
        "console:thread-file-upload", "console:thread-file-mkdir", "console:thread-file-delete",
        "console:thread-kv", "console:thread-kv-set", "console:thread-kv-delete",
        "console:thread-env", "console:thread-env-set", "console:thread-env-delete",
        "console:thread-logs", "console:thread-events", "console:thread-effects",
        "console:effect-cancel", "console:schedule-pause", "console:schedule-resume",
        "console:schedule-delete",
        "console:thread-subagents", "console:thread-code", "console:thread-code-run",
    }  # fmt: skip


@pytest.mark.parametrize(("route", "others"), _thread_routes())
def test_another_tenants_thread_is_404_on_every_route_with_no_side_effect(
    team: Team, route: str, others: dict[str, uuid.UUID]
) -> None:
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    client = client_of(team.admin)
    url = reverse(route, kwargs={"thread_id": theirs.pk, **others})

    answers = {
        client.get(url).status_code,
        client.post(url, {"content": "hi", "decision": "approve"}).status_code,
    }

    assert 404 in answers
    assert answers <= {404, 405}
    assert not Turn.objects.filter(thread=theirs).exists()


def test_read_only_member_sees_no_write_controls(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.reader)

    listing = client.get(reverse("console:threads")).content.decode()
    page = client.get(reverse("console:thread", args=[thread.pk])).content.decode()

    assert reverse("console:thread-new") not in listing
    assert 'id="compose"' not in page
    assert 'id="stop"' not in page
    assert 'data-can-write="false"' in page


def test_read_only_members_forged_posts_are_refused_403_with_no_side_effect(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.reader)

    for url in _write_urls(thread):
        answer = client.post(url, {"content": "forged", "agent": CHAT, "decision": "approve"})
        assert answer.status_code == 403, url
    assert not Turn.objects.filter(thread=thread).exists()
    assert Thread.objects.for_tenant(team.tenant).count() == 1


def test_read_only_member_may_follow_a_thread(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)

    answer = client_of(team.reader).post(reverse("console:ws-ticket", args=[thread.pk]))

    assert answer.status_code == 200
    assert answer.json()["thread_id"] == str(thread.pk)


def test_member_sends_a_message_through_the_turn_service(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)

    answer = client_of(team.member).post(
        reverse("console:message-send", args=[thread.pk]),
        {"content": "hello", "multitask_strategy": "enqueue"},
        headers={"Accept": "application/json"},
    )

    assert answer.status_code == 200
    turn = Turn.objects.get(pk=answer.json()["turn_id"])
    assert (turn.thread_id, turn.strategy, turn.source) == (thread.pk, "enqueue", "submit")


def test_reject_strategy_refuses_while_a_turn_waits_as_the_api_does(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)
    url = reverse("console:message-send", args=[thread.pk])
    client.post(url, {"content": "first", "multitask_strategy": "enqueue"})

    answer = client.post(
        url, {"content": "second", "multitask_strategy": "reject"},
        headers={"Accept": "application/json"},
    )  # fmt: skip

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "thread_busy"


def test_a_reject_budget_with_nothing_left_refuses_a_console_message_as_the_api_does(
    team: Team,
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    cap = Budget.objects.create(
        tenant=team.tenant, name="hard", scope="tenant", window="lifetime", limit_tokens=10,
        policy="reject",
    )  # fmt: skip
    BudgetCounter.objects.create(
        tenant=team.tenant, budget=cap, subject="", window_start=0, spent_tokens=10
    )

    answer = client_of(team.member).post(
        reverse("console:message-send", args=[thread.pk]),
        {"content": "more", "multitask_strategy": "enqueue"},
        headers={"Accept": "application/json"},
    )

    assert answer.status_code == 402
    assert answer.json()["error"]["code"] == "budget_exceeded"
    assert not Turn.objects.filter(thread=thread).exists()


def test_new_thread_asks_for_the_agents_required_variables(team: Team) -> None:
    client = client_of(team.member)
    url = reverse("console:thread-new")

    form = client.get(url, {"agent": NEEDY}).content.decode()
    refused = client.post(url, {"agent": NEEDY, "env_REGION": ""})
    nothing_yet = Thread.objects.for_tenant(team.tenant).exists()
    created = client.post(url, {"agent": NEEDY, "env_REGION": "eu"})

    assert '<label for="id_env_REGION">REGION</label>' in form
    assert refused.status_code == 200
    assert 'role="alert"' in refused.content.decode()
    assert nothing_yet is False
    thread = Thread.objects.for_tenant(team.tenant).get()
    assert created["Location"] == reverse("console:thread", args=[thread.pk])


def test_threads_are_filtered_by_agent_and_searched(team: Team) -> None:
    chat = thread_open(tenant=team.tenant, agent_name=CHAT, user_id="alice")
    other = thread_open(tenant=team.tenant, agent_name=CAREFUL, user_id="bob")
    client = client_of(team.member)

    by_agent = client.get(reverse("console:threads"), {"agent": CHAT}).content.decode()
    by_user = client.get(reverse("console:threads"), {"q": "alic"}).content.decode()
    by_nothing = client.get(reverse("console:threads"), {"q": "nobody"}).content.decode()

    assert str(chat.pk) in by_agent
    assert str(chat.pk) in by_user
    assert str(other.pk) not in by_agent
    assert str(other.pk) not in by_user
    assert str(chat.pk) not in by_nothing


def test_user_with_several_tenants_chooses_one_and_switches(team: Team) -> None:
    second = agents_for(make_tenant())
    membership_set(tenant=second, user=team.member, role=Role.READ_ONLY)
    theirs = thread_open(tenant=second, agent_name=CHAT)
    client = client_of(team.member)

    assert client.get(reverse("console:threads"))["Location"] == reverse("console:tenant-choose")
    client.post(reverse("console:tenant-choose"), {"tenant": second.slug})
    listing = client.get(reverse("console:threads")).content.decode()
    client.post(reverse("console:tenant-choose"), {"tenant": team.tenant.slug})
    after = client.get(reverse("console:thread", args=[theirs.pk]))

    assert str(theirs.pk) in listing
    assert 'id="tenant-switcher"' in listing
    assert after.status_code == 404


def test_choosing_a_tenant_one_is_not_a_member_of_is_refused(team: Team) -> None:
    stranger = make_tenant()
    membership_set(tenant=make_tenant(), user=team.member, role=Role.MEMBER)
    client = client_of(team.member)

    client.post(reverse("console:tenant-choose"), {"tenant": stranger.slug})

    assert client.get(reverse("console:threads"))["Location"] == reverse("console:tenant-choose")


@pytest.mark.parametrize(("decision", "field"), [("answer", "data"), ("edit", "arguments")])
def test_an_answer_or_edited_arguments_that_are_not_json_are_refused_naming_the_field(
    team: Team, decision: str, field: str
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)

    answer = client_of(team.member).post(
        reverse("console:action-respond", args=[thread.pk, uuid.UUID(int=0)]),
        {"decision": decision, field: "{not json"},
        headers={"Accept": "application/json"},
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == field
    assert answer.json()["error"]["message"].startswith(f"{field} is not JSON")


def test_any_member_may_follow_the_tenants_threads_live(team: Team) -> None:
    listing = client_of(team.reader).get(reverse("console:threads")).content.decode()

    answer = client_of(team.reader).post(reverse("console:tenant-ws-ticket"))

    assert answer.status_code == 200
    assert answer.json()["ticket"]
    assert '"socket": "/ws/events/"' in listing

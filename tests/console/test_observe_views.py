"""A thread's logs, events, effects and schedules, and subagents in the console, without a
browser: rows made by real turns (driven in this process with the scripted model) and by the
services, scoping by tenant (404) and role (a read-only member's forged POST is 403 with
nothing changed), and writes through the services the API uses."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.bundles import bundle_import
from console.views import observe
from tests.console.conftest import CHAT, Team, agents_for, client_of, team_make
from tests.factories import make_tenant
from threads.models import EffectStatus, Event, Schedule, ScheduledEffect, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.runtime.schedules import schedule_save
from threads.runtime.spawn import Spawned, SpawnRequest, relationship_load, spawn_child
from threads.services.effects import effect_schedule
from threads.services.inbox import message_queue
from threads.services.logs import log_create

pytestmark = pytest.mark.django_db

HOUR_MS = 3_600_000
PRICED = "priced"  # answers through a model with prices
PAIR = "pair"  # a dual_ai subagent


PRICED_MODEL = {
    "name": "m_priced", "provider": "scripted", "model_id": "scripted",
    "input_price": "2", "output_price": "10",
    "config": {"rules": [{"respond": {"text": "Priced: {last_user_message}"}}]},
}  # fmt: skip


@pytest.fixture
def team(db: None) -> Team:
    """The console's team, with agent ``priced`` (a model with prices) and the dual_ai
    subagent ``pair``."""
    team = team_make()
    report = bundle_import(
        tenant=team.tenant,
        document={
            "version": 1,
            "models": [PRICED_MODEL],
            "prompts": [
                {"name": "p_priced", "tool_description": "Priced", "prompt": "You help.",
                 "model": "m_priced", "include_chat": True},
                {"name": "p_worker", "tool_description": "Works", "prompt": "You work.",
                 "model": "m", "include_chat": True},
                {"name": "p_checker", "tool_description": "Checks", "prompt": "You check.",
                 "model": "m", "include_chat": True},
            ],
            "agents": [
                {"name": PRICED, "side_a": {"prompt": "p_priced"}},
                {"name": PAIR, "type": "dual_ai", "side_a": {"prompt": "p_worker"},
                 "side_b": {"prompt": "p_checker"}, "max_session_turns": 1,
                 "expose_as_tool": True, "tool_description": "The pair subagent"},
            ],
        },
    )  # fmt: skip
    assert report.errors == [], report.errors
    return team


def _turn(thread: Thread, content: str) -> Turn:
    """Submit ``content`` and run the turn here, as a worker would."""
    work = message_queue(thread=thread, role="user", content=content)
    thread_drive(thread_id=thread.pk, runtime=Runtime(retry_base_delay_s=0))
    thread.refresh_from_db()
    return Turn.objects.get(pk=work.pk)


def _html(client: Client, name: str, thread: Thread, query: dict[str, Any] | None = None) -> str:
    answer = client.get(reverse(name, args=[thread.pk]), query or {})
    assert answer.status_code == 200, answer.content[:500]
    return answer.content.decode()


def _rows(html: str, marker: str) -> list[str]:
    """The table rows carrying ``marker`` (e.g. ``data-log-id``)."""
    return re.findall(rf"<tr {marker}=.*?</tr>", html, flags=re.DOTALL)


def _cell(row: str, field: str) -> str:
    found = re.search(rf'data-field="{field}">(.*?)</td>', row, flags=re.DOTALL)
    assert found is not None, row
    return found.group(1).strip()


# Logs ---------------------------------------------------------------------------------------


def test_logs_show_a_real_turns_model_call_with_its_tokens_cost_and_totals(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=PRICED)
    turn = _turn(thread, "hello")

    html = _html(client_of(team.reader), "console:thread-logs", thread)

    assert turn.status == "completed"
    llm = [row for row in _rows(html, "data-log-id") if 'data-kind="llm"' in row]
    assert len(llm) == 1
    usage = turn.usage
    assert usage is not None
    assert usage["input_tokens"] > 0
    assert _cell(llm[0], "input_tokens") == str(usage["input_tokens"])
    assert _cell(llm[0], "output_tokens") == str(usage["output_tokens"])
    assert _cell(llm[0], "cost_usd") == f"{usage['cost_usd']:.6f}"
    assert '<td class="name">m_priced</td>' in llm[0]
    assert "status-ok" in llm[0]
    assert float(_cell(llm[0], "latency_ms")) >= 0
    assert f'<strong data-total="input_tokens">{usage["input_tokens"]}</strong>' in html
    assert f'<strong data-total="cost_usd">${usage["cost_usd"]:.6f}</strong>' in html
    assert f'href="{reverse("console:usage")}?days=30&amp;thread={thread.pk}">over time' in html
    assert '<details class="detail"><summary>JSON</summary><pre>' in llm[0]
    assert "&quot;finish_reason&quot;: &quot;stop&quot;" in llm[0]


def test_unknown_tokens_and_cost_show_a_dash_never_zero_and_make_the_totals_unknown(
    team: Team,
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_create(thread=thread, kind="llm",
               data={"model": "m", "input_tokens": 10, "output_tokens": 4, "cost_usd": 0.5,
                     "latency_ms": 12.0})  # fmt: skip
    log_create(thread=thread, kind="llm",
               data={"model": "m", "input_tokens": None, "output_tokens": None,
                     "cost_usd": None, "latency_ms": 3.0})  # fmt: skip

    html = _html(client_of(team.member), "console:thread-logs", thread)

    unknown = [row for row in _rows(html, "data-log-id") if ">3.0</td>" in row]
    assert len(unknown) == 1
    assert _cell(unknown[0], "input_tokens") == "—"
    assert _cell(unknown[0], "output_tokens") == "—"
    assert _cell(unknown[0], "cost_usd") == "—"
    assert "<strong>2</strong> model calls" in html
    assert '<strong data-total="input_tokens">—</strong>' in html
    assert '<strong data-total="cost_usd">—</strong>' in html


def test_totals_add_up_every_model_call_of_the_thread(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    for tokens_in, tokens_out, cost in ((10, 4, 0.25), (20, 6, 0.5)):
        log_create(thread=thread, kind="llm",
                   data={"model": "m", "input_tokens": tokens_in, "output_tokens": tokens_out,
                         "total_tokens": tokens_in + tokens_out, "cost_usd": cost})  # fmt: skip
    log_create(thread=thread, kind="tool", data={"tool": "echo", "status": "success"})

    html = _html(client_of(team.member), "console:thread-logs", thread, {"kind": "tool"})

    assert '<strong data-total="input_tokens">30</strong>' in html
    assert '<strong data-total="output_tokens">10</strong>' in html
    assert '<strong data-total="total_tokens">40</strong>' in html
    assert '<strong data-total="cost_usd">$0.750000</strong>' in html
    assert [row.count('data-kind="tool"') for row in _rows(html, "data-log-id")] == [1]


def test_logs_are_newest_first_filtered_by_kind_and_paged(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observe, "LOGS_PER_PAGE", 2)
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    made = [
        log_create(thread=thread, kind=kind, data={"tool": f"t{n}", "status": "success"})
        for n, kind in enumerate(["tool", "llm", "tool", "tool"])
    ]
    client = client_of(team.member)

    tools = _html(client, "console:thread-logs", thread, {"kind": "tool"})
    older = _html(client, "console:thread-logs", thread, {"kind": "tool", "page": "2"})

    ids = re.findall(r'data-log-id="([0-9a-f-]+)"', tools + older)
    assert ids == [str(made[3].pk), str(made[2].pk), str(made[0].pk)]
    assert "?kind=tool&amp;page=2" in tools
    assert "Page 2 of 2" in older


# Events -------------------------------------------------------------------------------------


def test_events_show_a_real_turns_log_with_sequence_type_turn_and_data(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    turn = _turn(thread, "hello")
    stored = list(Event.objects.filter(thread=thread).order_by("sequence"))

    html = _html(client_of(team.reader), "console:thread-events", thread)

    shown = re.findall(r'data-sequence="(\d+)" data-type="([a-z._]+)"', html)
    assert shown == [(str(event.sequence), event.type) for event in stored]
    assert ("turn.completed" in {kind for _, kind in shown}) is True
    assert f'<a href="?turn={turn.pk}"' in html
    assert "You said: hello" in html  # message.created's data, in its <details>


def test_events_filter_by_type_and_by_turn(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    first = _turn(thread, "one")
    second = _turn(thread, "two")
    client = client_of(team.member)

    completed = _html(client, "console:thread-events", thread, {"type": "turn.completed"})
    of_first = _html(client, "console:thread-events", thread, {"turn": str(first.pk)})

    assert set(re.findall(r'data-type="([a-z._]+)"', completed)) == {"turn.completed"}
    assert len(re.findall(r'data-type="turn.completed"', completed)) == 2
    first_seqs = {
        str(seq) for seq in Event.objects.filter(thread=thread, turn_id=str(first.pk))
        .values_list("sequence", flat=True)
    }  # fmt: skip
    assert set(re.findall(r'data-sequence="(\d+)"', of_first)) == first_seqs
    assert str(second.pk) not in of_first.split("<tbody>")[1]
    assert f'<option value="{second.pk}">' in of_first


def test_events_page_forward_by_sequence(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe, "EVENTS_PER_PAGE", 3)
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    _turn(thread, "hello")
    last = Event.objects.filter(thread=thread).order_by("-sequence").first()
    assert last is not None
    assert last.sequence > 4
    client = client_of(team.member)

    first = _html(client, "console:thread-events", thread)
    second = _html(client, "console:thread-events", thread, {"after": "3"})
    end = _html(client, "console:thread-events", thread, {"after": str(last.sequence)})
    url = reverse("console:thread-events", args=[thread.pk])
    bad = [client.get(url, {"after": after}) for after in ("-1", "x", str(2**63))]

    assert re.findall(r'data-sequence="(\d+)"', first) == ["1", "2", "3"]
    assert 'after=3" rel="next">Later events</a>' in first
    assert re.findall(r'data-sequence="(\d+)"', second) == ["4", "5", "6"]
    assert 'after=0">From the start</a>' in second
    assert re.findall(r'data-sequence="(\d+)"', end) == []
    assert "Later events" not in end
    assert [answer.status_code for answer in bad] == [200, 200, 200]
    assert all('role="alert"' in answer.content.decode() for answer in bad)


# Effects and schedules ----------------------------------------------------------------------


def _effect(thread: Thread) -> ScheduledEffect:
    return effect_schedule(thread=thread, name="remind", args={"text": "tea"}, delay_ms=HOUR_MS)


def _schedule(thread: Thread) -> Schedule:
    return schedule_save(
        tenant=thread.tenant,
        data={"name": "morning", "thread_id": str(thread.pk), "cron": "0 9 * * *",
              "action": "turn", "input": {"content": "good morning"}},
    )  # fmt: skip


def test_effects_page_shows_the_effects_and_schedules_with_controls_for_writers(
    team: Team,
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    effect = _effect(thread)
    schedule = _schedule(thread)

    html = _html(client_of(team.member), "console:thread-effects", thread)

    row = _rows(html, "data-effect-id")[0]
    assert f'data-effect-id="{effect.pk}" data-status="pending"' in row
    assert "<code>remind</code>" in row
    assert "&quot;text&quot;: &quot;tea&quot;" in row
    assert reverse("console:effect-cancel", args=[thread.pk, effect.pk]) in row
    schedule_row = _rows(html, "data-schedule-id")[0]
    assert "morning" in schedule_row
    assert "<code>0 9 * * *</code> UTC" in schedule_row
    assert "good morning" in schedule_row
    assert reverse("console:schedule-pause", args=[thread.pk, schedule.pk]) in schedule_row


def test_cancel_a_pending_effect_through_the_service(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    effect = _effect(thread)
    url = reverse("console:effect-cancel", args=[thread.pk, effect.pk])
    client = client_of(team.member)

    done = client.post(url, headers={"Accept": "application/json"})
    again = client.post(url, headers={"Accept": "application/json"})
    plain = client.post(url, follow=True)

    assert done.status_code == 200
    assert done.json()["effect"]["status"] == EffectStatus.USER_CANCELED
    effect.refresh_from_db()
    assert effect.status == EffectStatus.USER_CANCELED
    assert Event.objects.filter(thread=thread, type="effect.removed").count() == 1
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    page = plain.content.decode()
    assert "only a pending one can be cancelled" in page
    assert 'data-status="user_canceled"' in page
    assert reverse("console:effect-cancel", args=[thread.pk, effect.pk]) not in page


def test_effects_filter_by_status(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    kept, cancelled = _effect(thread), _effect(thread)
    client_of(team.member).post(reverse("console:effect-cancel", args=[thread.pk, cancelled.pk]))

    html = _html(client_of(team.member), "console:thread-effects", thread, {"status": "pending"})

    assert re.findall(r'data-effect-id="([0-9a-f-]+)"', html) == [str(kept.pk)]


def test_pause_and_resume_a_schedule_through_the_service(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    schedule = _schedule(thread)
    client = client_of(team.member)

    paused = client.post(reverse("console:schedule-pause", args=[thread.pk, schedule.pk]))
    schedule.refresh_from_db()
    was_paused = schedule.paused
    html = _html(client, "console:thread-effects", thread)
    resumed = client.post(
        reverse("console:schedule-resume", args=[thread.pk, schedule.pk]),
        headers={"Accept": "application/json"},
    )

    assert paused.status_code == 302
    assert was_paused is True
    assert 'data-paused="true"' in html
    assert reverse("console:schedule-resume", args=[thread.pk, schedule.pk]) in html
    assert resumed.json()["schedule"]["paused"] is False
    schedule.refresh_from_db()
    assert schedule.paused is False


def test_delete_a_schedule_through_the_service(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    schedule, kept = _schedule(thread), _schedule(thread)
    client = client_of(team.member)
    url = reverse("console:schedule-delete", args=[thread.pk, schedule.pk])

    html = _html(client, "console:thread-effects", thread)
    deleted = client.post(url, headers={"Accept": "application/json"})
    again = client.post(url, headers={"Accept": "application/json"})

    assert url in html
    assert deleted.json() == {"ok": True, "deleted": str(schedule.pk)}
    assert again.status_code == 404
    assert list(Schedule.objects.filter(thread_id=thread.pk)) == [kept]


def test_another_threads_schedule_is_not_found_here(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    elsewhere = _schedule(thread_open(tenant=team.tenant, agent_name=CHAT))

    answer = client_of(team.member).post(
        reverse("console:schedule-pause", args=[thread.pk, elsewhere.pk]),
        headers={"Accept": "application/json"},
    )

    assert answer.status_code == 404
    elsewhere.refresh_from_db()
    assert elsewhere.paused is False


# Subagents ----------------------------------------------------------------------------------


def _spawn(parent: Thread, label: str) -> Thread:
    relationship = relationship_load(tenant=parent.tenant, agent_name=PAIR, config=None, owner="a")
    assert relationship is not None
    spawned = spawn_child(
        parent=parent, relationship=relationship, request=SpawnRequest(message="go", label=label)
    )
    assert isinstance(spawned, Spawned), spawned
    return spawned.child


def test_subagents_are_a_tree_of_links_and_a_child_links_its_parent(team: Team) -> None:
    root = thread_open(tenant=team.tenant, agent_name=CHAT)
    child = _spawn(root, "first")
    grandchild = _spawn(child, "deeper")
    sibling = _spawn(root, "second")
    client = client_of(team.reader)

    tree = _html(client, "console:thread-subagents", root)
    below = _html(client, "console:thread-subagents", child)

    nested = re.search(
        rf'data-thread-id="{child.pk}">.*?<ul class="subagent-tree">\s*<li class="subagent" '
        rf'data-thread-id="{grandchild.pk}">',
        tree, flags=re.DOTALL,
    )  # fmt: skip
    assert nested is not None
    assert tree.index(str(child.pk)) < tree.index(str(sibling.pk))
    for thread in (child, grandchild, sibling):
        assert f'href="{reverse("console:thread", args=[thread.pk])}"' in tree
    assert "<strong>pair</strong> “first”" in tree
    assert "3 subagent threads" in tree
    assert f'href="{reverse("console:thread", args=[root.pk])}">thread <code>{root.pk}' in below
    assert f'data-thread-id="{grandchild.pk}"' in below
    assert f'data-thread-id="{sibling.pk}"' not in below


def test_a_thread_without_subagents_says_so(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)

    html = _html(client_of(team.member), "console:thread-subagents", thread)

    assert "This thread has started no subagents." in html
    assert 'id="parent"' not in html


# Scoping ------------------------------------------------------------------------------------

PAGES = [
    "console:thread-logs", "console:thread-events", "console:thread-effects",
    "console:thread-subagents",
]  # fmt: skip


def _writes(thread: Thread, effect: ScheduledEffect, schedule: Schedule) -> list[str]:
    return [
        reverse("console:effect-cancel", args=[thread.pk, effect.pk]),
        reverse("console:schedule-pause", args=[thread.pk, schedule.pk]),
        reverse("console:schedule-resume", args=[thread.pk, schedule.pk]),
        reverse("console:schedule-delete", args=[thread.pk, schedule.pk]),
    ]


def test_another_tenants_thread_is_404_on_every_observe_route_with_no_side_effect(
    team: Team,
) -> None:
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    effect, schedule = _effect(theirs), _schedule(theirs)
    client = client_of(team.admin)

    pages = [client.get(reverse(name, args=[theirs.pk])) for name in PAGES]
    writes = [client.post(url) for url in _writes(theirs, effect, schedule)]

    assert [answer.status_code for answer in pages + writes] == [404] * 8
    assert "<title>Not found" in pages[0].content.decode()
    effect.refresh_from_db()
    schedule.refresh_from_db()
    assert (effect.status, schedule.paused) == (EffectStatus.PENDING, False)


def test_read_only_member_sees_no_write_controls_and_forged_posts_are_403(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    effect, schedule = _effect(thread), _schedule(thread)
    client = client_of(team.reader)

    html = _html(client, "console:thread-effects", thread)
    refused = [client.post(url).status_code for url in _writes(thread, effect, schedule)]

    assert "<button" not in html.split('id="effects-title"')[1].replace(
        '<button type="submit">Filter</button>', ""
    )
    assert 'method="post" action="/console/threads' not in html
    assert refused == [403, 403, 403, 403]
    effect.refresh_from_db()
    schedule.refresh_from_db()  # not deleted
    assert (effect.status, schedule.paused) == (EffectStatus.PENDING, False)
    assert not Event.objects.filter(thread=thread, type="effect.removed").exists()


@pytest.mark.parametrize("name", PAGES)
def test_pages_have_a_title_tabs_and_labelled_filters(team: Team, name: str) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)

    html = _html(client_of(team.member), name, thread)

    assert re.search(r"<title>\w+ of thread [0-9a-f]{8}… \(chat\) · Standard Agents Console", html)
    assert f'<a href="{reverse(name, args=[thread.pk])}" aria-current="page">' in html
    for control in re.findall(r'<(?:select|input)[^>]*id="([^"]+)"', html):
        if control not in ("tenant-switcher",):
            assert f'<label for="{control}">' in html, control
    assert re.search(r'<section id="\w+" class="observe" aria-labelledby="\w+-title">', html)


def test_unknown_ids_are_404_not_500(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)
    zero = uuid.UUID(int=0)

    effect = client.post(reverse("console:effect-cancel", args=[thread.pk, zero]),
                         headers={"Accept": "application/json"})  # fmt: skip
    schedule = client.post(reverse("console:schedule-resume", args=[thread.pk, zero]),
                           headers={"Accept": "application/json"})  # fmt: skip

    assert (effect.status_code, schedule.status_code) == (404, 404)
    assert effect.json()["error"]["code"] == "not_found"

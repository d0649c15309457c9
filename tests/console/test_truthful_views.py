"""The console says what is true, without a browser: a thread that never ran reads ``new``
(not ``completed``), threads are listed by title with their subagents' threads nested under
them (or as rows of their own on request), a dual_ai thread's sides are named by their
labels, and a subagent is shown in one state."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from agents.bundles import bundle_import
from tests.console.conftest import CHAT, Team, client_of, team_make
from tests.console.test_observe_views import PAIR, _html, _spawn, _turn
from threads.models import SubagentLink, Thread
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.services.control import thread_terminate
from threads.services.messages import message_inject

pytestmark = pytest.mark.django_db

LABELLED = "labelled_pair"


@pytest.fixture
def team(db: None) -> Team:
    """The console's team, with the dual_ai subagent ``pair`` (sides without labels) and
    ``labelled_pair`` (sides labelled Writer and Reviewer)."""
    team = team_make()
    report = bundle_import(
        tenant=team.tenant,
        document={
            "version": 1,
            "prompts": [
                {"name": "p_worker", "tool_description": "Works", "prompt": "You work.",
                 "model": "m", "include_chat": True},
                {"name": "p_checker", "tool_description": "Checks", "prompt": "You check.",
                 "model": "m", "include_chat": True},
            ],
            "agents": [
                {"name": PAIR, "type": "dual_ai", "side_a": {"prompt": "p_worker"},
                 "side_b": {"prompt": "p_checker"}, "max_session_turns": 1,
                 "expose_as_tool": True, "tool_description": "The pair subagent"},
                {"name": LABELLED, "type": "dual_ai", "max_session_turns": 1,
                 "side_a": {"prompt": "p_worker", "label": "Writer"},
                 "side_b": {"prompt": "p_checker", "label": "Reviewer"}},
            ],
        },
    )  # fmt: skip
    assert report.errors == [], report.errors
    return team


def _row(listing: str, thread: Thread) -> str:
    found = re.search(rf'<tr data-thread-id="{thread.pk}".*?</tr>', listing, flags=re.DOTALL)
    assert found is not None, f"no row of {thread.pk}"
    return found.group(0)


def _badge(html: str) -> str:
    found = re.search(r'class="status status-([a-z_]+)"[^>]*>([^<]*)<', html)
    assert found is not None
    assert found.group(1) == found.group(2)
    return found.group(1)


def test_a_thread_that_never_ran_reads_new_and_one_that_ran_its_status(team: Team) -> None:
    fresh = thread_open(tenant=team.tenant, agent_name=CHAT)
    ran = thread_open(tenant=team.tenant, agent_name=CHAT)
    _turn(ran, "hello")
    client = client_of(team.member)

    listing = client.get(reverse("console:threads")).content.decode()
    page = client.get(reverse("console:thread", args=[fresh.pk])).content.decode()
    completed = client.get(reverse("console:threads"), {"status": "completed"}).content.decode()

    assert _badge(_row(listing, fresh)) == "new"
    assert _badge(_row(listing, ran)) == "waiting_input"  # an ai_human thread at rest
    assert 'id="thread-status" class="status status-new" role="status">new</span>' in page
    assert str(fresh.pk) not in completed  # it completed nothing


def test_threads_are_listed_by_title_given_or_derived(team: Team) -> None:
    named = thread_open(tenant=team.tenant, agent_name=CHAT, title="Budget review")
    derived = thread_open(tenant=team.tenant, agent_name=CHAT)
    message_inject(thread=derived, role="user", content="Draft the launch email\nplease")
    untitled = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)

    listing = client.get(reverse("console:threads")).content.decode()
    searched = client.get(reverse("console:threads"), {"q": "budget"}).content.decode()
    page = client.get(reverse("console:thread", args=[named.pk])).content.decode()

    assert '<a href="{}" class="thread-title">Budget review</a>'.format(
        reverse("console:thread", args=[named.pk])
    ) in _row(listing, named)
    assert ">Draft the launch email</a>" in _row(listing, derived)
    assert '<span class="untitled">Untitled</span>' in _row(listing, untitled)
    assert str(named.pk) in searched
    assert str(derived.pk) not in searched
    assert '<h1 id="thread-title">Budget review</h1>' in page


def test_subagent_threads_nest_under_their_parent_or_list_as_rows(team: Team) -> None:
    root = thread_open(tenant=team.tenant, agent_name=CHAT, title="The root")
    child = _spawn(root, "first")
    grandchild = _spawn(child, "deeper")
    later = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)

    nested = client.get(reverse("console:threads")).content.decode()
    flat = client.get(reverse("console:threads"), {"flat": "on"}).content.decode()

    order = re.findall(r'<tr data-thread-id="([0-9a-f-]+)"', nested)
    assert order == [str(later.pk), str(root.pk), str(child.pk), str(grandchild.pk)]
    assert f'data-parent-id="{root.pk}" class="child" data-depth="1"' in _row(nested, child)
    assert f'data-parent-id="{child.pk}" class="child" data-depth="2"' in _row(nested, grandchild)
    assert 'data-depth="0"' in _row(nested, root)
    flat_order = re.findall(r'<tr data-thread-id="([0-9a-f-]+)"', flat)
    assert set(flat_order) == {str(t.pk) for t in (root, child, grandchild, later)}
    assert 'data-depth="0"' in _row(flat, grandchild)


def test_a_dual_ai_threads_sides_are_named_by_their_labels(team: Team) -> None:
    labelled = thread_open(tenant=team.tenant, agent_name=LABELLED)
    unlabelled = thread_open(tenant=team.tenant, agent_name=PAIR)
    chat = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)

    def sides(thread: Thread) -> dict[str, str]:
        html = client.get(reverse("console:thread", args=[thread.pk])).content.decode()
        found = re.search(r'<script id="thread-sides" type="application/json">(.*?)</script>', html)
        assert found is not None
        return dict(json.loads(found.group(1)))

    assert sides(labelled) == {"a": "Writer", "b": "Reviewer"}
    assert sides(unlabelled) == {"a": "Side A", "b": "Side B"}
    assert sides(chat) == {}


def test_a_subagent_is_shown_in_one_state(team: Team) -> None:
    root = thread_open(tenant=team.tenant, agent_name=CHAT)
    done = _spawn(root, "done")
    thread_drive(thread_id=done.pk, runtime=Runtime(retry_base_delay_s=0))
    SubagentLink.objects.filter(child=done).update(status="terminated")  # closed once it ended
    waiting = _spawn(root, "waiting")
    SubagentLink.objects.filter(child=waiting).update(status="drafting chapter 2")
    cut = _spawn(root, "cut")
    thread_terminate(thread=Thread.objects.get(pk=cut.pk))
    untouched = thread_open(tenant=team.tenant, agent_name=CHAT)
    message_inject(thread=untouched, role="user", content="x")

    tree = _html(client_of(team.reader), "console:thread-subagents", root)

    def node(thread: Thread) -> str:
        found = re.search(rf'data-thread-id="{thread.pk}">(.*?)</li>', tree, flags=re.DOTALL)
        assert found is not None
        return found.group(1)

    assert "says:" not in tree
    assert _badge(node(done)) == "completed"
    assert "· closed" in node(done)
    assert "“drafting chapter 2”" in node(waiting)
    assert _badge(node(cut)) == "terminated"
    assert "· closed" not in node(cut)
    for thread in (done, waiting, cut):
        assert node(thread).count('class="status ') == 1

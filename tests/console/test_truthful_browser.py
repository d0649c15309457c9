"""The console says what is true, in a real browser (Debian's Chromium through Playwright)
against a live server and worker: a new thread reads ``new`` until it runs, a dual_ai
subagent's messages are named by its sides' labels, the threads list shows titles with
subagents' threads nested under their parent, and Stop keeps the answer streamed so far,
marked as interrupted."""

from __future__ import annotations

from typing import Any

import pytest

from agents.bundles import bundle_import
from tests.console.conftest import CHAT, Team, log_in
from tests.console.test_browser import _assert_accessible, _send, _thread_page
from tests.live import Live
from threads.models import Message, Thread
from threads.runtime.lifecycle import thread_open
from threads.runtime.spawn import Spawned, SpawnRequest, relationship_load, spawn_child

pytestmark = pytest.mark.django_db(transaction=True)

PAIR = "writing_pair"
STORYTELLER = "storyteller"
STORY = "Once upon a time " + " ".join(f"line{n}" for n in range(60)) + " THE END"


def _more_agents(team: Team) -> None:
    """A dual_ai subagent whose sides are labelled Writer and Reviewer, and an agent whose
    model streams a long answer slowly (a stop lands in the middle of it)."""
    report = bundle_import(
        tenant=team.tenant,
        document={
            "version": 1,
            "models": [{"name": "slow_stream", "provider": "scripted", "model_id": "scripted",
                        "config": {"rules": [{"respond": {"text": STORY}}],
                                   "streaming": {"chunk_size": 4, "chunk_delay_ms": 150}}}],
            "prompts": [
                {"name": "writer", "tool_description": "Writes", "prompt": "You write.",
                 "model": "m", "include_chat": True},
                {"name": "reviewer", "tool_description": "Reviews", "prompt": "You review.",
                 "model": "m", "include_chat": True},
                {"name": "teller", "tool_description": "Tells", "prompt": "You tell.",
                 "model": "slow_stream", "include_chat": True},
            ],
            "agents": [
                {"name": PAIR, "type": "dual_ai", "max_session_turns": 1,
                 "side_a": {"prompt": "writer", "label": "Writer"},
                 "side_b": {"prompt": "reviewer", "label": "Reviewer"},
                 "expose_as_tool": True, "tool_description": "Writes and reviews"},
                {"name": STORYTELLER, "side_a": {"prompt": "teller"}},
            ],
        },
    )  # fmt: skip
    assert report.errors == [], report.errors


def _spawn(parent: Thread, label: str) -> Thread:
    relationship = relationship_load(tenant=parent.tenant, agent_name=PAIR, config=None, owner="a")
    assert relationship is not None
    spawned = spawn_child(
        parent=parent, relationship=relationship, request=SpawnRequest(message="go", label=label)
    )
    assert isinstance(spawned, Spawned), spawned
    return spawned.child


def _status(page: Any) -> str:
    return str(page.locator("#thread-status").text_content()).strip()


def test_a_new_thread_reads_new_until_it_runs(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    page.goto("/console/")
    listed = page.locator(f"tr[data-thread-id='{thread.pk}'] [data-status]").text_content()
    _thread_page(page, thread.pk)
    before = _status(page)

    _send(page, "hello there")
    page.locator("#turns-list li[data-status=completed]").wait_for()
    page.wait_for_function(
        "() => document.getElementById('thread-status').textContent.trim() !== 'new'"
    )

    assert (listed, before) == ("new", "new")
    assert page.locator("#thread-status.status-new").count() == 0
    assert _status(page) == "waiting_input"  # an ai_human thread at rest: the person is next
    page.goto("/console/")
    badge = page.locator(f"tr[data-thread-id='{thread.pk}'] [data-status]")
    assert badge.text_content() == "waiting_input"


def test_a_dual_ai_subagent_names_its_sides_by_their_labels(
    page: Any, served: Live, team: Team
) -> None:
    _more_agents(team)
    parent = thread_open(tenant=team.tenant, agent_name=CHAT)
    child = _spawn(parent, "draft")
    log_in(page, served, team.member)
    _thread_page(page, child.pk)

    page.locator(".message[data-side=b][data-status=completed]").first.wait_for()
    page.locator(".message[data-side=a][data-status=completed]").first.wait_for()

    def names(side: str) -> set[str]:
        who = page.locator(f".message[data-side={side}] .who").all_text_contents()
        return {text.strip() for text in who}

    assert names("a") == {"Writer"}
    assert names("b") == {"Reviewer"}
    assert Message.objects.filter(thread=child, side="b", role="user").exists()  # stored so


def test_the_threads_list_shows_titles_and_nests_subagents(
    page: Any, served: Live, team: Team
) -> None:
    _more_agents(team)
    root = thread_open(tenant=team.tenant, agent_name=CHAT, title="Quarterly plan")
    child = _spawn(root, "draft")
    later = thread_open(tenant=team.tenant, agent_name=CHAT, title="Later thread")
    log_in(page, served, team.member)
    page.goto("/console/")
    page.locator("#threads-live-status", has_text="Live").wait_for()

    rows = page.locator("tbody tr[data-thread-id]")
    order = [rows.nth(n).get_attribute("data-thread-id") for n in range(rows.count())]
    nested = page.locator(f"tr[data-thread-id='{child.pk}']")

    assert order == [str(later.pk), str(root.pk), str(child.pk)]
    assert page.get_by_role("link", name="Quarterly plan").count() == 1
    assert page.get_by_role("link", name="Later thread").count() == 1
    assert (nested.get_attribute("data-parent-id"), nested.get_attribute("data-depth")) == (
        str(root.pk),
        "1",
    )
    root_cell = page.locator(f"tr[data-thread-id='{root.pk}'] td").first.bounding_box()
    link = nested.locator("a.thread-title").bounding_box()
    assert link["x"] > root_cell["x"] + 20  # indented under its parent
    page.get_by_label("Subagent threads as rows of their own").check()
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**flat=on**")
    assert page.locator(f"tr[data-thread-id='{child.pk}']").get_attribute("data-depth") == "0"
    _assert_accessible(page)


def test_stop_keeps_the_streamed_part_of_the_answer_marked_interrupted(
    page: Any, served: Live, team: Team
) -> None:
    _more_agents(team)
    thread = thread_open(tenant=team.tenant, agent_name=STORYTELLER)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "tell me a story")
    page.wait_for_function(
        "() => { const c = document.querySelector('.message[data-status=streaming] .content');"
        " return c && c.textContent.length >= 20; }"
    )
    page.get_by_role("button", name="Stop the running turn").click()
    page.locator("#turns-list li[data-status=cancelled]").wait_for()
    kept = page.locator(".message.role-assistant[data-interrupted=true]")
    kept.wait_for()
    shown = str(kept.locator(".content").text_content())
    note = str(kept.locator(".note").text_content())
    page.reload()
    page.locator("#connection", has_text="Live").wait_for()
    replayed = page.locator(".message.role-assistant[data-interrupted=true]")
    replayed.wait_for()

    row = Message.objects.get(thread=thread, role="assistant")
    assert (row.status, row.metadata["interrupted"]) == ("failed", True)
    assert shown == row.content
    assert 20 <= len(shown) < len(STORY)
    assert STORY.startswith(shown)
    assert note.startswith("Interrupted")
    assert replayed.locator(".content").text_content() == row.content
    assert page.locator(".message.role-system", has_text="Execution stopped by user").count() == 1

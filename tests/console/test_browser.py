"""The console in a real browser (Debian's Chromium through Playwright) against a live
server and worker: logging in, creating a thread, a streamed answer and its tool call
appearing without a reload, stopping a slow turn, approving an action, scoping by tenant and
role, and the accessibility basics (labels, titles, landmarks, the keyboard alone)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pytest_django.fixtures import Settings

from tenancy.models import Role
from tenancy.services import membership_set
from tests.console.conftest import CAREFUL, CHAT, STREAMED, Team, agents_for, log_in
from tests.factories import make_member, make_tenant
from tests.live import Live
from threads.runtime.lifecycle import thread_open
from threads.services.control import thread_stop
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db(transaction=True)

# Every control without a label: <label for>, a wrapping label, aria-label or aria-labelledby.
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea')]
  .filter((el) => el.type !== 'hidden' && !el.closest('[hidden]'))
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                  && !el.getAttribute('aria-labelledby'))
  .map((el) => el.name || el.id || el.outerHTML)"""


# The text of an answer while it is still streaming (read in one go, as it grows).
STREAMING_TEXT = """() => {
  const content = document.querySelector('.message[data-status=streaming] .content');
  return content && content.textContent.includes('Streaming answer') ? content.textContent : null;
}"""


def _thread_page(page: Any, thread_id: object) -> None:
    page.goto(f"/console/threads/{thread_id}/")
    page.locator("#connection", has_text="Live").wait_for()


def _send(page: Any, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")


def _assert_accessible(page: Any) -> None:
    assert page.title().strip(), page.url
    for landmark in ("header", "nav", "main"):
        assert page.locator(landmark).count() >= 1, f"no <{landmark}> on {page.url}"
    assert page.evaluate(UNLABELLED) == [], page.url


def test_log_in_with_the_login_form(page: Any, team: Team, settings: Settings) -> None:
    # The live server checks passwords with the platform's own hashers.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    team.member.set_password("a long console password")
    team.member.save()

    page.goto("/console/")
    page.get_by_label("Username").fill(team.member.username)
    page.get_by_label("Password").fill("a long console password")
    page.get_by_role("button", name="Log in").click()

    page.get_by_role("heading", name="Threads").wait_for()
    assert page.url.endswith("/console/")
    assert page.locator("header .role").inner_text() == "Member"


def test_create_a_thread_and_see_the_streamed_answer_and_tool_call_live(
    page: Any, served: Live, team: Team
) -> None:
    log_in(page, served, team.member)
    page.goto("/console/threads/new/")
    page.get_by_label("Agent").select_option(CHAT)
    page.get_by_role("button", name="Choose").click()
    page.get_by_role("button", name="Create thread").click()
    page.locator("#connection", has_text="Live").wait_for()
    page.evaluate("window.notReloaded = true")

    _send(page, "what time is it?")
    call = page.locator("details.tool-call[data-tool=current_time]")
    call.wait_for()
    page.locator(".message.role-assistant .content", has_text="It is").wait_for()
    _send(page, "please stream")
    partial = page.wait_for_function(STREAMING_TEXT).json_value()
    page.locator(".message.role-assistant .content", has_text="[end]").wait_for()
    page.locator("#turns-list li[data-status=completed]").nth(1).wait_for()

    assert call.get_attribute("data-status") == "succeeded"
    call.locator("summary").click()
    assert '"timezone": "UTC"' in call.locator(".arguments").inner_text()
    assert call.locator(".result").inner_text().strip()
    assert STREAMED.startswith(partial)
    assert len(partial) < len(STREAMED)
    assert page.evaluate("window.notReloaded") is True
    assert page.locator("#turns-list li[data-status=completed]").count() == 2


def test_stop_a_slow_turn_and_cancel_a_queued_one(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "be slow")
    page.locator("#turns-list li[data-status=running]").wait_for()
    page.get_by_label("If a turn is running").select_option("enqueue")
    _send(page, "me next")
    queued = page.locator("#turns-list li[data-status=queued]")
    queued.wait_for()
    queued.get_by_role("button", name=re.compile("^Cancel turn ")).click()
    page.locator("#turns-list li[data-status=cancelled]").wait_for()
    page.get_by_role("button", name="Stop the running turn").click()

    page.locator("#turns-list li[data-status=cancelled]").nth(1).wait_for()
    assert page.locator("#turns-list li[data-status=running]").count() == 0
    assert page.locator(".message.role-assistant", has_text="done slowly").count() == 0


def test_approve_a_pending_action(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "what time is it?")
    action = page.locator("#pending-actions li.action")
    action.wait_for()
    assert "current_time" in action.inner_text()
    action.get_by_role("button", name="Approve current_time").click()

    page.locator(".message.role-assistant .content", has_text="It is").wait_for()
    assert page.locator("#pending-actions li").count() == 0
    assert page.locator("details.tool-call").get_attribute("data-status") == "succeeded"


def test_edit_a_pending_actions_arguments(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "what time is it?")
    action = page.locator("#pending-actions li.action")
    action.get_by_text("Edit the arguments").click()
    action.get_by_label("Arguments (JSON)").fill('{"timezone": "Asia/Tokyo"}')
    action.get_by_role("button", name="Run current_time with these arguments").click()

    page.locator(".message.role-assistant .content", has_text="It is").wait_for()
    call = page.locator("details.tool-call[data-tool=current_time]")
    assert "Asia/Tokyo" in (call.locator(".arguments").text_content() or "")
    assert "JST" in (call.locator(".result").text_content() or "")
    assert page.locator("#pending-actions li").count() == 0


def test_deny_a_pending_action(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "what time is it?")
    action = page.locator("#pending-actions li.action")
    action.get_by_role("button", name="Deny current_time").click()

    call = page.locator("details.tool-call[data-tool=current_time]")
    page.wait_for_function(
        "() => document.querySelector('details.tool-call').dataset.status === 'failed'"
    )
    page.locator("#turns-list li[data-status=completed]").wait_for()
    assert page.locator("#pending-actions li").count() == 0
    assert "denied" in (call.locator(".result").text_content() or "").lower()


@pytest.mark.parametrize(
    ("strategy", "kept"), [("interrupt", True), ("rollback", False)], ids=["interrupt", "rollback"]
)
def test_double_texting_interrupt_keeps_and_rollback_removes_the_running_turns_input(
    page: Any, served: Live, team: Team, strategy: str, kept: bool
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    _send(page, "be slow")
    page.locator("#turns-list li[data-status=running]").wait_for()
    page.get_by_label("If a turn is running").select_option(strategy)
    _send(page, "me next")

    page.locator(".message.role-assistant .content", has_text="You said: me next").wait_for()
    page.locator("#turns-list li[data-status=completed]").wait_for()
    first = page.locator("#turns-list li").first
    assert first.get_attribute("data-status") == "cancelled"
    assert (page.locator(".message.role-user", has_text="be slow").count() == 1) is kept
    assert page.locator(".message.role-assistant", has_text="done slowly").count() == 0


def test_another_tenants_thread_url_is_404(page: Any, served: Live, team: Team) -> None:
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    log_in(page, served, team.admin)

    answer = page.goto(f"/console/threads/{theirs.pk}/")

    assert answer is not None
    assert answer.status == 404
    assert page.title().startswith("Not found")


def test_read_only_member_sees_no_write_controls_and_a_forged_post_is_refused(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.reader)
    _thread_page(page, thread.pk)

    controls = page.locator("textarea, #compose, #stop, button.approve, button.cancel")
    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    forged = page.request.post(
        f"/console/threads/{thread.pk}/messages/",
        form={"content": "forged", "multitask_strategy": "enqueue"},
        headers={"X-CSRFToken": token},
    )  # fmt: skip
    page.goto("/console/")

    assert controls.count() == 0
    assert forged.status == 403
    assert page.get_by_role("link", name="New thread").count() == 0
    assert page.locator("header .role").inner_text() == "Read-only"


def test_pages_have_titles_landmarks_and_labelled_controls(
    page: Any, served: Live, team: Team
) -> None:
    second = agents_for(make_tenant())
    user = make_member(second, role=Role.MEMBER)
    membership_set(tenant=team.tenant, user=user, role=Role.MEMBER)
    thread = thread_open(tenant=second, agent_name=CAREFUL)

    page.goto("/console/login/")
    _assert_accessible(page)
    log_in(page, served, user)
    page.goto("/console/")
    _assert_accessible(page)  # the tenant chooser
    page.get_by_label(re.compile(second.slug)).check()
    page.get_by_role("button", name="Open").click()
    page.get_by_role("heading", name="Threads").wait_for()
    _assert_accessible(page)  # with the tenant switcher in the header
    page.goto(f"/console/threads/new/?agent={CAREFUL}")
    _assert_accessible(page)
    _thread_page(page, thread.pk)
    _assert_accessible(page)


def test_chat_works_with_the_keyboard_alone(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    _thread_page(page, thread.pk)

    for _ in range(40):  # Tab through the page until the message box has the focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.name") == "content":
            break
    page.keyboard.type("typed with keys")
    page.keyboard.press("Enter")

    page.locator(
        ".message.role-assistant .content", has_text="You said: typed with keys"
    ).wait_for()
    assert page.evaluate("document.activeElement.name") == "content"
    assert page.get_by_label("Message").input_value() == ""


def test_the_threads_list_follows_statuses_and_new_threads_live(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    page.goto("/console/")
    page.locator("#threads-live-status", has_text="Live").wait_for()
    badge = page.locator(f"tr[data-thread-id='{thread.pk}'] [data-status]")
    before = badge.inner_text()

    message_queue(thread=thread, role="user", content="be slow")
    page.wait_for_function(
        f"() => document.querySelector(\"tr[data-thread-id='{thread.pk}'] [data-status]\")"
        ".textContent === 'running'"
    )
    thread_open(tenant=team.tenant, agent_name=CHAT)
    page.locator("#new-threads").wait_for()
    thread_stop(thread=thread)
    page.get_by_role("link", name="New threads were created: show them").click()

    page.locator("tbody tr[data-thread-id]").nth(1).wait_for()
    assert before != "running"
    assert page.locator("tbody tr[data-thread-id]").count() == 2
    _assert_accessible(page)

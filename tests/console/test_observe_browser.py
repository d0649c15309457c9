"""A thread's logs, events, effects and subagents pages in a real browser (Debian's Chromium
through Playwright) against a live server and worker: a real turn's events and its model
call's log row with tokens, reached through the thread's tabs, and a writer cancelling an
effect and pausing a schedule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.console.conftest import CHAT, Team, log_in
from tests.console.test_browser import _assert_accessible
from tests.live import Live
from threads.models import EffectStatus, Log, Schedule, ScheduledEffect
from threads.runtime.lifecycle import thread_open
from threads.runtime.schedules import schedule_save
from threads.services.effects import effect_schedule

pytestmark = pytest.mark.django_db(transaction=True)

HOUR_MS = 3_600_000


def test_follow_a_real_turn_to_its_log_row_and_its_events(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    page.goto(f"/console/threads/{thread.pk}/")
    page.locator("#connection", has_text="Live").wait_for()
    page.get_by_label("Message").fill("hello observer")
    page.get_by_label("Message").press("Enter")
    page.locator("#turns-list li[data-status=completed]").wait_for()

    page.get_by_role("navigation", name="Thread pages").get_by_role("link", name="Logs").click()
    row = page.locator("tr[data-kind=llm]")
    row.wait_for()
    log = Log.objects.get(thread=thread, kind="llm")
    shown_in = row.locator("[data-field=input_tokens]").inner_text()
    shown_out = row.locator("[data-field=output_tokens]").inner_text()
    totals = page.locator("#usage-totals").inner_text()
    _assert_accessible(page)
    row.locator("summary").click()
    detail = row.locator("pre").inner_text()

    page.get_by_role("navigation", name="Thread pages").get_by_role("link", name="Events").click()
    answer = page.locator("tbody tr", has_text="You said: hello observer").last
    answer.wait_for(state="attached")
    types = page.locator("tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.type)")
    _assert_accessible(page)
    answer.locator("summary").click()
    data = answer.locator("pre").inner_text()
    answer_type = answer.get_attribute("data-type")

    assert log.data["input_tokens"] > 0
    assert (shown_in, shown_out) == (str(log.data["input_tokens"]), str(log.data["output_tokens"]))
    assert f"input {log.data['input_tokens']} tokens" in totals
    assert "cost —" in totals  # the scripted model has no prices
    assert '"finish_reason": "stop"' in detail
    assert types[0] == "thread.created"
    assert {"turn.started", "model.completed", "turn.completed"} <= set(types)
    assert answer_type in {"message.created", "message.updated"}
    assert '"content": "You said: hello observer"' in data


def test_a_writer_cancels_an_effect_and_pauses_a_schedule(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    effect = effect_schedule(thread=thread, name="remind", args={"text": "tea"}, delay_ms=HOUR_MS)
    schedule = schedule_save(
        tenant=team.tenant,
        data={"name": "morning", "thread_id": str(thread.pk), "cron": "0 9 * * *",
              "action": "turn", "input": {"content": "good morning"}},
    )  # fmt: skip
    log_in(page, served, team.member)
    page.goto(f"/console/threads/{thread.pk}/effects/")
    _assert_accessible(page)

    page.get_by_role("button", name="Cancel effect remind").click()
    page.locator(f"tr[data-effect-id='{effect.pk}'][data-status=user_canceled]").wait_for()
    page.get_by_role("button", name="Pause schedule morning").click()
    page.locator(f"tr[data-schedule-id='{schedule.pk}'][data-paused=true]").wait_for()
    page.goto(f"/console/threads/{thread.pk}/subagents/")
    _assert_accessible(page)

    effect.refresh_from_db()
    assert effect.status == EffectStatus.USER_CANCELED
    assert Schedule.objects.get(pk=schedule.pk).paused is True
    assert ScheduledEffect.objects.filter(thread=thread).count() == 1
    assert page.get_by_text("This thread has started no subagents.").is_visible()

"""The run-code playground and the usage page in a real browser (Debian's Chromium through
Playwright) against a live server: a snippet run with Ctrl+Enter shows its result and its
log line, one that throws shows the error at its line and column, and both pages have a
title, landmarks and labelled controls."""

from __future__ import annotations

from typing import Any

import pytest

from tests.console.conftest import CHAT, Team, log_in
from tests.console.test_browser import _assert_accessible
from tests.live import Live
from threads.runtime.lifecycle import thread_open
from usage.ledger import Entry, record

pytestmark = pytest.mark.django_db(transaction=True)


def _run(page: Any, source: str) -> None:
    """Type ``source`` into the code box and run it with Ctrl+Enter, as a person would."""
    box = page.get_by_label("Code", exact=True)
    box.fill(source)
    box.press("Control+Enter")
    page.wait_for_load_state()


def test_run_a_snippet_then_one_that_throws_and_see_result_logs_and_error(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)
    page.goto(f"/console/threads/{thread.pk}/")
    page.get_by_role("link", name="Run code").click()
    page.get_by_role("heading", name="Run code").wait_for()
    _assert_accessible(page)

    _run(page, 'console.log("hello from the sandbox", 42);\nexport default { sum: 1 + 2 };')
    page.locator("#outcome[data-status=success]").wait_for()
    result = page.locator("#result").inner_text()
    log_line = page.locator("#logs li").inner_text()
    kept = page.get_by_label("Code", exact=True).input_value()

    _run(page, 'const a = "one";\nthrow new TypeError("not a number");')
    page.locator("#outcome[data-status=error]").wait_for()
    error = page.locator("#code-error")

    assert '"sum": 3' in result
    assert "hello from the sandbox 42" in log_line
    assert kept.startswith('console.log("hello from the sandbox", 42);')
    assert error.locator(".error-name").inner_text() == "TypeError"
    assert error.locator(".error-message").inner_text() == "not a number"
    assert error.locator(".line").inner_text() == "2"
    assert error.locator(".column").inner_text() == "11"  # as QuickJS reports it
    assert page.locator("#result").count() == 0
    assert page.get_by_label("Code", exact=True).input_value().startswith('const a = "one";')
    _assert_accessible(page)


def test_usage_page_draws_the_chart_and_tables(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    record(Entry(tenant_id=team.tenant.pk, key="call", kind="model", agent=CHAT,
                 thread_id=thread.pk, model="m", input_tokens=900, output_tokens=100,
                 cost_micros=10_000))  # fmt: skip
    log_in(page, served, team.reader)

    page.goto("/console/usage/")
    page.get_by_label("Range").select_option("1")
    page.get_by_role("button", name="Show").click()
    page.get_by_role("img", name="Tokens per hour and agent, last 24 hours").wait_for()

    assert page.locator("#chart-tokens rect").count() == 1
    assert page.locator("#agent-usage tbody tr").first.inner_text().split() == [
        CHAT, "1", "900", "100", "1,000", "0.010000",
    ]  # fmt: skip
    page.locator("#thread-usage tbody th a").click()
    page.wait_for_url(f"**/console/threads/{thread.pk}/")
    page.goto("/console/usage/")
    _assert_accessible(page)

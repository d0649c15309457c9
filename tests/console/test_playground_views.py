"""The run-code playground and the usage page without a browser: code run through the real
sandbox as ``POST …/run-code`` runs it (result, logs, errors at their line and column, the
tenant's lease, the ``code`` log row), scoping by tenant and role, and usage read from the
tenant's usage rollups (model calls only, a cost without prices never shown as 0), with its
budgets and their standing."""

from __future__ import annotations

import html
import itertools
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from common.time import now_us
from tests.console.conftest import CAREFUL, CHAT, Team, agents_for, client_of, team_make
from tests.factories import make_tenant
from threads.models import Log, Thread
from threads.runtime.lifecycle import thread_open
from threads.services.code_endpoint import RUN_CODE_LEASE, code_lease_acquire
from threads.services.leases import lease_count
from usage.ledger import Entry, record
from usage.models import Budget, BudgetCounter

pytestmark = pytest.mark.django_db

DAY_US = 86_400_000_000
_calls = itertools.count()


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


@pytest.fixture
def thread(team: Team) -> Thread:
    return thread_open(tenant=team.tenant, agent_name=CHAT)


def _run(client: Client, thread: Thread, source: str, **fields: Any) -> Any:
    body = {"source": source, "language": "typescript", **fields}
    return client.post(reverse("console:thread-code-run", args=[thread.pk]), body)


def _text(answer: Any) -> str:
    """The page's text as read: inline tags dropped, others a space, entities decoded."""
    inline = re.sub(r"</?(?:span|strong|code|a)\b[^>]*>", "", answer.content.decode())
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", inline)).split())


def _code_logs(thread: Thread) -> list[dict[str, Any]]:
    return [log.data for log in Log.objects.filter(thread=thread, kind="code")]


# Run code -------------------------------------------------------------------------------------


def test_a_snippet_runs_in_the_sandbox_and_its_result_and_logs_are_shown(
    team: Team, thread: Thread
) -> None:
    source = 'console.log("adding", 2, { b: 3 });\nexport default { sum: 2 + 3 };'

    answer = _run(client_of(team.member), thread, source)

    assert answer.status_code == 200
    page = answer.content.decode()
    text = _text(answer)
    assert 'data-status="success"' in page
    assert '"sum": 5' in html.unescape(page)
    assert 'log adding 2 {"b": 3}' in text
    assert re.search(r"ran for \d+\.\d ms", text)
    assert html.escape(source) in page  # the code stays in the box
    assert [(row["status"], row["logs"], row["error"]) for row in _code_logs(thread)] == [
        ("success", 1, None)
    ]
    assert lease_count(tenant_id=team.tenant.pk, name=RUN_CODE_LEASE) == 0


def test_a_throw_is_shown_with_its_name_message_line_and_column(team: Team, thread: Thread) -> None:
    answer = _run(client_of(team.member), thread, "const a = 1;\nthrow new RangeError('too far');")

    text = _text(answer)
    assert 'data-status="error"' in answer.content.decode()
    assert "Error RangeError: too far" in text
    assert "at line 2, column 11 of <runCode>" in text
    assert "Result (JSON)" not in text
    assert _code_logs(thread)[0]["error"] == "RangeError: too far"


def test_a_syntax_error_is_a_link_error_at_its_position(team: Team, thread: Thread) -> None:
    answer = _run(client_of(team.member), thread, "const x = 1;\nconst = ;", language="javascript")

    text = _text(answer)
    assert "Status link_error" in text
    assert "SyntaxError" in text
    assert "at line 2, column" in text


def test_report_values_are_collected_when_asked(team: Team, thread: Thread) -> None:
    answer = _run(
        client_of(team.member), thread, "report({ step: 1 });\nexport default 1", report="on"
    )

    assert 'Reports {"step": 1}' in _text(answer)
    assert _code_logs(thread)[0]["reports"] == 1


def test_code_running_past_the_timeout_given_is_terminated(team: Team, thread: Thread) -> None:
    answer = _run(client_of(team.member), thread, "while (true) {}", timeout="0.5")

    text = _text(answer)
    assert "Status terminated" in text
    assert "the code ran past its budget of 0.5 s" in text
    assert _code_logs(thread)[0]["status"] == "terminated"
    assert lease_count(tenant_id=team.tenant.pk, name=RUN_CODE_LEASE) == 0


def test_a_timeout_past_the_endpoint_budget_is_refused_at_its_field_with_nothing_run(
    team: Team, thread: Thread
) -> None:
    answer = _run(client_of(team.member), thread, "export default 1", timeout="30")

    assert answer.status_code == 200
    assert re.search(
        r'id="timeout-help">at most 10</small>\s*<span class="error" role="alert">'
        r"Ensure this value is less than or equal to 10",
        answer.content.decode(),
    )
    assert _code_logs(thread) == []


def test_a_run_over_the_tenants_limit_is_refused_naming_the_limit_with_nothing_run(
    team: Team, thread: Thread
) -> None:
    running = code_lease_acquire(tenant_id=team.tenant.pk)  # a run of this tenant goes on

    try:
        answer = _run(client_of(team.member), thread, "export default 1")
    finally:
        running.release()

    assert answer.status_code == 200
    assert (
        "this tenant already has 1 run-code call running, the most RUN_CODE_TENANT_CONCURRENCY "
        "allows at once"
    ) in _text(answer)
    assert 'id="outcome"' not in answer.content.decode()
    assert _code_logs(thread) == []


def test_the_playground_has_a_title_a_tab_and_labelled_controls(team: Team, thread: Thread) -> None:
    page = client_of(team.member).get(reverse("console:thread-code", args=[thread.pk]))

    body = page.content.decode()
    assert page.status_code == 200
    assert f"<title>Run code · thread {str(thread.pk)[:8]}… · Standard Agents Console" in body
    assert '<a href="{}" aria-current="page">Run code</a>'.format(
        reverse("console:thread-code", args=[thread.pk])
    ) in body  # fmt: skip
    for name, label in [("source", "Code"), ("language", "Language"),
                        ("timeout", "Timeout (seconds)")]:  # fmt: skip
        assert f'<label for="id_{name}">{label}</label>' in body
    assert '<label for="id_report">Collect report(value) calls</label>' in body
    assert 'class="code"' in body


def test_read_only_member_sees_no_run_control_and_a_forged_run_is_403_with_nothing_run(
    team: Team, thread: Thread
) -> None:
    client = client_of(team.reader)

    page = client.get(reverse("console:thread-code", args=[thread.pk])).content.decode()
    forged = _run(client, thread, "export default 1")

    assert "<textarea" not in page
    assert 'id="run-code"' not in page
    assert "Running code needs the member role" in page
    assert forged.status_code == 403
    assert _code_logs(thread) == []
    assert lease_count(tenant_id=team.tenant.pk, name=RUN_CODE_LEASE) == 0


def test_another_tenants_thread_is_404_in_the_playground_with_nothing_run(team: Team) -> None:
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    client = client_of(team.admin)

    page = client.get(reverse("console:thread-code", args=[theirs.pk]))
    run = _run(client, theirs, "export default 1")

    assert page.status_code == 404
    assert run.status_code == 404
    assert _code_logs(theirs) == []
    assert lease_count(tenant_id=theirs.tenant_id, name=RUN_CODE_LEASE) == 0


# Usage ----------------------------------------------------------------------------------------


def _model_call(thread: Thread, tokens: int, cost: float | None, ago_us: int = 0) -> None:
    """A model call in the ledger as the engine records it, ``ago_us`` in the past."""
    record(Entry(
        tenant_id=thread.tenant_id, key=f"call-{next(_calls)}", kind="model",
        time_zone=thread.tenant.time_zone, agent=thread.agent_name, thread_id=thread.pk,
        model="m", input_tokens=tokens - 10, output_tokens=10,
        cost_micros=None if cost is None else round(cost * 1_000_000),
        created_at=now_us() - ago_us,
    ))  # fmt: skip


def _row(page: str, attribute: str, value: str) -> list[str]:
    """The cells' texts of the table row with ``data-<attribute>="value"``."""
    found = re.search(rf'<tr data-{attribute}="{re.escape(value)}">(.*?)</tr>', page, re.S)
    assert found, f"no row {attribute}={value}"
    cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", found.group(1), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).split()) for cell in cells]


def test_usage_sums_the_tenants_model_calls_per_agent_and_thread(team: Team) -> None:
    chat = thread_open(tenant=team.tenant, agent_name=CHAT)
    chat_two = thread_open(tenant=team.tenant, agent_name=CHAT)
    careful = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    _model_call(chat, 1200, 0.012)
    _model_call(chat, 300, 0.003)
    _model_call(chat_two, 40, None)  # a model without prices
    _model_call(careful, 50, 0.0005)
    _model_call(theirs, 99_999, 9.0)  # another tenant's: never counted
    record(Entry(tenant_id=team.tenant.pk, key="tool", kind="tool", agent=CHAT,
                 thread_id=chat.pk, name="current_time", cost_micros=0))  # fmt: skip

    page = client_of(team.reader).get(reverse("console:usage"), {"days": "7"}).content.decode()

    # A cost with calls without prices is a lower bound, never a plain sum.
    assert _row(page, "agent", CHAT) == [CHAT, "3", "1,510", "30", "1,540", "≥ 0.015000"]
    assert _row(page, "agent", CAREFUL) == [CAREFUL, "1", "40", "10", "50", "0.000500"]
    assert _row(page, "agent", "") == ["All agents", "4", "1,550", "40", "1,590", "≥ 0.015500"]
    assert _row(page, "thread", str(chat.pk)) == [
        f"…{str(chat.pk)[-8:]}", CHAT, "2", "1,480", "20", "1,500", "0.015000", "Chart",
    ]  # fmt: skip
    assert _row(page, "thread", str(chat_two.pk))[-2] == "unknown"
    assert 'title="1 call without a price: the cost is at least this"' in page
    assert 'id="cost-unknown-note"' in page
    assert reverse("console:thread", args=[chat.pk]) in page
    assert str(theirs.pk) not in page
    assert "99,999" not in page


def test_usage_of_one_thread_over_time(team: Team) -> None:
    chat = thread_open(tenant=team.tenant, agent_name=CHAT)
    careful = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    _model_call(chat, 100, 0.001)
    _model_call(chat, 20, 0.002, ago_us=3 * DAY_US)
    _model_call(careful, 50, 0.0005)
    client = client_of(team.reader)
    everyone = client.get(reverse("console:usage"), {"days": "7"}).content.decode()
    chart_url = f"{reverse('console:usage')}?days=7&amp;thread={chat.pk}"

    one = client.get(reverse("console:usage"), {"days": "7", "thread": str(chat.pk)})
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    hidden = client.get(reverse("console:usage"), {"thread": str(theirs.pk)})

    page = one.content.decode()
    assert f'href="{chart_url}"' in everyone
    assert f'Usage of thread <a href="{reverse("console:thread", args=[chat.pk])}">' in page
    assert _row(page, "agent", CHAT)[1:5:3] == ["2", "120"]
    assert 'data-agent="careful"' not in page.split('id="thread-usage"')[0]
    assert page.count('<rect x="') == 4  # two days with calls, in both charts
    assert f'<input type="hidden" name="thread" value="{chat.pk}">' in page
    assert hidden.status_code == 404


def test_usage_keeps_older_calls_out_of_shorter_ranges(team: Team) -> None:
    chat = thread_open(tenant=team.tenant, agent_name=CHAT)
    _model_call(chat, 100, 0.001)
    _model_call(chat, 20, 0.002, ago_us=3 * DAY_US)
    _model_call(chat, 7, 0.004, ago_us=40 * DAY_US)
    client = client_of(team.member)

    day = client.get(reverse("console:usage"), {"days": "1"}).content.decode()
    week = client.get(reverse("console:usage"), {"days": "7"}).content.decode()
    month = client.get(reverse("console:usage"), {"days": "30"}).content.decode()

    assert _row(day, "agent", CHAT)[1:5:3] == ["1", "100"]
    assert _row(week, "agent", CHAT)[1:5:3] == ["2", "120"]
    assert _row(month, "agent", CHAT)[1:5:3] == ["2", "120"]
    assert day.count('<rect x="') == 2  # one bar per chart: tokens and cost
    assert week.count('<rect x="') == 4  # two days with calls, in both charts


def test_usage_chart_is_an_inline_svg_with_a_title_and_labelled_axes(team: Team) -> None:
    chat = thread_open(tenant=team.tenant, agent_name=CHAT)
    careful = thread_open(tenant=team.tenant, agent_name=CAREFUL)
    _model_call(chat, 1000, 0.01)
    _model_call(careful, 500, 0.02)

    page = client_of(team.member).get(reverse("console:usage"), {"days": "7"}).content.decode()

    svg = re.search(r'<svg class="chart" id="chart-tokens".*?</svg>', page, re.S)
    assert svg is not None
    chart = svg.group(0)
    assert 'role="img" aria-labelledby="chart-tokens-title chart-tokens-desc"' in chart
    assert '<title id="chart-tokens-title">Tokens per day and agent, last 7 days</title>' in chart
    assert re.search(r'data-axis="y">Tokens</text>', chart)
    assert re.search(r'data-axis="x">Day \(UTC\)</text>', chart)
    assert ">1,500</text>" in chart  # the y axis reaches the day's stacked total
    assert re.search(rf'data-agent="{CHAT}"><title>{CHAT}, \w+ \d+: 1,000</title>', chart)
    assert re.search(rf'data-agent="{CAREFUL}"><title>{CAREFUL}, \w+ \d+: 500</title>', chart)
    assert "<title>Usage · Standard Agents Console</title>" in page
    assert '<label for="id_days">Range</label>' in page
    assert '<th scope="col">Agent</th>' in page


def test_usage_without_model_calls_says_so(team: Team) -> None:
    page = client_of(team.member).get(reverse("console:usage")).content.decode()

    assert page.count("No model calls in this range.") == 2  # the two tables
    assert page.count("Nothing to chart: no model call in this range reported this figure.") == 2
    assert '<rect x="' not in page


def test_usage_shows_the_tenants_budgets_with_their_standing(team: Team) -> None:
    daily = Budget.objects.create(tenant=team.tenant, name="daily cap", scope="tenant",
                                  window="lifetime", limit_micros=5_000_000)  # fmt: skip
    BudgetCounter.objects.create(tenant=team.tenant, budget=daily, subject="", window_start=0,
                                 spent_micros=1_250_000, reserved_micros=250_000)  # fmt: skip
    Budget.objects.create(tenant=team.tenant, name="agents", scope="agent", window="day",
                          limit_tokens=10_000, operator=True)  # fmt: skip
    Budget.objects.create(tenant=make_tenant(), name="theirs", scope="tenant", window="day",
                          limit_tokens=1)  # fmt: skip

    page = client_of(team.reader).get(reverse("console:usage")).content.decode()

    assert _row(page, "budget", "daily cap") == [
        "daily cap", "tenant", "lifetime", "5.000000 USD", "pause",
        "spent 1.250000 USD; remaining 3.500000 USD",
    ]  # fmt: skip
    assert _row(page, "budget", "agents") == [
        "agents (operator)", "agent (each)", "day", "10,000 tokens", "pause",
        "nothing spent in this window",
    ]  # fmt: skip
    assert "theirs" not in page


def test_usage_without_budgets_says_so(team: Team) -> None:
    page = client_of(team.member).get(reverse("console:usage")).content.decode()

    assert page.count("No budgets: nothing caps this tenant's spend.") == 1

"""A hung beat under ``make run``'s defaults: stopped with ``SIGSTOP``, ``/readyz`` names
beat stale within 30 s (still a 200: the web serves), the launcher's watchdog kills beat and
starts it again, and the restarted beat's sweeper recovers the thread that waited on it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from agents.bundles import bundle_import
from config.beat_watch import HEARTBEAT_EVERY_S, STALE_AFTER_S
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import MakeRun, chat_bundle
from threads.models import TURN_TERMINAL, Message, MessageRole, RunStatus, Thread, Turn
from threads.services.inbox import message_queue
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

REPORTED_WITHIN_S = 30.0


def _turn(thread: Thread) -> Turn:
    return Turn.objects.get(thread=thread)


def _wait_finished(thread: Thread, *, within_s: float) -> Turn:
    deadline = time.monotonic() + within_s
    turn = _turn(thread)
    while turn.status not in TURN_TERMINAL:
        assert time.monotonic() < deadline, f"thread {thread.pk}: the turn never finished"
        time.sleep(0.1)
        turn.refresh_from_db()
    return turn


def _answers(thread: Thread) -> list[str | None]:
    answers = Message.objects.filter(thread=thread, role=MessageRole.ASSISTANT)
    return list(answers.exclude(content=None).values_list("content", flat=True))


def test_a_hung_beat_is_reported_then_restarted_and_its_sweeps_recover_a_stranded_thread(
    run: MakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two threads: ``crashed`` runs on the worker killed while beat is hung (make run's
    takeover sweeps recover it without beat), ``stranded`` has a message whose wake-up its
    sender never sent (as when a process dies between its commit and the send): only
    beat's sweep wakes it, THREAD_SWEEP_GRACE_S after it was queued, so it waits for the
    restarted beat."""
    tenant = make_tenant("hung-beat")
    rules = [{"respond": {"text": "ok: {last_user_message}", "delay_ms": 1000}}]
    bundle_import(tenant=tenant, document=chat_bundle(rules))
    key = make_api_key(tenant).secret
    crashed = thread_create(tenant=tenant, agent_name="chat")
    stranded = thread_create(tenant=tenant, agent_name="chat")
    message_queue(thread=stranded, role="user", content="stranded", wake=False)
    queued = time.monotonic()
    since = run.log_sizes()
    status, body = run.request(
        "POST", f"/api/v1/threads/{crashed.pk}/messages", key=key, body={"content": "crashed"}
    )
    assert status == 202, body
    deadline = time.monotonic() + 10
    while _turn(crashed).status != RunStatus.RUNNING:
        assert time.monotonic() < deadline, "the turn never started"
        time.sleep(0.05)
    holder = next(name for name in run.worker_names()
                  if "threads.drive_thread" in run.log(name)[since[name] :])  # fmt: skip
    time.sleep(max(0.0, queued + 4 - time.monotonic()))  # a live beat wakes it 6 s later
    hung = run.process("beat")
    os.kill(hung.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    run.process(holder).kill()

    while True:
        status, ready = run.request("GET", "/readyz")
        if not ready["checks"]["beat"]["ok"]:
            break
        assert time.monotonic() - stopped < REPORTED_WITHIN_S, ready
        time.sleep(0.25)
    reported_s = time.monotonic() - stopped
    assert (status, ready["status"], ready["message"]) == (200, "degraded", "degraded: beat")
    assert ready["checks"]["beat"]["error"].startswith("no heartbeat for "), ready
    assert [ready["checks"][name]["ok"] for name in ("postgres", "redis")] == [True, True]
    while run.process("beat") is hung:
        assert time.monotonic() - stopped < REPORTED_WITHIN_S + 10, "beat was not restarted"
        time.sleep(0.1)
    restarted_s = time.monotonic() - stopped
    assert _turn(stranded).status == RunStatus.QUEUED, "nothing woke it while beat was hung"
    assert _wait_finished(crashed, within_s=1).status == "completed", "taken over without beat"
    assert _wait_finished(stranded, within_s=30).status == "completed"
    run.wait_ready(since={"beat": since["beat"]})  # /readyz is ok again

    # Stale once the last heartbeat, at most one interval before the stop, is old enough.
    assert STALE_AFTER_S - HEARTBEAT_EVERY_S < reported_s < REPORTED_WITHIN_S, reported_s
    assert restarted_s < STALE_AFTER_S + 5, restarted_s
    assert hung.returncode == -signal.SIGKILL
    assert run.supervisor.kills["beat"] == 1
    assert (_answers(crashed), _answers(stranded)) == (["ok: crashed"], ["ok: stranded"])
    said = capsys.readouterr().err
    assert f"beat (pid {hung.pid}): heartbeat stopped " in said, said
    assert "killing it (SIGKILL)" in said
    beat_log = run.log("beat")[since["beat"] :]
    assert beat_log.count("beat: started (pid ") == 1, "the restarted beat says it started"
    assert f"beat: started (pid {run.process('beat').pid})" in beat_log

"""Redis restarts while flows run: the worker and beat ride through, every message posted is
answered once, no thread is left stuck or failed, and a POST during the outage is a 202 (the
message is kept; the sweeper wakes its thread later) or a 503 with ``Retry-After`` (nothing
was kept), never a 500; retrying with the same ``Idempotency-Key`` makes no duplicate.
After a long outage, flows resume within seconds of Redis's return, and the worker says
the outage once per kind of line, at WARNING.

The web server, the worker and beat run as ``make run`` runs them, on a Valkey of the
test's own that it stops and starts again (append-only persistence on, as in production).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db.models import Min

from agents.bundles import bundle_import
from common.time import now_us
from config.logs import RedisOutageOnce
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import (
    Platform,
    Post,
    PrivateRedis,
    chat_bundle,
    outage_rounds,
    platform_processes,
    post_once,
    unanswered,
)
from threads.models import (
    TURN_ACTIVE,
    TURN_TERMINAL,
    Event,
    Message,
    MessageRole,
    RunStatus,
    Thread,
    Turn,
)
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

ROUNDS = 5
THREADS = 6
DOWN_S = 3.0
SETTLE_TIMEOUT_S = 120.0
ANSWER = "ok: {last_user_message}"
# Two minutes down: kombu's own reconnect backoff (2 s, then 4, 6 … 30 s between tries) found
# Redis back 12.4 s late after such an outage; the capped one (config.celery.BrokerConnection)
# tries every 2 s at most.
LONG_DOWN_S = 120.0
RESUME_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def platform(
    django_db_setup: None, redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    with platform_processes(
        tmp_path_factory.mktemp("processes"), redis_server,
        environment={"THREAD_SWEEP_INTERVAL_S": "1", "THREAD_SWEEP_GRACE_S": "1",
                     "THREAD_LOCK_TTL_MS": "3000"},
    ) as started:  # fmt: skip
        yield started


def test_redis_restarts_lose_nothing_and_stop_no_process(platform: Platform) -> None:
    tenant = make_tenant("outage")
    bundle_import(
        tenant=tenant, document=chat_bundle([{"respond": {"text": ANSWER, "delay_ms": 300}}])
    )
    key = make_api_key(tenant).secret
    threads = [str(thread_create(tenant=tenant, agent_name="chat").pk) for _ in range(THREADS)]

    posts = outage_rounds(
        platform, key, threads, rounds=ROUNDS, down_after_s=0.5,
        outage=lambda: platform.redis.restart(down_s=DOWN_S),
    )  # fmt: skip

    _wait_settled(platform, threads)
    assert platform.worker.alive, f"the worker died:\n{platform.worker.log()[-4000:]}"
    assert "Unrecoverable error" not in platform.worker.log()
    for thread_id in threads:
        said = Message.objects.filter(thread_id=thread_id).exclude(content=None)
        texts = sorted(str(m.content) for m in said if m.role == MessageRole.USER)
        mine = [post.text for post in posts if post.thread_id == thread_id]
        assert texts == sorted(mine), f"thread {thread_id}: each message once"
        ordered = [(m.role, str(m.content)) for m in said.order_by("seq")]
        assert unanswered(ordered) == [], f"thread {thread_id}: unanswered {unanswered(ordered)}"
    failed = Turn.objects.filter(thread_id__in=threads, status=RunStatus.FAILED)
    assert not failed.exists(), [(t.pk, t.error) for t in failed]
    assert not Thread.objects.filter(pk__in=threads, status=RunStatus.FAILED).exists()


def _wait_settled(platform: Platform, threads: list[str]) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        open_turns = Turn.objects.filter(thread_id__in=threads).exclude(status__in=TURN_TERMINAL)
        if not open_turns.exists():
            return
        if time.monotonic() > deadline:
            rows = list(open_turns.values_list("thread_id", "status"))
            raise AssertionError(
                f"turns still open after {SETTLE_TIMEOUT_S} s: {rows}\n"
                f"--- worker log ---\n{platform.worker.log()[-6000:]}"
            )
        time.sleep(0.5)


def test_flows_resume_within_seconds_of_a_long_outage_ending(platform: Platform) -> None:
    tenant = make_tenant("long-outage")
    slow = {"when": {"last_user_contains": "slow"}, "respond": {"text": ANSWER, "delay_ms": 6000}}
    bundle_import(tenant=tenant, document=chat_bundle([slow, {"respond": {"text": ANSWER}}]))
    key = make_api_key(tenant).secret
    threads = [str(thread_create(tenant=tenant, agent_name="chat").pk) for _ in range(3)]
    for thread_id in threads:  # the worker and beat are connected: flows run
        post_once(platform, key, Post(thread_id, "hello"))
    _wait_settled(platform, threads)
    time.sleep(RedisOutageOnce.quiet_s)  # for the logs, an earlier outage is over
    platform.worker.mark()

    for thread_id in threads:  # flows the outage cuts short: their locks expire meanwhile
        post_once(platform, key, Post(thread_id, "slow"))
    _wait_running(threads)
    platform.redis.restart(down_s=LONG_DOWN_S)
    returned_us = now_us()
    resumed_after = _wait_resumed(threads, since_us=returned_us)
    _wait_settled(platform, threads)

    log = platform.worker.log()
    assert max(resumed_after) <= RESUME_WITHIN_S, f"resumed after {resumed_after} s:\n{log[-6000:]}"
    for thread_id in threads:
        answers = Message.objects.filter(thread_id=thread_id, role=MessageRole.ASSISTANT)
        assert sorted(str(m.content) for m in answers) == ["ok: hello", "ok: slow"]
    assert "CRITICAL" not in log, log[-6000:]
    assert "CPendingDeprecationWarning" not in log  # Celery 6's notice, at every lost connection
    for line in ("Couldn't ack", "consumer: Cannot connect"):
        said = [entry for entry in log.splitlines() if line in entry]
        assert len(said) == 1, said
        assert "WARNING" in said[0], said


def _wait_running(threads: list[str]) -> None:
    deadline = time.monotonic() + 30
    while Turn.objects.filter(thread_id__in=threads, status__in=TURN_ACTIVE).count() < len(threads):
        assert time.monotonic() < deadline, "the flows did not start"
        time.sleep(0.05)


def _wait_resumed(threads: list[str], *, since_us: int) -> list[float]:
    """Seconds from ``since_us`` to each thread's first event after it (the drive that
    takes its turn over writes it)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        firsts = dict(
            Event.objects.filter(thread_id__in=threads, created_at__gte=since_us)
            .values_list("thread_id")
            .annotate(first=Min("created_at"))
        )
        if len(firsts) == len(threads):
            return [(first - since_us) / 1e6 for first in firsts.values()]
        assert time.monotonic() < deadline, f"no event since Redis returned on {threads}"
        time.sleep(0.1)

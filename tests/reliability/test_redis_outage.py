"""Redis restarts while flows run: the worker and beat ride through, every message posted is
answered once, no thread is left stuck or failed, and a POST during the outage is a 202 (the
message is kept; the sweeper wakes its thread later) or a 503 with ``Retry-After`` (nothing
was kept), never a 500; retrying with the same ``Idempotency-Key`` makes no duplicate.

The web server, the worker and beat run as ``make run`` runs them, on a Valkey of the
test's own that it stops and starts again (append-only persistence on, as in production).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agents.bundles import bundle_import
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import (
    Platform,
    PrivateRedis,
    chat_bundle,
    outage_rounds,
    platform_processes,
)
from threads.models import TURN_TERMINAL, Message, MessageRole, RunStatus, Thread, Turn
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

ROUNDS = 5
THREADS = 6
DOWN_S = 3.0
SETTLE_TIMEOUT_S = 120.0
ANSWER = "ok: {last_user_message}"


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
        answered = {str(m.content).removeprefix("ok: ") for m in said
                    if m.role == MessageRole.ASSISTANT}  # fmt: skip
        assert set(mine) <= answered, f"thread {thread_id}: unanswered {set(mine) - answered}"
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

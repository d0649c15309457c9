"""Redis restarts while flows run: the worker and beat ride through, every message posted is
answered once, no thread is left stuck or failed, and a POST during the outage is a 202 (the
message is kept; the sweeper wakes its thread later) or a 503 with ``Retry-After`` (nothing
was kept), never a 500; retrying with the same ``Idempotency-Key`` makes no duplicate.

The web server, the worker and beat run as ``make run`` runs them, on a Valkey of the
test's own that it stops and starts again (append-only persistence on, as in production).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from agents.bundles import bundle_import
from tenancy.models import Tenant
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import Platform, PrivateRedis, platform_processes, private_redis
from threads.models import TURN_TERMINAL, Message, MessageRole, RunStatus, Thread, Turn
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

ROUNDS = 5
THREADS = 6
DOWN_S = 3.0
SETTLE_TIMEOUT_S = 120.0
ANSWER = "ok: {last_user_message}"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    with private_redis(tmp_path_factory.mktemp("valkey")) as server:
        yield server


@pytest.fixture(scope="module")
def platform(
    django_db_setup: None, redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    with platform_processes(
        tmp_path_factory.mktemp("processes"), redis_server,
        environment={"THREAD_SWEEP_INTERVAL_S": "1", "THREAD_LOCK_TTL_MS": "3000"},
    ) as started:  # fmt: skip
        yield started


@dataclass
class Post:
    """One message a client means to post once, retried with its key until accepted."""

    thread_id: str
    text: str
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    statuses: list[int] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return 202 in self.statuses


def _define(tenant: Tenant) -> None:
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                        "config": {"rules": [{"respond": {"text": ANSWER, "delay_ms": 300}}]}}],
            "prompts": [{"name": "p", "tool_description": "The chat prompt",
                         "prompt": "You help.", "model": "m", "include_chat": True}],
            "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip


def _post(platform: Platform, key: str, post: Post) -> None:
    status, headers, body = platform.request(
        "POST", f"/api/v1/threads/{post.thread_id}/messages", key=key,
        body={"content": post.text}, headers={"Idempotency-Key": post.key}, timeout=30,
    )  # fmt: skip
    post.statuses.append(status)
    assert status in (202, 503), f"POST answered {status}: {body}"
    if status == 503:
        assert int(headers["retry-after"]) >= 1, headers
        assert body["error"]["code"], body


def test_redis_restarts_lose_nothing_and_stop_no_process(platform: Platform) -> None:
    tenant = make_tenant("outage")
    _define(tenant)
    key = make_api_key(tenant).secret
    threads = [str(thread_create(tenant=tenant, agent_name="chat").pk) for _ in range(THREADS)]
    posts: list[Post] = []
    counter = itertools.count()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for _round in range(ROUNDS):
            batch = [Post(thread_id, f"m{next(counter)}") for thread_id in threads]
            posts.extend(batch)
            sent = [pool.submit(_post, platform, key, post) for post in batch]
            time.sleep(0.2)  # flows are in flight (each model call takes 300 ms)
            outage = pool.submit(platform.redis.restart, down_s=DOWN_S)
            during = [Post(thread_id, f"m{next(counter)}") for thread_id in threads[:2]]
            posts.extend(during)
            time.sleep(0.5)  # the server is down now: these land in the outage
            sent += [pool.submit(_post, platform, key, post) for post in during]
            outage.result()
            for future in sent:
                future.result()
            # A client retries what was refused, with the same key, until it is accepted;
            # and retries one accepted post too, which must not make a second message.
            for post in [p for p in posts if not p.accepted] + posts[-1:]:
                deadline = time.monotonic() + 30
                while True:
                    _post(platform, key, post)
                    if post.accepted or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                assert post.accepted, f"{post.text} still refused: {post.statuses}"
            assert platform.worker.alive, f"the worker died:\n{platform.worker.log()[-4000:]}"
            assert platform.beat.poll() is None, "beat died"

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

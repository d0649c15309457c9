"""Waking a thread: a plain wake-up is the message Celery's ``send_task`` would write, pushed
in one command; a wake-up that cannot be sent is dropped for the sweeper, never raised."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from celery import current_app

from common.redis_client import redis_client
from tests.worker import private_queue, queue_delete, tasks_routed_to
from threads.services import wakeups
from threads.services.wakeups import DRIVE_TASK, wake_thread

# What differs between two messages of the same task: its id and the transport's tag.
IDS = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"),
       ("properties", "delivery_tag")}  # fmt: skip


@pytest.fixture
def queue() -> Iterator[str]:
    with tasks_routed_to(private_queue()) as name:
        yield name
    queue_delete(name)


def _pop(queue: str) -> dict[str, Any]:
    raw = cast("bytes | None", redis_client().rpop(queue))
    assert raw is not None, f"nothing in {queue}"
    return dict(json.loads(raw))


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with its ids blanked and its body decoded."""
    shaped: dict[str, Any] = {
        part: {key: (None if (part, key) in IDS else value) for key, value in section.items()}
        for part, section in message.items()
        if isinstance(section, dict)
    }
    shaped.update({key: value for key, value in message.items() if not isinstance(value, dict)})
    shaped["body"] = json.loads(base64.b64decode(message["body"]))
    return shaped


def test_a_wake_up_is_the_message_send_task_writes(queue: str) -> None:
    current_app.send_task(DRIVE_TASK, args=["thread-1", "tenant-1"])
    assert wake_thread("thread-1", "tenant-1") is True
    ours, celerys = _pop(queue), _pop(queue)  # LPUSH: the newest is popped last
    assert _without_ids(ours) == _without_ids(celerys)
    assert (
        ours["headers"]["id"]
        == ours["headers"]["root_id"]
        == (ours["properties"]["correlation_id"])
    )
    assert ours["headers"]["id"] != celerys["headers"]["id"]
    assert ours["properties"]["delivery_tag"] != celerys["properties"]["delivery_tag"]


def test_a_wake_up_with_a_countdown_goes_through_celery(queue: str) -> None:
    """An eta is Celery's to schedule (the worker holds the message until then)."""
    assert wake_thread("thread-2", "tenant-2", countdown=30) is True
    message = _pop(queue)
    assert message["headers"]["task"] == DRIVE_TASK
    assert message["headers"]["eta"] is not None
    assert json.loads(base64.b64decode(message["body"]))[0] == ["thread-2", "tenant-2"]


def test_a_wake_up_the_broker_refuses_is_dropped_for_the_sweeper(
    queue: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Unreachable:
        def lpush(self, *_args: object) -> None:
            raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(wakeups, "redis_client", Unreachable)
    assert wake_thread("thread-3", "tenant-3") is False
    assert "the sweeper will wake it" in caplog.text
    assert redis_client().llen(queue) == 0

"""Message writes (threads.services.messages): seq allocation under concurrent writers."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from tenancy.models import Tenant
from tests.factories import make_thread
from tests.support import ContextThread
from threads.models import Message
from threads.services.message_shapes import history_json, message_json
from threads.services.messages import message_inject


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_get_consecutive_unique_seqs(tenant: Tenant) -> None:
    """Twenty writers at once (API injects and a flow's writes look alike here): each message
    takes the next value of the thread's counter under its row lock, so the seqs are exactly
    1..20 with no collision, whatever order the writers commit in."""
    thread = make_thread(tenant)
    start = threading.Barrier(20)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            start.wait()
            message_inject(thread=thread, role="user", content=f"m{n}")
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    writers = [ContextThread(target=write, args=(n,)) for n in range(20)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(30)

    assert errors == []
    seqs = sorted(Message.objects.filter(thread=thread).values_list("seq", flat=True))
    assert seqs == list(range(1, 21))
    thread.refresh_from_db()
    assert thread.message_seq == 20


@pytest.mark.django_db
def test_the_history_read_gives_what_message_json_gives_for_top_level_finished_rows(
    tenant: Tenant,
) -> None:
    thread = make_thread(tenant)
    first = message_inject(thread=thread, role="user", content="héllo ✓", side="b",
                           metadata={"k": [1, 2.5, None]},
                           attachments=[{"path": "/a.png", "mime_type": "image/png"}])  # fmt: skip
    issuer = message_inject(
        thread=thread, role="assistant", content=None, side="a", name="bot",
        tool_calls=[{"id": "c1", "type": "function",
                     "function": {"name": "echo", "arguments": "{\"t\": \"é\"}"}}],
    )  # fmt: skip
    message_inject(thread=thread, role="tool", content="nested", parent=issuer)
    message_inject(thread=thread, role="tool", content="ok", tool_call_id="c1",
                   tool_status="success", side="a")  # fmt: skip
    message_inject(thread=thread, role="assistant", content=None, status="pending", side="a")

    expected = [
        message_json(row)
        for row in Message.objects.filter(thread=thread, depth=0)
        .exclude(status="pending")
        .order_by("seq")
    ]
    assert [row["seq"] for row in expected] == [1, 2, 4]
    assert history_json(thread=thread) == expected
    assert history_json(thread=thread, after_seq=first.seq) == expected[1:]

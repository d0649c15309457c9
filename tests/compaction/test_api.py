"""compaction/api.py: ``/api/v1/threads/{id}/compactions``, ``…/{compaction_id}`` and
``…/{compaction_id}/revert``, through the API with real rows; a revert changes the history
the next step reads (compaction.history)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from common.time import now_us
from compaction.compact import compaction_json
from compaction.history import is_marker, overlay_history
from compaction.models import Compaction, CompactionStatus
from compaction.services import compaction_revert
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.support import ContextThread
from threads.models import Event, Thread
from threads.services.messages import message_inject

pytestmark = pytest.mark.django_db

BASE_US = 1_700_000_000_000_000


def _list(thread: Thread) -> str:
    return f"/api/v1/threads/{thread.id}/compactions"


def _one(thread: Thread, compaction: Compaction) -> str:
    return f"{_list(thread)}/{compaction.id}"


def _revert(thread: Thread, compaction: Compaction) -> str:
    return f"{_one(thread, compaction)}/revert"


def _make(
    thread: Thread,
    n: int,
    *,
    side: str = "a",
    status: str = CompactionStatus.SUPERSEDED,
    from_seq: int = 2,
    to_seq: int = 3,
    extends: Compaction | None = None,
) -> Compaction:
    """A summary compaction created ``n`` microseconds after BASE_US."""
    return Compaction.objects.create(
        tenant=thread.tenant, thread=thread, side=side, tier="summary", trigger="proactive",
        from_seq=from_seq, to_seq=to_seq, first_user_seq=1,
        summary={"intent": f"intent {n}", "decisions": [], "state": [], "artifacts": [],
                 "open_items": []},
        summary_text=f"Summary {n} of messages {from_seq} to {to_seq}", status=status,
        extends=extends, created_at=BASE_US + n,
    )  # fmt: skip


def _chain(thread: Thread) -> tuple[Compaction, Compaction, Compaction]:
    """Side a's history of compactions: a reverted one, then ``older`` (superseded) and
    ``newer`` (active), which extends it."""
    reverted = _make(thread, 0, status=CompactionStatus.REVERTED, to_seq=2)
    older = _make(thread, 1, to_seq=3)
    newer = _make(thread, 2, status=CompactionStatus.ACTIVE, to_seq=4, extends=older)
    return reverted, older, newer


def _statuses(*compactions: Compaction) -> list[str]:
    return [Compaction.objects.get(pk=c.pk).status for c in compactions]


def _updates(thread: Thread) -> list[dict[str, Any]]:
    return list(
        Event.objects.filter(thread=thread, type="thread.updated")
        .order_by("sequence")
        .values_list("payload", flat=True)
    )


# Reading ----------------------------------------------------------------------------------------


def test_the_list_pages_newest_first_in_the_list_shape(member: APIClient, thread: Thread) -> None:
    made = [_make(thread, n) for n in range(5)]

    first = member.get(_list(thread), {"limit": "2"}).json()
    second = member.get(first["next"]).json()
    last = member.get(second["next"]).json()
    back = member.get(last["previous"]).json()

    assert set(first) == {"results", "next", "previous"}
    ids = [str(c.id) for c in reversed(made)]
    assert ([c["id"] for c in first["results"]], first["previous"]) == (ids[:2], None)
    assert [c["id"] for c in second["results"]] == ids[2:4]
    assert ([c["id"] for c in last["results"]], last["next"]) == (ids[4:], None)
    assert back == second


def test_side_and_status_filter_the_list_and_ride_along_the_pages(
    member: APIClient, thread: Thread
) -> None:
    a_old = _make(thread, 0)
    b_old = _make(thread, 1, side="b")
    a_reverted = _make(thread, 2, status=CompactionStatus.REVERTED)
    a_new = _make(thread, 3)
    a_active = _make(thread, 4, status=CompactionStatus.ACTIVE)
    b_active = _make(thread, 5, side="b", status=CompactionStatus.ACTIVE)

    def listed(query: dict[str, str]) -> list[str]:
        page = member.get(_list(thread), {**query, "limit": "1"}).json()
        ids = [c["id"] for c in page["results"]]
        while page["next"]:
            page = member.get(page["next"]).json()
            ids += [c["id"] for c in page["results"]]
        return ids

    assert listed({"side": "a", "status": "superseded"}) == [str(a_new.id), str(a_old.id)]
    assert listed({"side": "b"}) == [str(b_active.id), str(b_old.id)]
    assert listed({"status": "active"}) == [str(b_active.id), str(a_active.id)]
    assert listed({"status": "reverted"}) == [str(a_reverted.id)]


def test_other_threads_compactions_are_not_listed(
    member: APIClient, tenant: Tenant, thread: Thread
) -> None:
    mine = _make(thread, 0)
    _make(make_thread(tenant), 1)

    listed = member.get(_list(thread)).json()

    assert [c["id"] for c in listed["results"]] == [str(mine.id)]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"order": "asc"}, "order"),
        ({"sid": "a"}, "sid"),
        ({"side": "c"}, "side"),
        ({"status": "gone"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "bogus"}, "cursor"),
    ],
)
def test_a_bad_or_unknown_query_parameter_is_400_naming_it(
    member: APIClient, thread: Thread, query: dict[str, str], field: str
) -> None:
    response = member.get(_list(thread), query)

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)


def test_an_unknown_query_parameter_is_named_with_the_known_ones(
    member: APIClient, thread: Thread
) -> None:
    error = member.get(_list(thread), {"order": "asc"}).json()["error"]

    assert error["message"] == (
        "unknown query parameter 'order' (known: limit, cursor, side, status)"
    )


def test_a_compaction_answers_as_listed_for_any_role(
    tenant: Tenant, client_for: Callable[..., APIClient], thread: Thread
) -> None:
    _reverted, older, newer = _chain(thread)
    reader = client_for(tenant, Role.READ_ONLY)

    one = reader.get(_one(thread, newer))
    listed = reader.get(_list(thread)).json()["results"]

    assert one.status_code == 200, one.content
    assert one.json() == listed[0] == compaction_json(newer)
    assert one.json() == {
        "id": str(newer.id), "thread_id": str(thread.id), "side": "a", "status": "active",
        "tier": "summary", "trigger": "proactive", "from_seq": 2, "to_seq": 4,
        "first_user_seq": 1, "cleared_through": 0, "cleared_over": 0,
        "summary": {"intent": "intent 2", "decisions": [], "state": [], "artifacts": [],
                    "open_items": []},
        "summary_text": "Summary 2 of messages 2 to 4", "model": None, "tokens_before": 0,
        "tokens_after": 0, "input_tokens": 0, "output_tokens": 0, "cost_micros": None,
        "policy_version": "", "extends": str(older.id), "turn_id": None, "error": None,
        "created_at": BASE_US + 2, "reverted_at": None,
    }  # fmt: skip


# Isolation --------------------------------------------------------------------------------------


def test_another_tenants_thread_and_compactions_are_404(
    member: APIClient, thread: Thread, other_thread: Thread
) -> None:
    theirs = _make(other_thread, 0, status=CompactionStatus.ACTIVE)

    answers = [
        member.get(_list(other_thread)),
        member.get(_one(other_thread, theirs)),
        member.post(_revert(other_thread, theirs), {}, format="json"),
        member.get(_one(thread, theirs)),
        member.post(_revert(thread, theirs), {}, format="json"),
    ]

    assert [(r.status_code, r.json()["error"]["code"]) for r in answers] == [(404, "not_found")] * 5
    assert _statuses(theirs) == ["active"]
    assert _updates(other_thread) == []


def test_another_threads_compaction_is_404_in_this_thread(
    member: APIClient, tenant: Tenant, thread: Thread
) -> None:
    elsewhere = make_thread(tenant)
    theirs = _make(elsewhere, 0, status=CompactionStatus.ACTIVE)

    got = member.get(_one(thread, theirs))
    reverted = member.post(_revert(thread, theirs), {}, format="json")

    assert (got.status_code, reverted.status_code) == (404, 404)
    assert got.json()["error"]["message"] == f"no compaction {theirs.id} in this thread"
    assert _statuses(theirs) == ["active"]


# Reverting --------------------------------------------------------------------------------------


def test_reverting_the_active_compaction_reactivates_the_one_it_extends(
    member: APIClient, thread: Thread
) -> None:
    reverted, older, newer = _chain(thread)
    before = now_us()

    response = member.post(_revert(thread, newer), {}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    newer.refresh_from_db()
    older.refresh_from_db()
    assert (newer.status, older.status) == ("reverted", "active")
    assert newer.reverted_at is not None
    assert before <= newer.reverted_at <= now_us()
    assert older.reverted_at is None
    assert body == {"reverted": compaction_json(newer), "active": compaction_json(older)}
    assert _statuses(reverted) == ["reverted"]
    assert _updates(thread) == [{"id": str(thread.id), "fields": ["compactions"]}]


def test_reverting_the_first_compaction_leaves_its_side_without_one(
    member: APIClient, thread: Thread
) -> None:
    only = _make(thread, 0, status=CompactionStatus.ACTIVE)
    other_side = _make(thread, 1, side="b", status=CompactionStatus.ACTIVE)

    response = member.post(_revert(thread, only))  # no body at all

    assert response.status_code == 200, response.content
    assert response.json()["active"] is None
    assert response.json()["reverted"]["status"] == "reverted"
    assert _statuses(only, other_side) == ["reverted", "active"]
    assert _updates(thread) == [{"id": str(thread.id), "fields": ["compactions"]}]


def test_reverting_twice_walks_back_down_the_chain(member: APIClient, thread: Thread) -> None:
    _reverted, older, newer = _chain(thread)

    first = member.post(_revert(thread, newer), {}, format="json")
    second = member.post(_revert(thread, older), {}, format="json")

    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["active"] is None
    assert _statuses(older, newer) == ["reverted", "reverted"]
    assert len(_updates(thread)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_revert_waits_for_one_in_progress_then_is_409(
    tenant: Tenant, client_for: Callable[..., APIClient], thread: Thread
) -> None:
    """The row is locked before its status is read: a revert arriving while another is
    uncommitted waits for it, then finds the compaction reverted, so the previous one is
    reactivated and the event published once."""
    _reverted, older, newer = _chain(thread)
    member = client_for(tenant, Role.MEMBER)
    answers: list[int] = []

    def revert() -> None:
        try:
            answers.append(member.post(_revert(thread, newer), {}, format="json").status_code)
        finally:
            connection.close()

    second = ContextThread(target=revert)
    with transaction.atomic():
        compaction_revert(thread=thread, compaction_id=newer.id)
        second.start()
        second.join(0.5)
        waited = second.is_alive()
    second.join(30)

    assert waited
    assert answers == [409]
    assert _statuses(older, newer) == ["active", "reverted"]
    assert len(_updates(thread)) == 1


@pytest.mark.parametrize("which", ["superseded", "reverted"])
def test_reverting_a_compaction_that_is_not_active_is_409_naming_the_active_one(
    member: APIClient, thread: Thread, which: str
) -> None:
    reverted, older, newer = _chain(thread)
    target = older if which == "superseded" else reverted

    response = member.post(_revert(thread, target), {}, format="json")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": f"compaction {target.id} is {which}; only the active one can be reverted "
        f"(side a's active compaction is {newer.id})",
    }
    assert _statuses(reverted, older, newer) == ["reverted", "superseded", "active"]
    assert _updates(thread) == []


def test_reverting_when_the_side_has_no_active_compaction_is_409_saying_so(
    member: APIClient, thread: Thread
) -> None:
    gone = _make(thread, 0, status=CompactionStatus.REVERTED)

    response = member.post(_revert(thread, gone), {}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["message"] == (
        f"compaction {gone.id} is reverted; only the active one can be reverted "
        "(side a has no active compaction)"
    )


@pytest.mark.parametrize("body", [{"side": "a"}, {"zz_unknown_field": 1}])
def test_a_revert_body_with_a_key_is_400_naming_it(
    member: APIClient, thread: Thread, body: dict[str, Any]
) -> None:
    _reverted, older, newer = _chain(thread)

    response = member.post(_revert(thread, newer), body, format="json")

    assert response.status_code == 400
    (key,) = body
    error = response.json()["error"]
    assert (error["field"], error["message"]) == (key, f"unknown field {key!r} (known: none)")
    assert _statuses(older, newer) == ["superseded", "active"]
    assert _updates(thread) == []


def test_a_read_only_key_cannot_revert(
    tenant: Tenant, client_for: Callable[..., APIClient], thread: Thread
) -> None:
    _reverted, older, newer = _chain(thread)
    reader = client_for(tenant, Role.READ_ONLY)

    response = reader.post(_revert(thread, newer), {}, format="json")

    assert (response.status_code, response.json()["error"]["code"]) == (403, "forbidden")
    assert _statuses(older, newer) == ["superseded", "active"]
    assert _updates(thread) == []


def test_only_post_reverts(member: APIClient, thread: Thread) -> None:
    _reverted, _older, newer = _chain(thread)

    answers = [member.get(_revert(thread, newer)), member.delete(_one(thread, newer))]

    assert [r.status_code for r in answers] == [405, 405]
    assert _statuses(newer) == ["active"]


# What the next step sees ------------------------------------------------------------------------


def _seen(thread: Thread) -> list[int | str]:
    """Side a's history as a step reads it: message seqs, the marker as ``marker <to_seq>``."""
    return [
        f"marker {m['metadata']['to_seq']}" if is_marker(m) else int(m["seq"])
        for m in overlay_history(thread=thread, side="a", after_seq=0)
    ]


def test_after_a_revert_the_history_shows_what_the_reactivated_overlay_leaves_then_all(
    member: APIClient, thread: Thread
) -> None:
    for n, role in enumerate(["user", "assistant", "user", "assistant", "user", "assistant"]):
        message_inject(thread=thread, role=role, content=f"message {n + 1}")
    older = _make(thread, 1, from_seq=2, to_seq=3)
    newer = _make(thread, 2, status=CompactionStatus.ACTIVE, from_seq=2, to_seq=4, extends=older)
    marker = next(m for m in overlay_history(thread=thread, side="a", after_seq=0) if is_marker(m))

    compacted = _seen(thread)
    member.post(_revert(thread, newer), {}, format="json")
    once = _seen(thread)
    member.post(_revert(thread, older), {}, format="json")
    twice = _seen(thread)

    assert marker["metadata"]["status_kind"] == "compaction"
    assert marker["metadata"]["compaction_id"] == str(newer.id)
    assert marker["content"] == "Summary 2 of messages 2 to 4"
    assert compacted == [1, "marker 4", 5, 6]
    assert once == [1, "marker 3", 4, 5, 6]
    assert twice == [1, 2, 3, 4, 5, 6]

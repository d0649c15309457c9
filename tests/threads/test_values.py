"""threads/services/values.py: the durable per-thread KV store."""

from __future__ import annotations

import enum
import math
from collections import OrderedDict
from typing import Any

import pytest
from django.db import transaction

from common.errors import Conflict, DecryptionFailed, LimitExceeded, NotFound, ValidationFailed
from tenancy.encryption import secret_encrypt
from tests.threads.conftest import make_thread
from threads.models import Thread, ThreadValue
from threads.services import values
from threads.services.values import (
    MAX_KEY_LENGTH,
    MAX_VALUE_BYTES,
    MAX_VALUE_DEPTH,
    CorruptValue,
    StoredValue,
    value_delete,
    value_get,
    value_list,
    value_of,
    value_rename,
    value_serialize,
    value_set,
    value_stored,
)

pytestmark = pytest.mark.django_db


class Color(enum.IntEnum):
    RED = 1


def _violation(value: Any) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        value_serialize(value)
    assert caught.value.field == "value"
    return caught.value


def test_set_returns_the_change_and_get_reads_it_back(thread: Thread) -> None:
    change = value_set(thread=thread, key="plan", value={"steps": [1, 2.5, "three", True, None]})

    assert (change.key, change.deleted) == ("plan", False)
    assert value_get(thread=thread, key="plan") == {"steps": [1, 2.5, "three", True, None]}
    row = ThreadValue.objects.get(thread=thread, key="plan")
    assert row.updated_at == change.updated_at
    assert row.size == len(b'{"steps":[1,2.5,"three",true,null]}')


def test_upsert_replaces_the_value_and_advances_updated_at(thread: Thread) -> None:
    first = value_set(thread=thread, key="n", value=1)
    second = value_set(thread=thread, key="n", value=2)

    assert value_get(thread=thread, key="n") == 2
    assert second.updated_at >= first.updated_at
    assert ThreadValue.objects.filter(thread=thread).count() == 1


def test_setting_none_deletes_and_reports_a_deletion(thread: Thread) -> None:
    value_set(thread=thread, key="gone", value="x")

    change = value_set(thread=thread, key="gone", value=None)

    assert (change.key, change.deleted) == ("gone", True)
    assert value_get(thread=thread, key="gone") is None
    assert not ThreadValue.objects.filter(thread=thread, key="gone").exists()


def test_delete_of_a_missing_key_is_not_an_error(thread: Thread) -> None:
    assert value_delete(thread=thread, key="never").deleted is True


def test_falsy_values_are_stored_not_deleted(thread: Thread) -> None:
    for key, value in [("zero", 0), ("false", False), ("empty", ""), ("list", []), ("obj", {})]:
        value_set(thread=thread, key=key, value=value)

    got = {
        key: value_get(thread=thread, key=key) for key in ["zero", "false", "empty", "list", "obj"]
    }
    assert got == {"zero": 0, "false": False, "empty": "", "list": [], "obj": {}}
    assert [type(got["zero"]), type(got["false"])] == [int, bool]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (math.nan, "$"),
        ({"a": [0, 1, {"b": math.inf}]}, "$.a[2].b"),
        ({"a": [0, 1, {"b": -math.inf}]}, "$.a[2].b"),
        ({"odd key": {1: "x"}}, '$["odd key"]'),
        ([(1, 2)], "$[0]"),
        ({"s": {1, 2}}, "$.s"),
        ({"raw": b"bytes"}, "$.raw"),
        ({"obj": object()}, "$.obj"),
        ({"enum": Color.RED}, "$.enum"),
        (OrderedDict(a=1), "$"),
        ({"s": "\ud800"}, "$.s"),
    ],
)
def test_non_json_values_are_rejected_with_a_dollar_rooted_path(value: Any, path: str) -> None:
    error = _violation(value)

    assert error.details == {"path": path}
    assert f"at {path}:" in error.message


def test_a_cycle_is_rejected_at_the_place_it_closes() -> None:
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)

    assert _violation(loop).details == {"path": "$.a[1]"}


def test_a_container_shared_by_siblings_is_not_a_cycle() -> None:
    shared = [1, 2]

    assert value_serialize({"x": shared, "y": shared}) == b'{"x":[1,2],"y":[1,2]}'


def test_rejected_values_leave_the_store_untouched(thread: Thread) -> None:
    value_set(thread=thread, key="k", value="old")

    with pytest.raises(ValidationFailed):
        value_set(thread=thread, key="k", value={"bad": math.nan})

    assert value_get(thread=thread, key="k") == "old"


def test_key_length_cap_is_named(thread: Thread) -> None:
    value_set(thread=thread, key="k" * MAX_KEY_LENGTH, value=1)

    with pytest.raises(LimitExceeded) as caught:
        value_set(thread=thread, key="k" * (MAX_KEY_LENGTH + 1), value=1)

    assert "MAX_KEY_LENGTH is 255" in caught.value.message
    assert caught.value.field == "key"


@pytest.mark.parametrize("key", ["", "nul\x00key", 7])
def test_bad_keys_are_rejected_naming_key(thread: Thread, key: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        value_set(thread=thread, key=key, value=1)

    assert caught.value.field == "key"


def test_value_size_cap_is_named_and_counts_utf8_bytes(thread: Thread) -> None:
    fits = "x" * (MAX_VALUE_BYTES - 2)  # the two quotes make it exactly the cap
    value_set(thread=thread, key="big", value=fits)

    with pytest.raises(LimitExceeded) as caught:
        value_set(thread=thread, key="big", value="é" * (MAX_VALUE_BYTES // 2))

    assert f"the cap MAX_VALUE_BYTES is {MAX_VALUE_BYTES}" in caught.value.message
    assert ThreadValue.objects.get(thread=thread, key="big").size == MAX_VALUE_BYTES


def test_nesting_depth_cap_is_named() -> None:
    deep: Any = 1
    for _ in range(MAX_VALUE_DEPTH + 1):
        deep = [deep]

    with pytest.raises(LimitExceeded) as caught:
        value_serialize(deep)

    assert f"MAX_VALUE_DEPTH ({MAX_VALUE_DEPTH})" in caught.value.message


def test_key_count_cap_refuses_new_keys_but_allows_updates(
    thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(values, "MAX_KEYS_PER_THREAD", 2)
    value_set(thread=thread, key="a", value=1)
    value_set(thread=thread, key="b", value=1)

    with pytest.raises(LimitExceeded) as caught:
        value_set(thread=thread, key="c", value=1)
    value_set(thread=thread, key="a", value=2)

    assert "the cap MAX_KEYS_PER_THREAD is 2" in caught.value.message
    assert value_get(thread=thread, key="a") == 2
    assert value_get(thread=thread, key="c") is None


def test_list_orders_by_key_and_searches_keys_case_insensitively(thread: Thread) -> None:
    for key in ["b:2", "a:1", "c:3", "B:4"]:
        value_set(thread=thread, key=key, value={"k": key})

    listed = value_list(thread=thread)
    found = value_list(thread=thread, search="b")

    assert [row.key for row in listed] == ["B:4", "a:1", "b:2", "c:3"]  # "B:4" sorts first
    assert value_of(thread=thread, row=listed[1]) == StoredValue(
        "a:1", {"k": "a:1"}, 11, listed[1].updated_at
    )
    assert sorted(row.key for row in found) == ["B:4", "b:2"]


def test_rename_moves_the_value_and_reports_both_keys(thread: Thread) -> None:
    value_set(thread=thread, key="old", value=[1, 2])

    changes = value_rename(thread=thread, key="old", new_key="new")

    assert [(c.key, c.deleted) for c in changes] == [("old", True), ("new", False)]
    assert value_get(thread=thread, key="old") is None
    assert value_get(thread=thread, key="new") == [1, 2]


def test_rename_of_a_missing_key_is_not_found(thread: Thread) -> None:
    with pytest.raises(NotFound):
        value_rename(thread=thread, key="absent", new_key="x")


def test_rename_onto_an_existing_key_is_a_conflict(thread: Thread) -> None:
    value_set(thread=thread, key="a", value=1)
    value_set(thread=thread, key="b", value=2)

    with pytest.raises(Conflict) as caught:
        value_rename(thread=thread, key="a", new_key="b")

    assert caught.value.field == "new_key"
    assert (value_get(thread=thread, key="a"), value_get(thread=thread, key="b")) == (1, 2)


def test_stored_bytes_are_ciphertext_bound_to_thread_and_key(thread: Thread) -> None:
    value_set(thread=thread, key="a", value="alpha-plaintext")
    value_set(thread=thread, key="b", value="beta")
    row_a = ThreadValue.objects.get(thread=thread, key="a")

    assert b"alpha-plaintext" not in bytes(row_a.value_encrypted)
    ThreadValue.objects.filter(thread=thread, key="b").update(value_encrypted=row_a.value_encrypted)
    with pytest.raises(DecryptionFailed):
        value_get(thread=thread, key="b")


def test_a_row_moved_to_another_thread_does_not_decrypt(thread: Thread) -> None:
    sibling = make_thread(thread.tenant)
    value_set(thread=thread, key="a", value="mine")
    ThreadValue.objects.filter(thread=thread).update(thread=sibling)

    with pytest.raises(DecryptionFailed):
        value_get(thread=sibling, key="a")


def test_corrupt_stored_json_raises(thread: Thread) -> None:
    sealed = secret_encrypt(
        tenant=thread.tenant, plaintext=b"{not json", context=f"threads.ThreadValue:{thread.id}:k"
    )
    ThreadValue.objects.create(
        tenant=thread.tenant, thread=thread, key="k", value_encrypted=sealed, size=9
    )

    with pytest.raises(CorruptValue):
        value_get(thread=thread, key="k")


def test_value_stored_reports_size_and_updated_at(thread: Thread) -> None:
    change = value_set(thread=thread, key="k", value={"a": "é"})

    stored = value_stored(thread=thread, key="k")

    assert stored is not None
    assert (stored.value, stored.size, stored.updated_at) == (
        {"a": "é"},
        len('{"a":"é"}'.encode()),
        change.updated_at,
    )


def test_a_write_inside_an_outer_transaction_rolls_back_with_it(thread: Thread) -> None:
    def write_then_fail() -> None:
        with transaction.atomic():
            value_set(thread=thread, key="k", value=1)
            raise RuntimeError("outer transaction fails")

    with pytest.raises(RuntimeError):
        write_then_fail()

    assert value_get(thread=thread, key="k") is None

"""The payload walk is linear and bounded (common.payloads), and a JSON value typed into a
form is parsed within MAX_DEPTH (common.parsing): a 400 naming the field, never a 500."""

from __future__ import annotations

import json
import time
import uuid
from io import BytesIO
from typing import Any

import pytest
from django.urls import reverse

from common.drf import CheckedJSONParser
from common.errors import ValidationFailed
from common.parsing import json_parse
from common.payloads import MAX_DEPTH, NodeLimit, payload_check
from tests.console.conftest import CHAT, client_of, team_make
from threads.runtime.lifecycle import thread_open


def _shared_lists(levels: int) -> list[Any]:
    """Nine references to one list at each level: 9**levels values to a walk, in Python."""
    value: list[Any] = ["lol"] * 9
    for _ in range(levels - 1):
        value = [value] * 9
    return value


def test_a_shared_object_costs_each_visit_against_the_node_limit() -> None:
    limit = NodeLimit(count=10_000, name="MAX_THINGS", subject="the thing")
    started = time.monotonic()

    with pytest.raises(ValidationFailed) as refused:
        payload_check(_shared_lists(9), nodes=limit)

    assert time.monotonic() - started < 1.0
    assert refused.value.message == "the thing holds more than 10000 values (the limit MAX_THINGS)"
    assert refused.value.field is not None
    assert refused.value.field.startswith("[0][0][0]")


def test_a_walk_within_the_node_limit_counts_keys_and_values() -> None:
    value = {"a": [1, 2], "b": {"c": None}}  # 1 + 2 keys + list + 2 + mapping + 1 key + 1

    payload_check(value, nodes=NodeLimit(count=9, name="N"))
    with pytest.raises(ValidationFailed, match=r"more than 8 values \(the limit N\)"):
        payload_check(value, nodes=NodeLimit(count=8, name="N"))


def test_a_long_key_above_a_long_list_is_walked_in_linear_time() -> None:
    def walk_seconds(key_length: int) -> float:
        body = json.dumps({"k" * key_length: [0] * 50_000}).encode()
        started = time.monotonic()
        CheckedJSONParser().parse(BytesIO(body))
        return time.monotonic() - started

    short = min(walk_seconds(1) for _ in range(3))
    long = min(walk_seconds(20_000) for _ in range(3))

    assert long < 3 * short + 0.1  # each value's path was a copy of the 20 KB key


def test_a_refusal_still_names_the_full_path() -> None:
    with pytest.raises(ValidationFailed) as refused:
        payload_check({"a": [{"b": "ok"}, {"c": ["x", "y\x00"]}]}, path="body")

    assert refused.value.field == "body.a[1].c[1]"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000, f"data is nested more than {MAX_DEPTH} levels deep"),
        ("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), "the limit MAX_DEPTH"),
        ("1" * 5000, "data is not JSON"),
        ("{not json", "data is not JSON"),
    ],
)
def test_json_typed_into_a_field_is_refused_naming_it(text: str, words: str) -> None:
    with pytest.raises(ValidationFailed, match=words) as refused:
        json_parse(text, field="data")

    assert refused.value.field is not None
    assert refused.value.field.startswith("data")


@pytest.mark.django_db
def test_console_json_fields_refuse_json_deeper_than_the_recursion_limit() -> None:
    team = team_make()
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)
    deep = "[" * 100_000

    value = client.post(reverse("console:thread-kv-set", args=[thread.pk]),
                        {"key": "k", "value": deep})  # fmt: skip
    answer = client.post(
        reverse("console:action-respond", args=[thread.pk, uuid.UUID(int=0)]),
        {"decision": "answer", "data": deep},
        headers={"Accept": "application/json"},
    )

    assert value.status_code == 400
    assert f"value is nested more than {MAX_DEPTH} levels deep" in value.content.decode()
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "data"

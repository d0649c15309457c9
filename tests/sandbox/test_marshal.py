"""The host side of the value codec (the guest side is exercised in the conformance tests)."""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from sandbox.marshal import (
    MAX_VALUE_DEPTH,
    UNDEFINED,
    HostFunctions,
    JSMap,
    SerializationError,
    TypedArray,
    decode,
    encode,
)


@pytest.mark.parametrize(
    "value",
    [
        None, True, 0, -7, 2**53 - 1, 2**80, -(2**64), 1.25, "", "é✓", UNDEFINED, [1, [2]],
        {"a": {"b": [None]}}, {"__proto__": 1}, JSMap({1: "a", "b": None}), {1, "x"},
        datetime(2026, 5, 1, 12, 0, tzinfo=UTC), b"\x00\xff", TypedArray("Int16Array", b"\x01\x00"),
    ],
)  # fmt: skip
def test_values_round_trip(value: Any) -> None:
    assert decode(encode(value, "v")) == value


def test_special_numbers_round_trip() -> None:
    assert math.isnan(decode(encode(math.nan, "v")))
    assert decode(encode(math.inf, "v")) == math.inf
    assert math.copysign(1, decode(encode(-0.0, "v"))) == -1


def test_aware_datetimes_cross_as_utc_instants() -> None:
    local = datetime(2026, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))

    assert decode(encode(local, "v")) == local
    with pytest.raises(SerializationError, match="naive"):
        encode(datetime(2026, 5, 1), "v")


def test_host_functions_are_registered_only_when_allowed() -> None:
    functions = HostFunctions()

    node = encode({"f": len}, "globals", functions)

    assert node["v"]["f"]["$"] == "function"
    assert functions.by_id[node["v"]["f"]["id"]] is len
    with pytest.raises(SerializationError, match=r"^result\.f: functions cross only"):
        encode({"f": len}, "result")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (object(), "v"),
        ({"a": [1, object()]}, "v.a[1]"),
        ({1: "x"}, "v"),
        ({"odd key": {"x": object()}}, "v['odd key'].x"),
    ],
)
def test_non_transferable_values_name_their_path(value: Any, path: str) -> None:
    with pytest.raises(SerializationError) as raised:
        encode(value, "v")

    assert raised.value.path == path


def test_cycles_are_refused() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic

    with pytest.raises(SerializationError, match="cyclic"):
        encode(cyclic, "v")


def test_shared_but_acyclic_references_are_copied() -> None:
    shared = [1]

    assert decode(encode({"a": shared, "b": shared}, "v")) == {"a": [1], "b": [1]}


def test_unhashable_map_keys_from_the_guest_are_refused() -> None:
    node = {"$": "map", "v": [[{"$": "object", "v": {}}, 1]]}

    with pytest.raises(SerializationError, match="hashable"):
        decode(node, "result")


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_values_nested_to_the_depth_limit_round_trip() -> None:
    value = _nested(MAX_VALUE_DEPTH)

    assert decode(encode(value, "v")) == value


def test_values_nested_past_the_depth_limit_are_refused_both_ways() -> None:
    too_deep = _nested(MAX_VALUE_DEPTH + 1)
    node: Any = 1
    for _ in range(MAX_VALUE_DEPTH + 1):
        node = {"$": "object", "v": {"a": node}}

    with pytest.raises(SerializationError, match=r"nested deeper than 200 levels"):
        encode(too_deep, "v")
    with pytest.raises(SerializationError, match=r"^result\.a\.a\.a.*nested deeper than 200"):
        decode(node, "result")


def test_a_caller_already_deep_in_its_stack_gets_a_serialization_error() -> None:
    """Not a RecursionError from the middle of the codec."""
    value = _nested(MAX_VALUE_DEPTH)

    def recurse(levels: int) -> SerializationError | None:
        if levels:
            return recurse(levels - 1)
        try:
            encode(value, "v")
        except SerializationError as error:
            return error
        return None

    error = recurse(sys.getrecursionlimit() - 250)

    assert error is not None
    assert error.reason == "nested too deeply for the host's recursion limit"


def test_ints_too_long_for_decimal_are_refused() -> None:
    with pytest.raises(SerializationError, match="4300-digit"):
        encode({"n": 10**5000}, "v")


@pytest.mark.parametrize(
    ("node", "path"),
    [
        ({"$": "map", "v": [[1, "a"], [{"$": "bigint", "v": "1"}, "b"]]}, "r<key 1>"),
        ({"$": "map", "v": [[True, "a"], [1, "b"]]}, "r<key 1>"),
        ({"$": "set", "v": [{"$": "date", "v": 0}, {"$": "date", "v": 0}]}, "r<item 1>"),
    ],
)
def test_members_python_would_merge_are_refused(node: Any, path: str) -> None:
    with pytest.raises(SerializationError, match="distinct in JavaScript but equal") as raised:
        decode(node, "r")

    assert raised.value.path == path

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from common.ids import new_id, uuid7
from common.time import from_us, now, now_us, to_us

# uuid7 -------------------------------------------------------------------------


def test_uuid7_has_version_7_and_the_rfc_variant() -> None:
    for _ in range(1_000):
        value = uuid7()
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def test_uuid7_carries_the_creation_time_in_milliseconds() -> None:
    before_ms = time.time_ns() // 1_000_000
    value = uuid7()
    after_ms = time.time_ns() // 1_000_000

    assert before_ms <= value.int >> 80 <= after_ms


def test_uuid7_created_in_sequence_sort_by_creation() -> None:
    created = []
    for _ in range(20):
        created.append(uuid7())
        time.sleep(0.002)

    assert sorted(created) == created
    assert sorted(str(value) for value in created) == [str(value) for value in created]


def test_uuid7_values_are_unique() -> None:
    values = {uuid7() for _ in range(10_000)}

    assert len(values) == 10_000


def test_uuid7_random_bits_differ_within_one_millisecond() -> None:
    values = [uuid7() for _ in range(100)]
    random_parts = {value.int & ((1 << 62) - 1) for value in values}

    assert len(random_parts) == 100


def test_new_id_is_a_uuid7() -> None:
    value = new_id()

    assert isinstance(value, uuid.UUID)
    assert value.version == 7


# Time ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "moment",
    [
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2025, 3, 14, 15, 9, 26, 535897, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    ],
    ids=["epoch", "recent", "before-epoch", "max"],
)
def test_to_us_and_from_us_round_trip_exactly(moment: dt.datetime) -> None:
    assert from_us(to_us(moment)) == moment


def test_to_us_is_exact_where_float_seconds_would_round() -> None:
    moment = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)

    assert to_us(moment) == 253_402_300_799_999_999
    assert int(moment.timestamp() * 1_000_000) != 253_402_300_799_999_999


def test_to_us_counts_from_the_epoch() -> None:
    assert to_us(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) == 0
    assert to_us(dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC)) == 1_000_005
    assert to_us(dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)) == -1


def test_to_us_honours_the_timezone_of_an_aware_datetime() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))

    assert to_us(dt.datetime(1970, 1, 1, 2, 0, tzinfo=plus_two)) == 0


def test_to_us_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        to_us(dt.datetime(2025, 1, 1, 12, 0))


def test_from_us_returns_an_aware_utc_datetime() -> None:
    moment = from_us(1_700_000_000_123_456)

    assert moment == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert moment.utcoffset() == dt.timedelta(0)


def test_now_us_is_the_current_time_in_microseconds() -> None:
    before = time.time_ns() // 1_000
    value = now_us()
    after = time.time_ns() // 1_000

    assert before <= value <= after
    assert abs(value - time.time() * 1_000_000) < 1_000_000


def test_now_is_aware_utc_and_current() -> None:
    before = now_us()
    moment = now()
    after = now_us()

    assert moment.utcoffset() == dt.timedelta(0)
    assert before <= to_us(moment) <= after

"""config.logs: a Redis outage is said once per kind of line, at WARNING; other failures keep
their level and traceback."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
import redis
from kombu.exceptions import OperationalError

from config.logs import RedisOutageOnce

ACK = "Couldn't ack %r, reason:%r"


@pytest.fixture
def outage_filter() -> Iterator[RedisOutageOnce]:
    """The filter on two loggers (one instance, as ``LOGGING`` attaches it) showing INFO."""
    found = RedisOutageOnce()
    loggers = [logging.getLogger(name) for name in ("test.logs.request", "test.logs.consumer")]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.addFilter(found)
    yield found
    for logger in loggers:
        logger.removeFilter(found)
        logger.setLevel(logging.NOTSET)


def _refused() -> redis.ConnectionError:
    return redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def _log_with(logger: logging.Logger, level: int, message: str, error: BaseException) -> None:
    try:
        raise error
    except BaseException:
        logger.log(level, message, "tag", error, exc_info=True)


def test_an_outage_logs_each_kind_of_line_once_at_warning(
    outage_filter: RedisOutageOnce, caplog: pytest.LogCaptureFixture
) -> None:
    request = logging.getLogger("test.logs.request")
    consumer = logging.getLogger("test.logs.consumer")
    for _ in range(4):
        _log_with(request, logging.CRITICAL, ACK, _refused())
    for _ in range(3):
        consumer.error("consumer: Cannot connect to %s: %s.", "redis://", _refused())

    assert [(r.name, r.levelname) for r in caplog.records] == [
        ("test.logs.request", "WARNING"),
        ("test.logs.consumer", "WARNING"),
    ]
    assert caplog.records[0].exc_info is None
    assert caplog.records[0].getMessage() == (
        "Couldn't ack 'tag', reason:ConnectionError('Error 111 connecting to 127.0.0.1:6379. "
        "Connection refused.') (a Redis outage: repeats of this line are logged at DEBUG)"
    )


def test_repeats_are_debug_lines_when_the_logger_shows_debug(
    outage_filter: RedisOutageOnce, caplog: pytest.LogCaptureFixture
) -> None:
    request = logging.getLogger("test.logs.request")
    request.setLevel(logging.DEBUG)
    for _ in range(3):
        _log_with(request, logging.CRITICAL, ACK, _refused())

    assert [r.levelname for r in caplog.records] == ["WARNING", "DEBUG", "DEBUG"]


def test_an_error_raised_from_a_lost_connection_is_an_outage_line(
    outage_filter: RedisOutageOnce, caplog: pytest.LogCaptureFixture
) -> None:
    beat = logging.getLogger("test.logs.consumer")
    for _ in range(2):
        try:
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except ConnectionRefusedError as refused:
                raise OperationalError("Error 111 connecting") from refused
        except OperationalError:
            beat.error("Message Error: %s", "sweep-threads", exc_info=True)

    assert [r.levelname for r in caplog.records] == ["WARNING"]


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.AuthenticationError("invalid username-password pair"),
        redis.exceptions.MaxConnectionsError("Too many connections"),
        redis.ResponseError("OOM command not allowed"),
        ValueError("a bug"),
    ],
    ids=["wrong password", "pool exhausted", "refused command", "bug"],
)
def test_a_failure_an_outage_does_not_explain_keeps_its_level_and_traceback(
    outage_filter: RedisOutageOnce, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    request = logging.getLogger("test.logs.request")
    for _ in range(2):
        _log_with(request, logging.CRITICAL, ACK, error)

    assert [r.levelname for r in caplog.records] == ["CRITICAL", "CRITICAL"]
    assert all(r.exc_info is not None for r in caplog.records)


def test_the_next_outage_warns_again(
    outage_filter: RedisOutageOnce, caplog: pytest.LogCaptureFixture
) -> None:
    outage_filter.quiet_s = 0.05
    request = logging.getLogger("test.logs.request")
    _log_with(request, logging.CRITICAL, ACK, _refused())
    _log_with(request, logging.CRITICAL, ACK, _refused())
    time.sleep(0.1)
    _log_with(request, logging.CRITICAL, ACK, _refused())

    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]

"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.platform import PrivateRedis, private_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """A Valkey of the module's own, which its tests may stop and restart."""
    with private_redis(tmp_path_factory.mktemp("valkey")) as server:
        yield server

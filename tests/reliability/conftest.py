"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.platform import MakeRun, PrivateRedis, make_run, private_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """A Valkey of the module's own, which its tests may stop and restart."""
    with private_redis(tmp_path_factory.mktemp("valkey")) as server:
        yield server


@pytest.fixture
def run(
    django_db_setup: None,
    redis_server: PrivateRedis,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MakeRun]:
    """``make run``'s processes with its defaults."""
    var_dir = tmp_path_factory.getbasetemp() / "make-run-var"
    with make_run(tmp_path, var_dir, redis_server) as started:
        yield started

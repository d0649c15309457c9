"""``python -m bench peers``: this platform against Aegra, side by side (issue 15).

Each repetition starts each system (ours, and Aegra in each of its two configurations) on a
fresh database of the same PostgreSQL server and on the same Redis, warms it up, runs the
five scenarios in order, and stops it; the order of the systems alternates (ours first in
even repetitions, last in odd ones) so a drift of the machine's speed hits all alike.
``peers-quick`` runs tiny sizes once, for development.

The peer needs a Python 3.12 on the machine (:func:`bench.peers.aegra.install`); without it
our side runs alone and the ratios are left empty.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from bench.harness import RESULTS_DIR, Row, benchmark, cpu_calibration_ms
from bench.peers import aegra, ours, regression, report, scenarios
from bench.peers.databases import fresh_database
from bench.peers.scenarios import Outcome, Sizes
from bench.peers.workload import INSTANT, SLOW, Running
from config import env

FULL = Sizes()
QUICK = Sizes(sequential=5, clients=2, runs_per_client=3, burst=5, concurrent=5,
              concurrent_large=10, repetitions=1, warm_up=2)  # fmt: skip

Starter = Callable[[str, Path], AbstractContextManager[Running]]  # (database URL, log dir)


def _warm_up(system: Running, runs: int) -> None:
    client = system.client()
    try:
        for _ in range(runs):
            scenarios.one_run(client, INSTANT)
        scenarios.one_run(client, SLOW)
    finally:
        client.close()


def _scenarios(system: Running, sizes: Sizes) -> dict[str, Outcome]:
    print(f"peers: {system.name}: scenarios", flush=True)
    return {
        "a": scenarios.sequential(system, sizes.sequential),
        "b": scenarios.runs(
            system, agent=INSTANT, callers=sizes.clients, runs_each=sizes.runs_per_client
        ),
        "c": scenarios.back_to_back(system, sizes.burst),
        "d": scenarios.concurrent(system, sizes.concurrent),
        "e": scenarios.concurrent(system, sizes.concurrent_large),
    }


def _repetition(name: str, start: Starter, sizes: Sizes) -> dict[str, Outcome]:
    """One system, started on a fresh database, warmed up, through every scenario."""
    with (
        fresh_database(_server_owner(), f"bench_peers_{name}") as database_url,
        tempfile.TemporaryDirectory(prefix=f"bench-peers-{name}-") as log_dir,
        start(database_url, Path(log_dir)) as system,
    ):
        _warm_up(system, sizes.warm_up)
        return _scenarios(system, sizes)


def _server_owner() -> str:
    """A URL of a role that may create databases: the tables' owner when the two roles are
    set apart (docs/tenant-wall.md)."""
    return env.database_migrate_url() or env.database_url()


def _starters() -> dict[str, Starter]:
    """Our system, and the peer's when it could be installed."""
    redis_url = env.redis_url()
    starters: dict[str, Starter] = {
        report.OURS: lambda database_url, log_dir: ours.running(
            database_url=database_url, redis_url=redis_url, log_dir=log_dir
        )
    }
    if (python := aegra.install(env.var_dir())) is not None:
        for mode in aegra.MODES:
            starters[mode] = functools.partial(
                _aegra, mode=mode, python=python, redis_url=redis_url
            )
    return starters


def _aegra(
    database_url: str, log_dir: Path, *, mode: str, python: Path, redis_url: str
) -> AbstractContextManager[Running]:
    return aegra.running(mode=mode, python=python, database_url=database_url,
                         redis_url=redis_url, log_dir=log_dir)  # fmt: skip


def _order(names: Sequence[str], repetition: int) -> list[str]:
    return list(names) if repetition % 2 == 0 else list(reversed(names))


def compare(sizes: Sizes) -> list[Row]:
    """Every repetition of both systems, the tables printed, the rows for the harness."""
    load, calibration = os.getloadavg()[0], cpu_calibration_ms()
    starters = _starters()
    results: dict[str, list[dict[str, Outcome]]] = {name: [] for name in starters}
    for repetition in range(sizes.repetitions):
        for name in _order(list(starters), repetition):
            print(f"peers: repetition {repetition + 1}/{sizes.repetitions}, {name}", flush=True)
            results[name].append(_repetition(name, starters[name], sizes))
    plan = report.plan(sizes)
    print(f"\n{report.figures_table(results, plan)}\n\n{report.cpu_table(results, plan)}\n")
    rows = report.rows(
        results, plan, repetitions=sizes.repetitions, peer=aegra.REQUIREMENT,
        peers_ran=[name for name in starters if name != report.OURS], load_avg_1m_at_start=load,
        cpu_calibration_ms_at_start=calibration, cpu_calibration_ms_at_end=cpu_calibration_ms(),
    )  # fmt: skip
    previous = regression.last_comparable(
        regression.recorded_runs(RESULTS_DIR / "history.jsonl"), calibration,
        [row.case for row in rows],
    )  # fmt: skip
    return regression.guarded(rows, previous)


@benchmark("peers")
def peers() -> Sequence[Row]:
    return compare(FULL)


@benchmark("peers-quick")
def peers_quick() -> Sequence[Row]:
    return compare(QUICK)

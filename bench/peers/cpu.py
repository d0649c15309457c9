"""CPU time spent by each part of a system during a scenario, read from Linux ``/proc``.

* **A process tree** (a web server, a worker, beat, the peer's server): utime + stime +
  cutime + cstime of the root and every live descendant (sandbox runners, pool processes).
  A child that exited and was reaped is in its parent's cutime/cstime, so nothing is lost.
* **PostgreSQL**: the backends serving one database, and only those, so other sessions on
  a shared server do not count. A sampler asks ``pg_stat_activity`` every
  :data:`SAMPLE_INTERVAL_S` for the database's backend pids and reads their CPU; a backend
  that appears during the scenario counts from zero (its connection start-up is part of the
  cost). A backend that exits between two samples loses at most that interval of CPU.
  PostgreSQL's shared background processes (WAL writer, checkpointer, autovacuum) are left
  out: they serve every database.
* **Redis**: the whole server process (``INFO server`` names its pid). Redis cannot tell its
  databases apart, so on a shared server this includes everyone's commands; run the bench
  with little else on Redis.

A pid is read only when ``/proc/<pid>/comm`` names the expected program, so a server in
another pid namespace or on another host reads as absent (None) instead of as a stranger's
CPU.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

SAMPLE_INTERVAL_S = 0.2
PROC = Path("/proc")


def _stat(directory: Path) -> list[str] | None:
    """The fields of ``<directory>/stat`` after the command name (state, ppid, ...), None
    when the process is gone."""
    try:
        return (directory / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_ticks(pid: int, *, proc: Path = PROC) -> int | None:
    """utime + stime + cutime + cstime of one process (clock ticks), None if it is gone."""
    fields = _stat(proc / str(pid))
    return None if fields is None else sum(int(value) for value in fields[11:15])


def _parents(proc: Path) -> dict[int, int]:
    """Every live pid and its parent pid."""
    parents = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (fields := _stat(entry)) is not None:
            parents[int(entry.name)] = int(fields[1])
    return parents


def tree_ticks(root: int, *, proc: Path = PROC) -> int:
    """CPU ticks of ``root`` and all its live descendants (reaped ones are in cutime)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents(proc).items():
        children.setdefault(parent, []).append(pid)
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        total += process_ticks(pid, proc=proc) or 0
        pending += children.get(pid, [])
    return total


def program_is(pid: int, prefixes: tuple[str, ...], *, proc: Path = PROC) -> bool:
    try:
        return (proc / str(pid) / "comm").read_text().strip().startswith(prefixes)
    except OSError:
        return False


def redis_server_pid(url: str) -> int | None:
    """The pid of the Redis (or Valkey) server at ``url`` when it runs on this machine."""
    with redis.Redis.from_url(url, socket_timeout=5) as client:
        pid = int(client.info("server")["process_id"])
    return pid if program_is(pid, ("redis", "valkey")) else None


@dataclass
class BackendSampler:
    """Accumulates the CPU of the PostgreSQL backends serving ``database`` (see the module
    docstring). ``conninfo`` reaches the same server through another database."""

    conninfo: str
    database: str
    first: dict[int, int] = field(default_factory=dict)  # pid -> ticks when first seen
    last: dict[int, int] = field(default_factory=dict)  # pid -> ticks when last seen

    def sample(self, connection: psycopg.Connection[tuple[int]], *, baseline: bool) -> None:
        """Read the database's backends now. A backend already there at the baseline counts
        from its ticks then; one that appears later, from zero."""
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
        ).fetchall()
        for (pid,) in rows:
            if not program_is(pid, ("postgres",)):
                continue
            ticks = process_ticks(pid)
            if ticks is None:
                continue
            self.first.setdefault(pid, ticks if baseline else 0)
            self.last[pid] = ticks

    def ticks(self) -> int:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


@contextmanager
def _sampling(sampler: BackendSampler, at: Mapping[float, Callable[[], None]]) -> Iterator[None]:
    """Samples now, every SAMPLE_INTERVAL_S while inside, and once more on the way out; at
    each offset of ``at`` (seconds from now) samples and calls its function."""
    stop = threading.Event()
    with psycopg.connect(sampler.conninfo, autocommit=True) as connection:
        sampler.sample(connection, baseline=True)
        started, marks = time.monotonic(), sorted(at)

        def loop() -> None:
            while True:
                due = marks[0] - (time.monotonic() - started) if marks else SAMPLE_INTERVAL_S
                if stop.wait(max(0.0, min(SAMPLE_INTERVAL_S, due))):
                    return
                sampler.sample(connection, baseline=False)
                if marks and time.monotonic() - started >= marks[0]:
                    at[marks.pop(0)]()

        thread = threading.Thread(target=loop, name="pg-cpu-sampler", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            sampler.sample(connection, baseline=False)


@dataclass(frozen=True)
class Sources:
    """What to measure for one system: process trees by label, its PostgreSQL database
    (``conninfo`` reaches the same server through another database, to ask about it), and
    the Redis server's pid (None when Redis is not local)."""

    processes: Mapping[str, int]
    conninfo: str
    database: str
    redis_pid: int | None


@contextmanager
def measured(
    sources: Sources, *, marks: dict[float, float] | None = None
) -> Iterator[dict[str, float | None]]:
    """CPU seconds per part spent while inside: the yielded dict is filled on exit with one
    entry per process label, plus ``postgres`` and ``redis`` (None when unreadable). Each
    key of ``marks`` is an offset in seconds from entering; its value is set to the CPU
    seconds of every part together spent until then (a part that cannot be read counts
    as zero), when the block lasted that long."""
    spent: dict[str, float | None] = {}
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    before = {label: tree_ticks(pid) for label, pid in sources.processes.items()}
    redis_before = process_ticks(sources.redis_pid) if sources.redis_pid else None
    sampler = BackendSampler(sources.conninfo, sources.database)

    def redis_ticks() -> int | None:
        after = process_ticks(sources.redis_pid) if sources.redis_pid else None
        return None if redis_before is None or after is None else after - redis_before

    def mark(offset: float) -> None:
        assert marks is not None
        trees = sum(tree_ticks(pid) - before[label] for label, pid in sources.processes.items())
        marks[offset] = (trees + sampler.ticks() + (redis_ticks() or 0)) / ticks_per_s

    at = {offset: functools.partial(mark, offset) for offset in marks or {}}
    with _sampling(sampler, at):
        yield spent
    for label, pid in sources.processes.items():
        spent[label] = (tree_ticks(pid) - before[label]) / ticks_per_s
    spent["postgres"] = sampler.ticks() / ticks_per_s if sampler.last else None
    ticks = redis_ticks()
    spent["redis"] = None if ticks is None else ticks / ticks_per_s

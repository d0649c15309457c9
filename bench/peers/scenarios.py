"""The scenarios, each run against one running system with its CPU measured.

Every caller is a thread of this process with its own keep-alive connection; callers of
one scenario start together (a barrier), and the wall time runs from the first caller's
start to the last one's end. A run's latency spans starting the conversation with its
message until the final answer is back (:meth:`bench.peers.workload.Client.run`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.peers.cpu import measured
from bench.peers.workload import (
    INSTANT,
    RUN_ROLES,
    SLOW,
    TEXT,
    BenchError,
    Client,
    Message,
    Running,
    numbered_text,
)

BARRIER_TIMEOUT_S = 60.0
# Offsets (s) at which the concurrency scenarios read the CPU spent so far: before the first
# model call can have ended (SLOW_MODEL_S), so it is the CPU of starting the runs (A).
START_MARKS_S = (0.6, 0.9)


@dataclass(frozen=True)
class Sizes:
    sequential: int = 200  # (a) runs one after another
    clients: int = 20  # (b) callers at once ...
    runs_per_client: int = 20  # ... each making this many runs
    burst: int = 20  # (c) messages back to back on one thread
    concurrent: int = 50  # (d) runs at once, 1 s model
    concurrent_large: int = 200  # (e) runs at once, 1 s model
    repetitions: int = 3
    warm_up: int = 10  # unmeasured runs after start-up, so first-request costs do not count


@dataclass(frozen=True)
class Outcome:
    """What one scenario measured on one system."""

    runs: int
    wall_s: float
    latencies_s: list[float]  # one per run; the wall time alone in scenario (c)
    cpu_s: dict[str, float | None]  # CPU seconds per part (see bench.peers.cpu.measured)
    # Messages sent back to back on one thread (scenario c) only:
    kept: int | None = None  # messages the thread holds afterwards
    expected: int | None = None  # 4 per message sent
    in_order: bool | None = None  # every run's 4 messages, in the order the messages were sent
    failed: list[str] = field(default_factory=list)  # errors of runs that did not end well
    # The concurrency scenarios (d, e) only: CPU seconds of every part spent from the start
    # until each of START_MARKS_S.
    start_cpu_s: dict[float, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Calls:
    started: float
    ended: float
    latencies_s: list[float]  # of the runs that ended well
    failed: list[str]  # the errors of the others


def one_run(client: Client, agent: str) -> float:
    """Start a conversation on :data:`TEXT` and wait for the final answer; seconds taken."""
    started = time.perf_counter()
    client.run(agent, TEXT)
    return time.perf_counter() - started


def _callers(system: Running, agent: str, runs_each: Sequence[int]) -> list[_Calls]:
    """``len(runs_each)`` callers at once, caller ``i`` making ``runs_each[i]`` runs."""
    barrier = threading.Barrier(len(runs_each))

    def caller(count: int) -> _Calls:
        client = system.client()
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
            started = time.perf_counter()
            latencies, failed = [], []
            for _ in range(count):
                try:
                    latencies.append(one_run(client, agent))
                except BenchError as error:  # a run that ended without its answer
                    failed.append(str(error))
            return _Calls(started, time.perf_counter(), latencies, failed)
        finally:
            client.close()

    with ThreadPoolExecutor(len(runs_each)) as pool:
        return list(pool.map(caller, runs_each))


def runs(
    system: Running, *, agent: str, callers: int, runs_each: int,
    marks_s: Sequence[float] = (),
) -> Outcome:  # fmt: skip
    """``callers`` callers making ``runs_each`` runs each, one after another; the CPU spent
    by each offset of ``marks_s`` is read too."""
    marks = dict.fromkeys(marks_s, 0.0)
    with measured(system.sources, marks=marks) as cpu:
        calls = _callers(system, agent, [runs_each] * callers)
    return Outcome(
        runs=callers * runs_each,
        wall_s=max(c.ended for c in calls) - min(c.started for c in calls),
        latencies_s=[latency for c in calls for latency in c.latencies_s],
        cpu_s=cpu,
        failed=[error for c in calls for error in c.failed],
        start_cpu_s=marks,
    )


def sequential(system: Running, count: int) -> Outcome:
    return runs(system, agent=INSTANT, callers=1, runs_each=count)


def concurrent(system: Running, count: int) -> Outcome:
    """``count`` runs at once with the 1 s model, the CPU read at each of START_MARKS_S."""
    return runs(system, agent=SLOW, callers=count, runs_each=1, marks_s=START_MARKS_S)


def back_to_back(system: Running, count: int) -> Outcome:
    """``count`` messages to one thread, each sent as soon as the previous was accepted;
    then every run waited for, and the thread's messages counted and checked for order."""
    client = system.client()
    texts = [numbered_text(n) for n in range(count)]
    try:
        with measured(system.sources) as cpu:
            started = time.perf_counter()
            thread_id = client.start_thread(INSTANT)
            run_ids = [client.submit(thread_id, INSTANT, text) for text in texts]
            failed = _waited(client, thread_id, run_ids)
            wall = time.perf_counter() - started
        stored = client.messages(thread_id)
    finally:
        client.close()
    return Outcome(runs=count, wall_s=wall, latencies_s=[wall], cpu_s=cpu, kept=len(stored),
                   expected=len(RUN_ROLES) * count, in_order=_in_order(stored, texts),
                   failed=failed)  # fmt: skip


def _waited(client: Client, thread_id: str, run_ids: Sequence[str]) -> list[str]:
    """Wait for each run; the errors of those that did not end with the final answer."""
    failed = []
    for run_id in run_ids:
        try:
            client.wait(thread_id, run_id)
        except BenchError as error:
            failed.append(str(error))
    return failed


def _in_order(stored: Sequence[Message], texts: Sequence[str]) -> bool:
    """Whether the thread holds exactly each text's run (user, assistant, tool, assistant),
    in the order the texts were sent."""
    roles = [message.role for message in stored]
    users = [message.content for message in stored if message.role == "user"]
    return roles == list(RUN_ROLES) * len(texts) and users == list(texts)

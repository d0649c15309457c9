"""Thread events: from the log to a WebSocket client, through a real uvicorn server and Redis.

* **Fan-out latency** (p50 <= 10 ms): flows run in this process (``thread_drive``, a
  zero-latency scripted model) while a WebSocket client follows the thread through the
  server; each persisted event's latency is the client's receive time minus the event's
  ``timestamp`` (taken as the engine writes it, before its transaction commits), on the same
  clock. Rows for one client and for several clients on the same thread.
* **Floor**: the same with one ``state.emit`` every 20 ms, so the writer does not compete
  with the broadcast for the CPU.
* **Events/s on one thread**: ``state.emit`` as fast as one writer can (each a persisted
  event in its own statement) until a following client has received them all; the row's
  latencies are the writer's cost per event (the INSERT and handing the broadcast off).
* **Per step**: the engine bench's in-process step overhead (message accepted to answer
  stored, minus model time) with events, and with ``publish`` made a no-op for comparison.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from bench.engine import BUNDLE as ENGINE_BUNDLE
from bench.harness import Row, bench_tenant, benchmark, summarize
from config.launcher import background_server

if TYPE_CHECKING:
    from tenancy.models import Tenant
    from threads.models import Thread

FLOW_MESSAGES = 60
WARMUP_MESSAGES = 5
FOLLOWERS = 5
EMITTED = 2000
RECEIVE_TIMEOUT_S = 30.0
PACED = 200
PACE_S = 0.02
STEP_THREADS = 10  # x bench.engine.MESSAGES_PER_THREAD steps


# The client runs in a process of its own (as clients do), so the bench's writer threads do
# not share its interpreter lock. After the custom event named "bench.stop" it prints
# "<received µs> <envelope>" per event (printing as it goes could block on the pipe).
_CLIENT = """
import json, sys, time
from websockets.sync.client import connect
url, secret = sys.argv[1], sys.argv[2]
received = []
with connect(url, additional_headers={"Authorization": "Bearer " + secret}) as socket:
    print("ready", flush=True)
    for text in socket:
        received.append((time.time_ns() // 1000, text))
        if '"bench.stop"' in text:
            break
for at, text in received:
    print(at, text)
"""


class Follower:
    """A WebSocket client process following one thread from ``after``."""

    def __init__(self, port: int, thread: Thread, secret: str, *, after: int) -> None:
        self.thread = thread
        url = f"ws://127.0.0.1:{port}/ws/threads/{thread.pk}/?after={after}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, url, secret], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the WebSocket client did not connect")

    def finish(self) -> list[tuple[int, dict[str, Any]]]:
        """Stop the client (after everything before the stop event) and return the
        persisted events it received, with their receive times."""
        from threads.state import ThreadState

        ThreadState(self.thread).emit("bench.stop", None)
        out, _ = self.process.communicate(timeout=RECEIVE_TIMEOUT_S)
        received = []
        for line in out.splitlines():
            at, _, text = line.partition(" ")
            event = json.loads(text)
            if event["sequence"] is not None and event["payload"].get("name") != "bench.stop":
                received.append((int(at), event))
        return received


def _last_sequence(thread: Thread) -> int:
    from threads.services.events import event_last_sequence

    return event_last_sequence(thread=thread)


def _converse(thread: Thread, messages: int) -> None:
    from threads.runtime.driver import thread_drive
    from threads.services.inbox import message_queue

    for _ in range(messages):
        message_queue(thread=thread, role="user", content="hello")
        thread_drive(thread_id=thread.pk, tenant_id=thread.tenant_id)


def _fan_out(port: int, thread: Thread, secret: str, followers: int) -> Row:
    _converse(thread, WARMUP_MESSAGES)
    start = _last_sequence(thread)
    clients = [Follower(port, thread, secret, after=start) for _ in range(followers)]
    began = time.perf_counter()
    _converse(thread, FLOW_MESSAGES)
    last = _last_sequence(thread)
    elapsed = time.perf_counter() - began
    received = [client.finish() for client in clients]
    latencies = [(at - event["timestamp"]) / 1e6 for got in received for at, event in got]
    from threads.events import DEFERRED

    prompt = sorted(
        (at - event["timestamp"]) / 1000
        for got in received
        for at, event in got
        if event["type"] not in DEFERRED
    )
    in_order = all(
        [event["sequence"] for _, event in got] == list(range(start + 1, last + 1))
        for got in received
    )
    return summarize(
        "events",
        f"engine -> WebSocket, {followers} client(s)",
        latencies,
        elapsed,
        target="p50 <= 10 ms",
        events=last - start,
        events_per_step=round((last - start) / FLOW_MESSAGES, 1),
        every_client_got_every_event_in_order=in_order,
        p50_ms_without_deferred_markers=round(prompt[len(prompt) // 2], 3) if prompt else None,
    )


def _throughput(port: int, thread: Thread, secret: str) -> Row:
    from threads.state import ThreadState

    state = ThreadState(thread)
    start = _last_sequence(thread)
    client = Follower(port, thread, secret, after=start)
    costs: list[float] = []
    began = time.perf_counter()
    for index in range(EMITTED):
        before = time.perf_counter()
        state.emit("tick", index)
        costs.append(time.perf_counter() - before)
    written = time.perf_counter() - began
    received = client.finish()
    delivered_at = received[-1][0] / 1e6 if received else time.time()
    delivered = delivered_at - (time.time() - (time.perf_counter() - began))
    return summarize(
        "events",
        "emit -> WebSocket, one thread (writer cost per event)",
        costs,
        written,
        written_per_s=round(EMITTED / written, 1),
        delivered_per_s=round(EMITTED / delivered, 1),
        received=len(received),
    )


def _paced(port: int, thread: Thread, secret: str) -> Row:
    """The floor: one event every ``PACE_S`` (no writer load), emit -> WebSocket."""
    from threads.state import ThreadState

    state = ThreadState(thread)
    client = Follower(port, thread, secret, after=_last_sequence(thread))
    began = time.perf_counter()
    for index in range(PACED):
        state.emit("tick", index)
        time.sleep(PACE_S)
    elapsed = time.perf_counter() - began
    received = client.finish()
    return summarize(
        "events",
        f"emit -> WebSocket, one event per {PACE_S * 1000:.0f} ms",
        [(at - event["timestamp"]) / 1e6 for at, event in received],
        elapsed,
        target="p50 <= 10 ms",
    )


def _step_overhead(tenant: Tenant, *, events_on: bool) -> Row:
    """The engine bench's in-process step overhead, with events, or with ``publish`` made a
    no-op (the comparison that prices the events)."""
    from bench.engine import InProcess, _sequential, _warm_up
    from threads.services.threads import thread_create

    threads = [thread_create(tenant=tenant, agent_name="instant") for _ in range(STEP_THREADS)]
    answer = InProcess()
    with contextlib.ExitStack() as stack:
        if not events_on:
            stack.enter_context(_publish_off())
        _warm_up(thread_create(tenant=tenant, agent_name="instant"), answer)
        steps, elapsed = _sequential(tenant=tenant, threads=threads, answer=answer)
    state = "on" if events_on else "off (comparison)"
    return summarize(
        "events",
        f"engine step overhead in process, events {state}",
        [step.overhead_ms / 1000 for step in steps],
        elapsed,
        target="<= 15 ms" if events_on else "",
    )


@contextlib.contextmanager
def _publish_off() -> Iterator[None]:
    modules = _publishing_modules()
    original = modules[0].publish

    def silent(*args: Any, **kwargs: Any) -> None:
        return None

    for module in modules:
        module.publish = silent
    try:
        yield
    finally:
        for module in modules:
            module.publish = original


def _publishing_modules() -> list[Any]:
    """Every module that imported ``publish`` by name (the bench times it in place)."""
    import sys

    from threads import events

    return [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("threads.") and getattr(module, "publish", None) is events.publish
    ]


@benchmark("events")
def event_fan_out() -> Sequence[Row]:
    with bench_tenant("bench-events") as tenant:
        from agents.bundles import bundle_import
        from tenancy.models import Role
        from tenancy.services import api_key_create
        from threads.services.threads import thread_create

        bundle_import(tenant=tenant, document=ENGINE_BUNDLE)
        secret = api_key_create(tenant=tenant, name="bench", role=Role.READ_ONLY).secret
        with background_server() as (port, _):
            return [
                _fan_out(port, thread_create(tenant=tenant, agent_name="instant"), secret, 1),
                _fan_out(
                    port, thread_create(tenant=tenant, agent_name="instant"), secret, FOLLOWERS
                ),
                _paced(port, thread_create(tenant=tenant, agent_name="instant"), secret),
                _throughput(port, thread_create(tenant=tenant, agent_name="instant"), secret),
                _step_overhead(tenant, events_on=True),
                _step_overhead(tenant, events_on=False),
            ]

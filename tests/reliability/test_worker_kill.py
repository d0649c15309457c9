"""``kill -9`` of the worker running a turn, with the platform's default lock TTL and sweep
interval: another worker finishes the thread within 10 s, answering the interrupted message
and the one posted meanwhile (it joined the running turn), the sandbox runner of a killed
worker does not outlive it, and a client following the thread's socket receives every event
the database holds (``message.deleted`` for the answer the dead worker left unfinished
included). Under ``make run``'s defaults, a worker killed round after round has its turn
taken over within 5 s each time, and is restarted without a growing backoff.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from agents.bundles import bundle_import
from config.launcher import RESTART_BACKOFF_S
from tenancy.models import Tenant
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import (
    MakeRun,
    Platform,
    PrivateRedis,
    chat_bundle,
    platform_processes,
)
from tests.support import ContextThread
from tests.worker import Worker
from threads.models import TURN_TERMINAL, Event, Log, Message, MessageRole, RunStatus, Turn
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

FINISHED_WITHIN_S = 10.0
SPIN_JS = """export default (): string => {
  const end = Date.now() + 2000;
  while (Date.now() < end) {}
  return "spun";
};"""


@pytest.fixture
def platform(
    django_db_setup: None, redis_server: PrivateRedis, tmp_path: Path
) -> Iterator[Platform]:
    """Two workers with the default lock TTL and sweep interval, beat and a web server."""
    with platform_processes(tmp_path, redis_server, workers=2) as started:
        yield started


class Follower:
    """A client following a thread's socket on a thread of its own: every frame it got."""

    def __init__(self, platform: Platform, thread_id: str, key: str) -> None:
        self.frames: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._connection = connect(
            f"ws://127.0.0.1:{platform.port}/ws/threads/{thread_id}/",
            additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10,
        )  # fmt: skip
        self._socket = self._connection.__enter__()
        self._reader = ContextThread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                text = self._socket.recv(timeout=0.2)
            except TimeoutError:
                continue
            except Exception:  # the socket closed
                return
            self.frames.append(json.loads(text))

    def sequences(self) -> list[tuple[int, str]]:
        return [(frame["sequence"], frame["type"]) for frame in self.frames
                if frame.get("sequence") is not None]  # fmt: skip

    def close(self) -> None:
        self._stop.set()
        self._reader.join(timeout=5)
        self._connection.__exit__(None, None, None)


def _define(tenant: Tenant) -> None:
    document = chat_bundle(
        [
            {"when": {"last_tool": "spin"}, "respond": {"text": "spun"}},
            {"when": {"last_user_contains": "spin"},
             "respond": {"tool_calls": [{"name": "spin", "arguments": {}}]}},
            {"respond": {"text": "ok: {last_user_message}", "delay_ms": 1000}},
        ],
        tools=["spin"],
    )  # fmt: skip
    document["code_tools"] = [{"name": "spin", "description": "Spins the CPU for 2 s",
                               "args_schema": {"type": "object", "properties": {}},
                               "language": "typescript", "source": SPIN_JS}]  # fmt: skip
    bundle_import(tenant=tenant, document=document)


def _holder(platform: Platform, since: dict[int, int]) -> Worker:
    """The worker that received a drive task since the logs were marked."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for worker in platform.workers:
            worker.since = since[worker.pid]
            if "threads.drive_thread" in worker.log():
                return worker
        time.sleep(0.05)
    raise AssertionError("no worker received the drive task")


def _runners_of(pid: int) -> list[int]:
    """The sandbox runner processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == pid and b"sandbox.runner" in command:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


@pytest.mark.parametrize("where", ["model_call", "code_tool"])
def test_a_killed_workers_thread_finishes_within_10_s_and_clients_miss_nothing(
    platform: Platform, where: str
) -> None:
    tenant = make_tenant(f"kill-{where.replace('_', '-')}")
    _define(tenant)
    key = make_api_key(tenant).secret
    thread = thread_create(tenant=tenant, agent_name="chat")
    follower = Follower(platform, str(thread.pk), key)
    since = {worker.pid: len(worker.log_path.read_text(errors="replace"))
             for worker in platform.workers}  # fmt: skip
    first_text = "please spin" if where == "code_tool" else "first"
    status, _, first = platform.request(
        "POST", f"/api/v1/threads/{thread.pk}/messages", key=key, body={"content": first_text}
    )
    assert status == 202, first
    holder = _holder(platform, since)
    # The turn is inside its model call or its code tool (the runner spins a core).
    deadline = time.monotonic() + 10
    runners: list[int] = []
    while True:
        if where == "code_tool":
            runners = [pid for pid in _runners_of(holder.pid) if _cpu_busy(pid)]
            ready = bool(runners)
        else:
            ready = Turn.objects.filter(thread=thread, status=RunStatus.RUNNING).exists()
        if ready:
            break
        assert time.monotonic() < deadline, f"the turn never reached its {where}"
        time.sleep(0.05)
    time.sleep(0.3)
    status, _, second = platform.request(
        "POST", f"/api/v1/threads/{thread.pk}/messages", key=key, body={"content": "second"}
    )
    assert status == 202, second

    holder.kill()
    killed = time.monotonic()
    turns = list(Turn.objects.filter(thread=thread).order_by("position"))
    while not all(turn.status in TURN_TERMINAL for turn in turns):
        assert time.monotonic() - killed < 30, [turn.status for turn in turns]
        time.sleep(0.1)
        for turn in turns:
            turn.refresh_from_db()
    finished_after = time.monotonic() - killed
    time.sleep(2)  # the follower's last frames
    follower.close()
    platform.workers.remove(holder)  # the fixture's cleanup skips the dead one

    assert finished_after < FINISHED_WITHIN_S, (
        f"finished {finished_after:.1f} s after the kill; the other worker logged:\n"
        f"{platform.worker.log()[-3000:]}"
    )
    assert [turn.status for turn in turns] == ["completed", "completed"]
    answers = list(
        Message.objects.filter(thread=thread, role=MessageRole.ASSISTANT, depth=0)
        .exclude(content=None)
        .order_by("seq")
        .values_list("content", flat=True)
    )
    # The second message joined the running turn (runtime §9): the resumed turn stores it
    # before its next model call and answers both in one.
    assert answers == ["ok: second"], "the resumed turn answers both messages"
    first_turn, joined = turns
    assert joined.host_id == first_turn.pk
    users = Message.objects.filter(thread=thread, role=MessageRole.USER).order_by("seq")
    assert [row.content for row in users] == [first_text, "second"]
    assert {str(row.turn_id) for row in users} == {str(first_turn.pk)}
    stored = list(Event.objects.filter(thread=thread).order_by("sequence")
                  .values_list("sequence", "type"))  # fmt: skip
    assert follower.sequences() == stored, "the socket received every stored event, in order"
    live = set(Message.objects.filter(thread=thread).values_list("id", flat=True))
    created = {event.payload["id"] for event in Event.objects.filter(
        thread=thread, type="message.created")}  # fmt: skip
    deleted = {event.payload["id"] for event in Event.objects.filter(
        thread=thread, type="message.deleted")}  # fmt: skip
    gone = {message_id for message_id in created if message_id not in {str(i) for i in live}}
    assert gone == deleted, "every message removed at takeover has its message.deleted"
    if where == "code_tool":
        deadline = time.monotonic() + 3
        while any(_running(pid) for pid in runners):
            assert time.monotonic() < deadline, f"runners outlived their worker: {runners}"
            time.sleep(0.05)


def _cpu_busy(pid: int) -> bool:
    """Whether ``pid`` used CPU in the last 100 ms (a runner executing guest code)."""
    try:
        before = _cpu_ticks(pid)
        time.sleep(0.1)
        return _cpu_ticks(pid) - before >= 5
    except OSError:
        return False


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


TAKEN_OVER_WITHIN_S = 5.0
ROUNDS = 5


def _turn_holder(run: MakeRun, since: dict[str, int]) -> str:
    """The worker that received a drive task since the log offsets ``since``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for name in run.worker_names():
            if "threads.drive_thread" in run.log(name)[since[name] :]:
                return name
        time.sleep(0.05)
    raise AssertionError("no worker received the drive task")


def test_make_run_takes_a_killed_workers_turn_over_within_5_s_round_after_round(
    run: MakeRun,
) -> None:
    """Rounds follow each other as soon as the killed worker is back (about 10 s apart here,
    not 20 s: any pace under the 60 s in which the old supervisor escalated its backoff
    shows that a crash which is not a crash loop is restarted at once)."""
    assert len(run.worker_names()) == 2, "make run starts two workers"
    tenant = make_tenant("kill-rounds")
    _define(tenant)
    key = make_api_key(tenant).secret
    threads, taken_over_s, restarted_s = [], [], []
    for round_ in range(ROUNDS):
        thread = thread_create(tenant=tenant, agent_name="chat")
        threads.append(thread)
        since = run.log_sizes()
        status, body = run.request("POST", f"/api/v1/threads/{thread.pk}/messages", key=key,
                                   body={"content": f"m{round_}"})  # fmt: skip
        assert status == 202, body
        holder = _turn_holder(run, since)
        deadline = time.monotonic() + 10
        while not Turn.objects.filter(thread=thread, status=RunStatus.RUNNING).exists():
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.05)
        time.sleep(0.3)  # inside its model call
        killed = run.process(holder)
        since = {holder: len(run.log(holder))}
        killed_at = time.time()
        killed.kill()
        killed.wait()
        takeover, restarted_at = None, None
        while takeover is None or restarted_at is None:
            assert time.time() - killed_at < 30, f"round {round_}: no takeover or restart"
            time.sleep(0.05)
            if restarted_at is None and run.process(holder) is not killed:
                restarted_at = time.time()
            takeover = Log.objects.filter(thread=thread, kind="incident",
                                          data__incident="takeover").first()  # fmt: skip
        taken_over_s.append(round(takeover.created_at / 1e6 - killed_at, 2))
        restarted_s.append(round(restarted_at - killed_at, 2))
        run.wait_ready(since=since)  # the next round kills with both workers up

    print(f"kill -> takeover: {taken_over_s} s; kill -> restart: {restarted_s} s")
    assert max(taken_over_s) < TAKEN_OVER_WITHIN_S, f"kill -> takeover: {taken_over_s}"
    # Each restart waits the first backoff (and a supervisor check), never a grown one.
    assert max(restarted_s) < RESTART_BACKOFF_S[0] + 1.5, f"kill -> restart: {restarted_s}"
    for round_, thread in enumerate(threads):
        turn = Turn.objects.get(thread=thread)
        deadline = time.monotonic() + 15
        while turn.status not in TURN_TERMINAL:
            assert time.monotonic() < deadline, f"round {round_}: the turn never finished"
            time.sleep(0.1)
            turn.refresh_from_db()
        assert turn.status == "completed"
        said = list(
            Message.objects.filter(thread=thread, depth=0)
            .exclude(role=MessageRole.SYSTEM)
            .exclude(content=None)
            .order_by("seq")
            .values_list("role", "content")
        )
        assert said == [("user", f"m{round_}"), ("assistant", f"ok: m{round_}")], (
            "nothing lost, nothing answered twice"
        )

"""In-process engine tests: real PostgreSQL and Redis, the scripted model, no worker.

``engine`` gives a tenant with definitions and registry tools, and ``drive`` runs the
thread's pending work in this process (as a worker's ``drive_thread`` would) answering every
model with one in-process :class:`Script`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from agents.bundles import bundle_import
from agents.providers.base import ModelSpec
from agents.providers.scripted import Script
from agents.registry import Registry, ToolResult, tool, use_registry
from agents.selectors import model_load
from tenancy.models import Tenant
from threads.models import Message, Thread
from threads.runtime.driver import DriveResult, thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.services import wakeups
from threads.services.inbox import message_queue


class EchoArgs(BaseModel):
    text: str


def _tools(calls: list[tuple[str, Any]]) -> None:
    @tool(description="Echo the text back.", args=EchoArgs)
    def echo(state: Any, args: EchoArgs) -> str:
        calls.append(("echo", args.text))
        return f"echo: {args.text}"

    @tool(description="Always fails.")
    def broken(state: Any) -> ToolResult:
        calls.append(("broken", None))
        return ToolResult.failure("it is broken")

    @tool(
        description="Finish the session.",
        args={"type": "object", "properties": {"summary": {"type": "string"}}},
    )
    def finish(state: Any, args: dict[str, Any]) -> str:
        calls.append(("finish", args))
        return "finished"

    @tool(
        description="Fail the session.",
        args={"type": "object", "properties": {"reason": {"type": "string"}}},
    )
    def give_up(state: Any, args: dict[str, Any]) -> str:
        calls.append(("give_up", args))
        return "gave up"

    @tool(description="Ends the session from inside a tool.")
    def end_session(state: Any) -> str:
        state.stop_session(result="done by tool")
        return "ending"

    @tool(description="Queues a follow-up tool.")
    def chain(state: Any) -> str:
        state.queue_tool("echo", {"text": "queued"})
        return "chained"


def model(name: str = "m") -> dict[str, Any]:
    return {
        "name": name,
        "provider": "scripted",
        "model_id": "scripted",
        "config": {"rules": [{"respond": {"text": "x"}}]},
    }


def prompt(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "tool_description": f"The {name} prompt", "prompt": f"You are {name}.",
        "model": "m", "include_chat": True, "include_past_tools": True, **fields,
    }  # fmt: skip


@dataclass
class Engine:
    tenant: Tenant
    registry: Registry
    script: Script = field(default_factory=Script)
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)

    def define(
        self,
        *,
        prompts: list[dict[str, Any]],
        agents: list[dict[str, Any]],
        models: list[dict[str, Any]] | None = None,
    ) -> None:
        bundle_import(
            tenant=self.tenant,
            document={
                "version": 1,
                "models": models or [model()],
                "prompts": prompts,
                "agents": agents,
            },
        )

    def thread(self, agent: str) -> Thread:
        return thread_open(tenant=self.tenant, agent_name=agent)

    def send(self, thread: Thread, content: str, role: str = "user") -> str:
        work = message_queue(thread=thread, role=role, content=content)
        return str(work.payload["message_id"])

    def runtime(self) -> Runtime:
        return Runtime(load_model=lambda name: self.script.spec(name), retry_base_delay_s=0)

    def drive(self, thread: Thread) -> DriveResult:
        result = thread_drive(thread_id=thread.pk, runtime=self.runtime())
        thread.refresh_from_db()
        return result

    @staticmethod
    def history(thread: Thread, *, depth: int | None = 0) -> list[tuple[str, str | None]]:
        rows = Message.objects.filter(thread=thread).order_by("seq")
        if depth is not None:
            rows = rows.filter(depth=depth)
        return [(row.role, row.content) for row in rows]


@pytest.fixture
def engine(tenant: Tenant) -> Iterator[Engine]:
    with use_registry() as scoped:
        found: list[tuple[str, Any]] = []
        _tools(found)
        yield Engine(tenant=tenant, registry=scoped, tool_calls=found)


EngineFactory = Callable[..., Engine]


# Helpers for the stop, tool and hook tests --------------------------------------------------


def priced_runtime(engine: Engine) -> Runtime:
    """Like ``engine.runtime()``, but each scripted model carries the prices of the tenant's
    model definition of the same name (``engine.script.spec`` has none)."""

    def load(name: str) -> ModelSpec:
        stored = model_load(tenant=engine.tenant, name=name, env=lambda _name: None)
        return dataclasses.replace(engine.script.spec(name), prices=stored.prices)

    return Runtime(load_model=load, retry_base_delay_s=0)


def drive_with(engine: Engine, thread: Thread, runtime: Runtime) -> DriveResult:
    result = thread_drive(thread_id=thread.pk, runtime=runtime)
    thread.refresh_from_db()
    return result


@pytest.fixture
def wakes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Thread ids that ``drive_thread`` was enqueued for, instead of sending them to the
    broker: in ``transaction=True`` tests on-commit callbacks run, and a test drives itself."""
    woken: list[str] = []

    def enqueue(thread_id: object, tenant_id: object) -> None:
        woken.append(str(thread_id))

    monkeypatch.setattr(wakeups, "wake_thread", enqueue)
    return woken


Row = tuple[str, str, str | None, str]


def rows(thread: Thread, *, depth: int | None = 0) -> list[Row]:
    """(role, side, content, tool_status) of the thread's messages (top level by default)."""
    found = Message.objects.filter(thread=thread).order_by("seq")
    if depth is not None:
        found = found.filter(depth=depth)
    return [(m.role, m.side, m.content, m.tool_status) for m in found]

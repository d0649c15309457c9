"""Code mode: a prompt with ``code_mode: true`` offers the model a ``code`` tool whose argument
is a JavaScript or TypeScript program that calls the prompt's function tools as async
functions (``await tools.refund({amount: 5})``) inside the sandbox.

Each call the program makes crosses the sandbox's host-function bridge to this flow's thread
(the dispatcher): it is weighed by the permission rules like any tool call, run, logged, and
recorded in the call's **journal**. When a rule asks a person, the program is terminated and
the turn pauses on an action that keeps the journal: no runner and no worker wait. Once the
person decides, the same source runs again (**deterministic replay**): the calls the journal
holds return their recorded results without running again, the paused call runs as decided,
and the program carries on. A replay that makes a different call than the journal recorded
fails the ``code`` call, naming the first difference.

For replay to hold, the program must make the same calls in the same order given the same
results: no ``Date``, ``Math.random`` or other source of change; ``helpers.now()`` and
``helpers.random()`` are journaled host helpers that return the same values on replay.
"""

from __future__ import annotations

import json
import queue
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings

from agents.providers.base import ToolCall
from agents.registry import ToolResult
from agents.schemas import ArgumentsInvalid, validate_args
from common.errors import DomainError
from threads.models import Action, ActionStatus
from threads.runtime.definitions import PROGRAM_KINDS
from threads.services.actions import action_allows, denial_result
from threads.services.code import code_run, code_started, sandbox_turn
from threads.services.code_usage import sandbox_charge, sandbox_payer

if TYPE_CHECKING:
    from sandbox import CodeExecution
    from threads.runtime.tools import ToolRunner

HELPERS: Final = ("now", "random")
_DONE: Final = object()


@dataclass
class Replay:
    """What a resumed ``code`` call replays: the calls made before the pause, and the
    answered action for the call at ``len(journal)``."""

    journal: list[dict[str, Any]]
    decided: Action


def replay_of(action: Action) -> Replay | None:
    """The replay an answered action carries, when it paused a ``code`` call."""
    saved = action.resume.get("code")
    if not isinstance(saved, Mapping):
        return None
    return Replay(journal=list(saved.get("journal") or []), decided=action)


class CodePaused(Exception):
    """A call of the program needs a person; the flow pauses its turn."""

    def __init__(self, index: int, call: ToolCall, rule: Any, schema: Any) -> None:
        super().__init__(f"call {index} of the program ({call.name}) waits for a person")
        self.index, self.call, self.rule, self.schema = index, call, rule, schema
        self.journal: list[dict[str, Any]] = []  # the calls made before it


class ReplayDiverged(DomainError):
    code = "replay_diverged"


@dataclass
class _Program:
    """One run of a ``code`` call: the journal so far and the replay it follows."""

    runner: ToolRunner
    call: ToolCall
    pausable: bool
    replay: Replay | None
    journal: list[dict[str, Any]] = field(default_factory=list)
    paused: CodePaused | None = None

    def host(self, index: int, name: str, arguments: Any) -> Any:
        """The result of the program's call ``index`` (``name``: a tool, or ``helpers.x``)."""
        recorded = self.replay.journal if self.replay is not None else []
        if index < len(recorded):
            return self._replayed(recorded[index], index, name, arguments)
        if name.startswith("helpers."):
            value: Any = time.time() * 1000 if name == "helpers.now" else random.random()  # noqa: S311
            self.journal.append({"name": name, "arguments": None, "ok": True, "value": value})
            return value
        inner = ToolCall(id=f"{self.call.id}.{index}", name=name, arguments=arguments)
        decided = self.replay.decided if self.replay is not None else None
        if decided is not None and index == len(recorded):
            if (name, arguments) != (decided.tool_name, decided.arguments):
                raise self._diverged(index, name, arguments, decided.tool_name, decided.arguments)
            result = self._run_decided(inner, decided)
        else:
            result = self._run(inner)
        self.journal.append({
            "name": name, "arguments": arguments, "ok": result.status == "success",
            "value": result.result if result.status == "success" else result.error,
        })  # fmt: skip
        if result.status != "success":
            raise DomainError(result.error or "the tool failed")
        return result.result

    def _replayed(self, entry: Mapping[str, Any], index: int, name: str, arguments: Any) -> Any:
        if entry["name"] != name or (
            not name.startswith("helpers.") and entry["arguments"] != arguments
        ):
            raise self._diverged(index, name, arguments, entry["name"], entry["arguments"])
        self.journal.append(dict(entry))
        if not entry["ok"]:
            raise DomainError(str(entry["value"]))
        return entry["value"]

    @staticmethod
    def _diverged(
        index: int, name: str, arguments: Any, was: str, was_arguments: Any
    ) -> ReplayDiverged:
        return ReplayDiverged(
            f"the program's call {index + 1} is {name}({json.dumps(arguments)}) on replay "
            f"but was {was}({json.dumps(was_arguments)}) before it paused: code mode needs a "
            "program that makes the same calls each time (use helpers.now() and "
            "helpers.random(), not Date or Math.random)"
        )

    def _run_decided(self, inner: ToolCall, action: Action) -> ToolResult:
        if not action_allows(action):
            return self._logged(inner, denial_result(action))
        if action.status == ActionStatus.EDITED:
            arguments = dict((action.response or {})["arguments"])
            inner = ToolCall(id=inner.id, name=inner.name, arguments=arguments)
        return self._execute(inner)

    def _run(self, inner: ToolCall) -> ToolResult:
        resolved = self.runner.tools.get(inner.name)
        if resolved is None or resolved.kind not in PROGRAM_KINDS:
            return ToolResult.failure(
                f"tools.{inner.name} is not a function tool of prompt {self.runner.prompt_name!r}"
            )
        verdict = self.runner.weigh(inner, resolved)
        if verdict.decision == "deny":
            return self._logged(inner, self.runner.denial(inner, verdict))
        if verdict.decision == "ask":
            if not self.pausable:
                return self._logged(inner, self.runner.unavailable(inner, verdict))
            raise CodePaused(len(self.journal), inner, verdict.rule, resolved.parameters)
        return self._execute(inner)

    def _execute(self, inner: ToolCall) -> ToolResult:
        resolved = self.runner.tools[inner.name]
        try:
            arguments = validate_args(resolved.parameters, inner.arguments)
        except ArgumentsInvalid as error:
            return self._logged(inner, ToolResult.failure(error.message, code=error.code))
        started = time.perf_counter()
        result = self.runner.call_function(resolved, arguments)
        return self._logged(inner, result, started)

    def _logged(
        self, inner: ToolCall, result: ToolResult, started: float | None = None
    ) -> ToolResult:
        duration = round((time.perf_counter() - started) * 1000, 3) if started else 0.0
        offered = self.runner.tools.get(inner.name)
        kind = offered.kind if offered is not None else "function"
        self.runner.flow.log_tool(inner, result, None, duration, kind=kind)
        return result


def code_mode_run(
    runner: ToolRunner, call: ToolCall, arguments: Mapping[str, Any], *, pausable: bool,
    replay: Replay | None,
) -> ToolResult:  # fmt: skip
    """Run the program of ``code`` call ``call`` with this flow's thread dispatching its tool
    calls (see the module docstring), in its tenant's turn for the sandbox
    (:func:`~threads.services.code.sandbox_turn`); its budget, ``CODE_TOOL_TIMEOUT_S``, counts
    from its start on a runner. However it ends, the program leaves its ledger row
    (:func:`~threads.services.code_usage.sandbox_charge`, named ``code``). Raises CodePaused when a
    call needs a person."""
    program = _Program(runner, call, pausable, replay)
    requests: queue.Queue[Any] = queue.Queue()
    counter = iter(range(1_000_000))

    def bridge(name: str) -> Callable[..., Any]:
        def call_host(args: Any = None) -> Any:
            reply: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
            requests.put((next(counter), name, {} if args is None else args, reply))
            ok, value = reply.get()
            if not ok:
                raise RuntimeError(value)
            return value

        return call_host

    tools = {
        name: bridge(name) for name, tool in runner.tools.items() if tool.kind in PROGRAM_KINDS
    }
    helpers = {name: bridge(f"helpers.{name}") for name in HELPERS}
    options = {"language": arguments.get("language") or "typescript",
               "filename": "<code>", "globals": {"tools": tools, "helpers": helpers}}  # fmt: skip
    flow = runner.flow
    abort = flow.execution.abort_signal
    budget_s = settings.CODE_TOOL_TIMEOUT_S
    with sandbox_turn(tenant_id=flow.thread.tenant_id, abort=abort) as wait_s:
        execution = code_run(str(arguments["source"]), options, abort=abort)
        execution.add_done_callback(lambda _result: requests.put(_DONE))
        code_started(execution, wait_s=wait_s)
        diverged = _serve(program, execution, requests, budget_s=budget_s)
    sandbox_charge(execution, payer=sandbox_payer(thread=flow.thread, turn=flow.turn),
                   name=call.name)  # fmt: skip
    if diverged is not None:
        return ToolResult.failure(diverged.message, code=diverged.code)
    if program.paused is not None:
        raise program.paused
    outcome = execution.result()
    if outcome.status != "success":
        message = outcome.error.message if outcome.error is not None else outcome.status
        return ToolResult.failure(f"the program failed ({outcome.status}): {message}")
    value = outcome.result
    return ToolResult.success(value if isinstance(value, str) else json.dumps(value, default=str))


def _serve(
    program: _Program, execution: CodeExecution, requests: queue.Queue[Any], *, budget_s: float
) -> ReplayDiverged | None:
    """Answer the running program's calls on this thread until it settles, terminating it
    past ``budget_s``; returns how a replay diverged, if it did."""
    deadline = time.monotonic() + budget_s
    while True:
        program.runner.flow.idle()  # the program runs; each of its calls takes a connection
        try:
            item = requests.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            execution.terminate(f"the program ran past {budget_s:g} s")
            continue
        if item is _DONE:
            return None
        index, name, args, reply = item
        if program.paused is not None:
            reply.put((False, "the program is paused for a person's decision"))
            continue
        try:
            reply.put((True, program.host(index, name, args)))
        except CodePaused as paused:
            paused.journal = list(program.journal)
            program.paused = paused
            reply.put((False, "the program is paused for a person's decision"))
            execution.terminate("paused for a person's decision")
        except ReplayDiverged as diverged:
            reply.put((False, diverged.message))
            execution.terminate(diverged.message)
            return diverged
        except DomainError as error:
            reply.put((False, error.message))

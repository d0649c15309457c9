"""``POST /api/v1/agui/{agent}``: run an agent for an AG-UI frontend (CopilotKit and the
like). The body is an AG-UI ``RunAgentInput``; the answer is the run's AG-UI events as
Server-Sent Events, mapped from the turn's events (:mod:`interop.agui.stream`).

A run whose last message is the user's submits it as a turn of the thread ``threadId``
names (:mod:`interop.agui.runs`); a run whose messages end with ``tool`` messages (a
frontend tool's results) or that carries ``resume`` entries (an interrupt's answers)
answers what the thread's paused turn waits for, and streams the rest of that turn.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput
from django.db import transaction
from django.http import HttpResponseBase
from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agents.selectors import agent_load
from common.errors import NotFound, ValidationFailed
from common.schema import error_response
from interop.agui import schema as _schema  # noqa: F401  # registers the body's schema
from interop.agui.inputs import RunRequest, run_request_parse
from interop.agui.runs import (
    RunTarget,
    agui_thread_find,
    agui_thread_for,
    agui_turn_resume,
    agui_turn_submit,
    newest_sequence,
    turn_of_thread,
)
from interop.agui.stream import RunScope, encoded, run_response, run_started, state_snapshot
from threads.api.base import IDEMPOTENCY_KEY, TenantObjectView, idempotent
from threads.api.events import EventStreamRenderer, sse_response
from threads.runtime.client_tools import client_tools_of
from threads.services.threads import thread_get
from threads.streams import EventCursor

DESCRIPTION = (
    "The body is an AG-UI `RunAgentInput`; the answer is the run as AG-UI events over "
    "Server-Sent Events (`data: <event JSON>`), from `RUN_STARTED` to `RUN_FINISHED` or "
    "`RUN_ERROR`. `threadId` names one of the agent's threads (its id) or the frontend's own "
    "conversation id (a new thread keeps it and is found by it next time). The last user "
    "message is the turn's input; the thread's stored history is its context. `tools` are "
    "frontend tools the model may call: the run ends with the call pending "
    "(`pendingToolCallIds`), and the next run's `tool` message resumes the turn with its "
    "result. A person's approval or input ends the run with an interrupt, answered by the "
    "next run's `resume`. A repeat with the same `Idempotency-Key` streams the same turn."
)
AGUI_EVENTS = OpenApiResponse(
    {"type": "string"},
    description="AG-UI events as Server-Sent Events: each frame's `data` is one event's JSON",
)


class AguiRunView(TenantObjectView):
    """Resolves ``agent`` within the caller's tenant (another tenant's is a 404)."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """An error answers JSON (``application/json``), whatever ``Accept`` asked: only
        the run itself is a stream."""
        if getattr(response, "exception", False):
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    def resolve(self) -> object:
        name = self.kwargs["agent"]
        try:
            return agent_load(tenant=self.principal.tenant, name=name)
        except NotFound:
            raise NotFound(f"no agent {name!r}") from None

    @extend_schema(
        summary="Run an agent as an AG-UI event stream", description=DESCRIPTION,
        request=RunAgentInput, parameters=[IDEMPOTENCY_KEY],
        responses={(200, "text/event-stream"): AGUI_EVENTS,
                   409: error_response(409, "The thread is terminated or busy, no frontend "
                                       "tool call waits for the result sent, or the "
                                       "Idempotency-Key was used for another request")},
        operation_id="agui_run", tags=["ag-ui"],
    )  # fmt: skip
    def post(self, request: Request, agent: str) -> HttpResponseBase:
        """Submit the run's user input as a turn (or answer what the paused turn waits
        for) and stream the turn as AG-UI events."""
        run = run_request_parse(request.data)
        target = self._resume(run, agent) if run.text is None else self._submit(request, run)
        scope = RunScope(
            turn_id=str(target.turn.pk), thread_id=run.thread_id, run_id=run.run_id,
            frontend_tools=frozenset(client_tools_of(target.turn)), answered=target.answered,
        )  # fmt: skip
        ours = {"thread_id": str(target.thread.pk), "turn_id": str(target.turn.pk)}
        first = encoded([
            run_started(thread_id=run.thread_id, run_id=run.run_id, ours=ours),
            state_snapshot(target.thread),
        ])  # fmt: skip
        cursor = EventCursor(thread=target.thread, after=target.after)
        stream = sse_response(request, cursor, scope, first=[first])
        return run_response(stream, scope, target.thread)

    def _submit(self, request: Request, run: RunRequest) -> RunTarget:
        tenant, agent = self.principal.tenant, self.kwargs["agent"]

        def submit() -> tuple[int, dict[str, Any]]:
            with transaction.atomic():
                thread = agui_thread_for(tenant=tenant, agent=agent, thread_id=run.thread_id)
                after = newest_sequence(thread=thread)
                turn = agui_turn_submit(principal=self.principal, thread=thread, run=run)
            return 200, {"thread_id": str(thread.pk), "turn_id": str(turn.pk), "after": after}

        answer = idempotent(request, self.principal, submit).data
        thread = thread_get(tenant=tenant, thread_id=answer["thread_id"])
        turn = turn_of_thread(thread=thread, turn_id=answer["turn_id"])
        return RunTarget(thread, turn, int(answer["after"]))

    def _resume(self, run: RunRequest, agent: str) -> RunTarget:
        thread = agui_thread_find(
            tenant=self.principal.tenant, agent=agent, thread_id=run.thread_id
        )
        if thread is None:
            raise ValidationFailed(
                f"threadId: no thread of agent {agent!r} is known as {run.thread_id!r}; a "
                "new thread starts with a user message",
                field="threadId",
            )
        return agui_turn_resume(principal=self.principal, thread=thread, run=run)


urlpatterns = [
    path("agui/<str:agent>", AguiRunView.as_view(), name="agui-run"),
]

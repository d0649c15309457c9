"""``POST /api/v1/threads/wait``: create a thread with its first turn (``POST /threads``
with an ``input``), then wait for that turn as ``POST .../turns/wait`` does."""

from __future__ import annotations

import time
from typing import ClassVar

from django.http import HttpResponseBase
from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from common.schema import error_responses
from tenancy.models import Role
from tenancy.viewsets import request_principal
from threads.api.base import IDEMPOTENCY_KEY, idempotent
from threads.api.messages import MessageInput
from threads.api.threads import ThreadCreateInput, ThreadSerializer, thread_opener
from threads.api.turn_wait import TurnWaitQuery, TurnWaitSerializer, waited
from threads.models import Turn
from threads.services.turns import turn_get

DESCRIPTION = (
    "The body of `POST /threads` (`input` required), then the answer of `GET "
    "/turns/{turn_id}/wait` for its first turn, with `thread`: `done` is false when `timeout` "
    "passed first, and the turn runs on. A repeat with the same `Idempotency-Key` creates "
    "nothing and waits for the first request's turn."
)


class ThreadCreateWaitInput(ThreadCreateInput):
    input = MessageInput(
        help_text="the first turn's message, as `POST .../turns` takes it: content, role, "
        "attachments, silent, metadata"
    )


class ThreadWaitAnswerSerializer(TurnWaitSerializer):
    """A new thread's first turn after a wait, and the thread."""

    thread = ThreadSerializer(help_text="the thread as it was created (as `POST /threads` answers)")


WAIT_ANSWER = OpenApiResponse(
    ThreadWaitAnswerSerializer,
    description="`{thread, turn, messages, done}`: the thread, its first turn, the messages "
    "the turn wrote, and whether it is terminal (as `POST .../turns/wait` answers)",
)


class ThreadCreateWaitView(APIView):
    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.MEMBER

    @extend_schema(
        summary="Create a thread, submit its first turn and wait for it to end",
        description=DESCRIPTION, request=ThreadCreateWaitInput,
        parameters=[TurnWaitQuery, IDEMPOTENCY_KEY],
        responses={200: WAIT_ANSWER, **error_responses(409)}, operation_id="threads_create_wait",
    )  # fmt: skip
    def post(self, request: Request) -> HttpResponseBase:
        """``POST /threads`` with an ``input``, then wait for that turn as ``POST
        …/turns/wait`` does (``timeout`` seconds, default 30, at most 600); the answer adds
        the ``thread``. A repeat with the same ``Idempotency-Key`` waits for the first
        request's turn."""
        since = time.monotonic()
        query = TurnWaitQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        payload = ThreadCreateWaitInput(data=request.data)
        payload.is_valid(raise_exception=True)
        principal = request_principal(request)
        created: list[Turn] = []
        answer = idempotent(
            request, principal, thread_opener(principal, payload.validated_data, created)
        )
        thread = dict(answer.data)
        submitted = thread.pop("turn")
        turn = created[0] if created else turn_get(tenant=principal.tenant, turn_id=submitted["id"])
        timeout = float(query.validated_data["timeout"])
        response = waited(request, turn, timeout, since, extra={"thread": thread})
        if replayed := answer.get("Idempotent-Replayed"):
            response["Idempotent-Replayed"] = replayed
        return response


urlpatterns = [
    path("threads/wait", ThreadCreateWaitView.as_view(), name="threads-create-wait"),
]

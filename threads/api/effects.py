"""A thread's scheduled effects: ``GET /api/v1/threads/{id}/effects`` (filters),
``GET``/``DELETE …/effects/{effect_id}`` (read, cancel), ``POST …/effects/{effect_id}/run``
and ``…/replay`` (spec Threads §5, DIGEST §9 and §19)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import Conflict
from common.pagination import MAX_OFFSET
from common.schema import error_responses
from threads.api.base import ThreadScopedView
from threads.models import EffectStatus
from threads.services.effects import (
    effect_cancel,
    effect_get,
    effect_replay,
    effect_run_now,
    effects_json,
    effects_of,
    upcoming_count,
)


class EffectListQuery(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=EffectStatus.choices, required=False)
    name = serializers.CharField(required=False, max_length=64)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_OFFSET, default=0)


class EffectsView(ThreadScopedView):
    @extend_schema(
        parameters=[EffectListQuery], responses=OpenApiTypes.OBJECT,
        operation_id="thread_effects_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's effects, soonest first: ``{count, next, results, upcoming}``
        (``upcoming``: how many are pending); ``?status=`` and ``?name=`` filter."""
        query = EffectListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = query.validated_data
        thread = self.thread()
        rows = effects_of(thread=thread, name=options.get("name"), status=options.get("status"))
        total = rows.count()
        offset, limit = options["offset"], options["limit"]
        return Response(
            {"count": total, "next": None if offset + limit >= total else offset + limit,
             "results": effects_json(list(rows[offset : offset + limit])),
             "upcoming": upcoming_count(thread=thread)}
        )  # fmt: skip


class EffectView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="thread_effects_retrieve")
    def get(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """The effect: name, args, status (``processing`` while its handler runs), when it
        is due, attempts, error, and its links (``manual_run``, ``replayed_from``)."""
        found = effect_get(thread=self.thread(), effect_id=effect_id)
        return Response(effects_json([found])[0])

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **error_responses(409)},
        operation_id="thread_effects_cancel",
    )  # fmt: skip
    def delete(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """Cancel a pending effect (``user_canceled``, ``effect.removed``). 409 when it is
        not pending (it ran, runs now, or was cancelled)."""
        thread = self.thread()
        cancelled = effect_cancel(thread=thread, effect_id=effect_id, by_agent=False)
        if cancelled is None:
            current = effects_json([effect_get(thread=thread, effect_id=effect_id)])[0]
            raise Conflict(f"effect {effect_id} is {current['status']}; only a pending one "
                           "can be cancelled")  # fmt: skip
        return Response(effects_json([cancelled])[0])


class EffectRunView(ThreadScopedView):
    @extend_schema(
        request=None, responses={200: OpenApiTypes.OBJECT, **error_responses(409)},
        operation_id="thread_effects_run",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """Run now: a pending effect is due at once (``{"action": "ran", "id"}``); a finished
        one is replayed as a new linked row (``{"action": "replayed", "id",
        "replayed_id"}``). 409 while it runs."""
        action, row = effect_run_now(thread=self.thread(), effect_id=effect_id)
        body: dict[str, Any] = {"action": action, "id": effect_id, "effect": effects_json([row])[0]}
        if action == "replayed":
            body["replayed_id"] = str(row.pk)
        return Response(body)


class EffectReplayView(ThreadScopedView):
    @extend_schema(
        request=None, responses={201: OpenApiTypes.OBJECT, **error_responses(409)},
        operation_id="thread_effects_replay",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """Replay a finished effect: a new row with its name and args, due now, linked to it
        (``replayed_from``, ``manual_run``). 409 for a pending one (run it instead)."""
        row = effect_replay(thread=self.thread(), effect_id=effect_id)
        return Response(effects_json([row])[0], status=status.HTTP_201_CREATED)


urlpatterns = [
    path("effects", EffectsView.as_view(), name="thread-effects"),
    path("effects/<uuid:effect_id>", EffectView.as_view(), name="thread-effect"),
    path("effects/<uuid:effect_id>/run", EffectRunView.as_view(), name="thread-effect-run"),
    path(
        "effects/<uuid:effect_id>/replay",
        EffectReplayView.as_view(),
        name="thread-effect-replay",
    ),
]

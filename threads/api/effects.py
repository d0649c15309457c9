"""A thread's scheduled effects: ``GET /api/v1/threads/{id}/effects`` (filters),
``GET``/``DELETE …/effects/{effect_id}`` (read, cancel), ``POST …/effects/{effect_id}/run``
and ``…/replay`` (spec Threads §5, DIGEST §9 and §19)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import Conflict
from common.pagination import PAGE_PARAMETERS, paginate_page
from common.schema import error_responses, microseconds, page_of
from threads.api.base import IDEMPOTENCY_KEY, ThreadScopedView, idempotent
from threads.models import EffectStatus
from threads.services.effects import (
    effect_cancel,
    effect_get,
    effect_replay,
    effect_run_now,
    effects_json,
    effects_of,
)


class EffectListQuery(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=EffectStatus.choices, required=False,
        help_text="only the effects in this status (`processing` are among `pending`)",
    )  # fmt: skip
    name = serializers.CharField(
        required=False, max_length=64, help_text="only the effects of this name"
    )


class EffectSerializer(serializers.Serializer[Any]):
    """A scheduled effect: a registry handler that runs once, when it is due."""

    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    name = serializers.CharField(help_text="the registry effect it runs")
    args = serializers.JSONField(help_text="its arguments (any JSON, null for none)")
    status = serializers.ChoiceField(
        choices=EffectStatus.choices, help_text="`processing` while its handler runs"
    )
    scheduled_at = microseconds("when it is due")
    created_at = microseconds("when it was scheduled")
    attempts = serializers.IntegerField()
    error = serializers.CharField(allow_null=True, help_text="why its handler failed")
    completed_at = microseconds("when it finished or was cancelled", allow_null=True)
    manual_run = serializers.BooleanField(help_text="it was run or replayed from the API")
    replayed_from = serializers.UUIDField(allow_null=True, help_text="the effect it replays")


class EffectRunSerializer(serializers.Serializer[Any]):
    """What running an effect now did: a pending one is due at once (`ran`); a finished one
    is replayed as a new, linked effect (`replayed`)."""

    action = serializers.CharField(help_text="`ran` or `replayed`")
    id = serializers.UUIDField(help_text="the effect asked for")
    effect = EffectSerializer(help_text="the effect that runs")
    replayed_id = serializers.UUIDField(required=False, help_text="`replayed`: the new effect")


class EffectsView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's effects", description="Soonest first.",
        parameters=[EffectListQuery, *PAGE_PARAMETERS], responses=page_of(EffectSerializer),
        operation_id="thread_effects_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's effects, soonest first; ``?status=`` and ``?name=`` filter."""
        query = EffectListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = query.validated_data
        rows = effects_of(
            thread=self.thread(), name=options.get("name"), status=options.get("status")
        )
        return paginate_page(request, rows, effects_json, view=self)


class EffectView(ThreadScopedView):
    @extend_schema(
        summary="Get an effect", responses=EffectSerializer,
        operation_id="thread_effects_retrieve",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """The effect: name, args, status (``processing`` while its handler runs), when it
        is due, attempts, error, and its links (``manual_run``, ``replayed_from``)."""
        found = effect_get(thread=self.thread(), effect_id=effect_id)
        return Response(effects_json([found])[0])

    @extend_schema(
        summary="Cancel a pending effect",
        description="It ends `user_canceled`. 409 when it is not pending (it ran, runs now, "
        "or was cancelled).",
        responses={200: EffectSerializer, **error_responses(409)},
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
        summary="Run an effect now",
        description="A pending effect is due at once (`ran`); a finished one is replayed as a "
        "new, linked effect (`replayed`). 409 while its handler runs.",
        request=None, parameters=[IDEMPOTENCY_KEY],
        responses={200: EffectRunSerializer, **error_responses(409)},
        operation_id="thread_effects_run",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """Run now: a pending effect is due at once (``{"action": "ran", "id"}``); a finished
        one is replayed as a new linked row (``{"action": "replayed", "id",
        "replayed_id"}``). 409 while it runs. With an ``Idempotency-Key``, a repeat answers
        the first run instead of replaying the effect again."""

        def run() -> tuple[int, dict[str, Any]]:
            action, row = effect_run_now(thread=self.thread(), effect_id=effect_id)
            body: dict[str, Any] = {
                "action": action, "id": effect_id, "effect": effects_json([row])[0]
            }  # fmt: skip
            if action == "replayed":
                body["replayed_id"] = str(row.pk)
            return status.HTTP_200_OK, body

        return idempotent(request, self.principal, run)


class EffectReplayView(ThreadScopedView):
    @extend_schema(
        summary="Replay a finished effect",
        description="A new effect with its name and args, due now, linked to it "
        "(`replayed_from`, `manual_run`). 409 for a pending one (run it instead).",
        request=None, parameters=[IDEMPOTENCY_KEY],
        responses={201: EffectSerializer, **error_responses(409)},
        operation_id="thread_effects_replay",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, effect_id: str) -> Response:
        """Replay a finished effect: a new row with its name and args, due now, linked to it
        (``replayed_from``, ``manual_run``). 409 for a pending one (run it instead). With an
        ``Idempotency-Key``, a repeat answers the first replay and makes no other."""

        def replay() -> tuple[int, dict[str, Any]]:
            row = effect_replay(thread=self.thread(), effect_id=effect_id)
            return status.HTTP_201_CREATED, effects_json([row])[0]

        return idempotent(request, self.principal, replay)


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

"""``POST /api/v1/threads/{id}/turns/estimate``: a dry run of a turn's first model call (its
worst case and how each budget would take it), without running or reserving anything."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.inputs import StrictInput
from tenancy.models import Role
from threads.api.base import ThreadScopedView
from threads.api.messages import EndUserField
from threads.runtime.estimate import turn_estimate

ESTIMATE_DESCRIPTION = (
    "What the first model call of a turn with `content` would reserve at most (input tokens "
    "bounded by the context's bytes, output by the model's cap) and cost at most, and for each "
    "budget of its scope where it stands and the output it would allow. `would` is `run`, or "
    "the policy (`pause`, `stop`, `reject`) of the first budget with no room. Nothing runs and "
    "nothing is reserved (docs/usage.md)."
)


class EstimateInput(StrictInput):
    content = serializers.CharField(
        required=False, allow_blank=True, max_length=1_000_000, trim_whitespace=False,
        help_text="the message the turn would carry",
    )  # fmt: skip
    user = EndUserField()


class EstimateSerializer(serializers.Serializer[Any]):
    """The worst case of a turn's first model call and how its budgets would take it."""

    agent = serializers.CharField()
    prompt = serializers.CharField()
    model = serializers.CharField()
    input_tokens_max = serializers.IntegerField()
    output_tokens_max = serializers.IntegerField()
    worst_cost = serializers.CharField(allow_null=True, help_text="null: the model has no prices")
    currency = serializers.CharField()
    cost_known = serializers.BooleanField()
    budgets = serializers.ListField(child=serializers.DictField())
    would = serializers.ChoiceField(choices=["run", "pause", "stop", "reject"])


class EstimateView(ThreadScopedView):
    write_role = Role.READ_ONLY  # a dry run changes nothing

    @extend_schema(
        summary="Estimate a turn's cost and budgets (dry run)", description=ESTIMATE_DESCRIPTION,
        request=EstimateInput, responses=EstimateSerializer, operation_id="turns_estimate",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        payload = EstimateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        estimate = turn_estimate(
            thread=self.thread(), content=data.get("content") or "", user=data.get("user")
        )
        return Response(estimate)


urlpatterns = [
    path("turns/estimate", EstimateView.as_view(), name="thread-turns-estimate"),
]

"""``POST /api/v1/threads/{id}/run-code``: run code in the sandbox at rest (the console's
playground, API users), with the JSON-safe subset of run_code's options."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from threads.api.base import ThreadScopedView
from threads.services import logs
from threads.services.code import ENDPOINT_BUDGET_S, code_result_json, code_run, code_settle

MAX_SOURCE_CHARS = 1_000_000


class RunCodeInput(serializers.Serializer[Any]):
    # The field is named for run_code's argument; DRF moves declared fields off the class, so
    # it does not shadow Field.source at run time (only the stubs see a clash).
    source = serializers.CharField(  # type: ignore[assignment]
        max_length=MAX_SOURCE_CHARS, trim_whitespace=False
    )
    options = serializers.DictField(required=False, default=dict)

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``report: true`` collects ``report(value)`` calls into ``reports`` (a callback cannot
        travel in JSON); the other options go to the sandbox as they are, which answers an
        unknown or invalid one with ``link_error`` (DIGEST §17)."""
        report = options.get("report", False)
        if not isinstance(report, bool):
            raise serializers.ValidationError("report must be true or false")
        options = {key: value for key, value in options.items() if key != "report"}
        if report:
            options["report"] = _collect
        return options


def _collect(_value: Any) -> None:
    """The host side of ``report(value)``: the handle keeps the values in ``reports``."""


class RunCodeView(ThreadScopedView):
    @extend_schema(request=RunCodeInput, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, thread_id: str) -> Response:
        """Run ``source`` in a fresh sandbox and answer its result (status, result, error,
        logs, reports, durationMs). Code that runs past the endpoint budget of 10 s is
        terminated and answered with status ``terminated``."""
        payload = RunCodeInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        result = code_settle(code_run(data["source"], data["options"]), budget_s=ENDPOINT_BUDGET_S)
        body = code_result_json(result)
        error = body["error"]
        logs.log_create(
            thread=self.thread(),
            kind="code",
            data={"status": result.status, "duration_ms": result.duration_ms,
                  "error": f"{error['name']}: {error['message']}" if error else None,
                  "logs": len(result.logs), "reports": len(result.reports)},
        )  # fmt: skip
        return Response(body)


urlpatterns = [path("run-code", RunCodeView.as_view(), name="thread-run-code")]

"""``POST /api/v1/threads/{id}/run-code``: run code in the sandbox at rest (the console's
playground, API users), with the JSON-safe subset of run_code's options.

No tenant can starve another through it:

* A tenant runs at most ``RUN_CODE_TENANT_CONCURRENCY`` calls at once, across every web
  process (Redis leases); one more is a 429 naming the limit, with ``Retry-After``.
* A call starts only once this process has a free runner, waiting for one at most
  ``RUN_CODE_RUNNER_WAIT_S`` (else 503 with ``Retry-After``), so it never queues inside the
  sandbox for its budget.
* The route is served by an async view. DRF's checks (authentication, role, the thread
  within the tenant, the body, the tenant's lease) run in one short sync step, and the log
  row in another; each gives its database connection back when it ends. The wait for the
  code (up to the 10 s budget) holds neither a connection nor a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from django.http import HttpRequest, HttpResponseBase
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import domain_error_response
from common.connections import connection_returned
from common.errors import DomainError
from common.inputs import StrictInput
from common.schema import error_response
from common.tenant_wall import tenant_enter
from sandbox.protocol import STATUSES
from threads.api.base import ThreadScopedView
from threads.models import Thread
from threads.services.code_endpoint import (
    ENDPOINT_BUDGET_S,
    code_endpoint_log,
    code_endpoint_run,
    code_lease_acquire,
    code_lease_release_abandoned,
)
from threads.services.leases import Lease

MAX_SOURCE_CHARS = 1_000_000

P = ParamSpec("P")
R = TypeVar("R")
AsyncView = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


class RunCodeInput(StrictInput):
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


class CodeErrorSerializer(serializers.Serializer[Any]):
    """Why the code failed: the error it threw, or why it could not run."""

    name = serializers.CharField(help_text="`TypeError`, `SyntaxError`, `EncodingError`, ...")
    message = serializers.CharField()
    stack = serializers.CharField(allow_null=True)
    line = serializers.IntegerField(allow_null=True)
    column = serializers.IntegerField(allow_null=True)
    filename = serializers.CharField(allow_null=True)
    specifier = serializers.CharField(
        allow_null=True, help_text="a module that could not be linked"
    )


class CodeLogSerializer(serializers.Serializer[Any]):
    """One console call of the code."""

    level = serializers.ChoiceField(choices=["log", "info", "warn", "error", "debug"])
    args = serializers.ListField(child=serializers.JSONField(), help_text="its arguments")
    timestamp = serializers.FloatField(help_text="milliseconds since the Unix epoch")


class RunCodeResultSerializer(serializers.Serializer[Any]):
    """The result of running code in the sandbox."""

    status = serializers.ChoiceField(
        choices=STATUSES,
        help_text="`success`, `error` (it threw), `link_error` (an import or an option was "
        "refused), `memory` (past its memory limit), `terminated` (past the time budget)",
    )
    result = serializers.JSONField(help_text="the value, on `success` (else null)")
    error = CodeErrorSerializer(allow_null=True)
    logs = CodeLogSerializer(many=True)
    reports = serializers.ListField(
        child=serializers.JSONField(), help_text="the values passed to `report(value)`"
    )
    durationMs = serializers.FloatField(help_text="how long it ran, in milliseconds")  # noqa: N815


RUN_DESCRIPTION = (
    "Runs `source` in a fresh sandbox and answers its result. Code still running after the "
    "budget of 10 s is terminated (status `terminated`). A tenant runs at most "
    "`RUN_CODE_TENANT_CONCURRENCY` calls at once (429 with `Retry-After` beyond); a call "
    "waits at most `RUN_CODE_RUNNER_WAIT_S` for a free sandbox runner (503 with "
    "`Retry-After` after)."
)


def _collect(_value: Any) -> None:
    """The host side of ``report(value)``: the handle keeps the values in ``reports``."""


class _Admitted(Response):
    """What :meth:`RunCodeView.post` answers for a call it admitted: checked, negotiated and
    holding one of the tenant's leases. The async view runs the code and fills in ``data``."""

    def __init__(
        self, *, thread: Thread, source: str, options: dict[str, Any], lease: Lease
    ) -> None:
        super().__init__(status=200)
        self.thread = thread
        self.source = source
        self.options = options
        self.lease = lease


class RunCodeView(ThreadScopedView):
    """Served through :func:`_served` (the route is async); the class is what DRF checks
    with and what the OpenAPI schema describes."""

    @extend_schema(
        summary="Run code in a thread's sandbox", description=RUN_DESCRIPTION,
        request=RunCodeInput,
        responses={
            200: RunCodeResultSerializer,
            429: error_response(
                429,
                "The tenant already runs `RUN_CODE_TENANT_CONCURRENCY` calls; `Retry-After` "
                "says when one ends at the latest",
            ),
        },
        operation_id="thread_run_code",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """Run ``source`` in a fresh sandbox and answer its result (status, result, error,
        logs, reports, durationMs). Code that runs past the endpoint budget of 10 s is
        terminated and answered with status ``terminated``. A tenant runs at most
        ``RUN_CODE_TENANT_CONCURRENCY`` calls at once (429 with ``Retry-After`` beyond); a
        call waits at most ``RUN_CODE_RUNNER_WAIT_S`` for a free sandbox runner (503 with
        ``Retry-After`` after)."""
        payload = RunCodeInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        thread = self.thread()
        lease = code_lease_acquire(tenant_id=thread.tenant_id, budget_s=ENDPOINT_BUDGET_S)
        return _Admitted(thread=thread, source=data["source"], options=data["options"],
                         lease=lease)  # fmt: skip


def _served(view_class: type[RunCodeView]) -> AsyncView:
    """The async view of the route: ``view_class``'s DRF view checks the call (its errors
    are answered as DRF renders them), then the code runs and is awaited on the event loop.
    It carries the DRF view's attributes (``cls``, ``initkwargs``, ``csrf_exempt``), so the
    schema generator and the middleware see the DRF view."""
    checks = view_class.as_view()

    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        checked = asyncio.ensure_future(connection_returned(checks)(request, *args, **kwargs))
        try:
            response = await asyncio.shield(checked)
        except asyncio.CancelledError:  # the client left while the checks ran
            checked.add_done_callback(code_lease_release_abandoned)
            raise
        if not isinstance(response, _Admitted):
            return response
        tenant_enter(response.thread.tenant_id)  # the checks authenticated in a task of their own
        try:
            body = await code_endpoint_run(
                thread=response.thread, source=response.source, options=response.options,
                lease=response.lease, budget_s=ENDPOINT_BUDGET_S,
            )  # fmt: skip
        except DomainError as error:
            return domain_error_response(error)
        await connection_returned(code_endpoint_log)(thread=response.thread, body=body)
        response.data = body
        return response

    functools.update_wrapper(view, checks)
    return view


urlpatterns = [path("run-code", _served(RunCodeView), name="thread-run-code")]

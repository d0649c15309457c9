"""REST for usage and budgets: ``GET /api/v1/usage`` (the tenant's usage from the rollups,
filtered and grouped), ``GET /api/v1/usage/export`` (the same as CSV or JSON lines, for
billing) and ``/api/v1/budgets`` (CRUD; admins write, every role reads)."""

from __future__ import annotations

import base64
import binascii
import csv
import datetime as dt
import io
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from common.errors import ValidationFailed
from common.inputs import StrictInput
from common.pagination import CURSOR, LIMIT, PAGE_PARAMETERS, page_limit, page_response
from common.payloads import unknown_field_message
from common.schema import error_response, page_of
from common.time import from_us, to_us
from tenancy.models import Role, Tenant
from tenancy.viewsets import TenantScopedViewSet, request_principal
from usage.budget_settings import (
    MAX_THRESHOLDS,
    budget_create,
    budget_delete,
    budget_json,
    budget_standings,
    budget_update,
)
from usage.models import Budget, BudgetPolicy, BudgetScope, BudgetWindow, LedgerKind
from usage.reports import (
    CURRENCY,
    DIMENSIONS,
    EXPORT_CHUNK,
    PERIODS,
    Key,
    UsageGroup,
    UsageQuery,
    UsageReport,
    usage_report,
)
from usage.windows import zone

FILTERS = ("agent", "user", "thread", "model", "kind")
QUERY_FIELDS = ("group_by", "period", "from", "to", *FILTERS)
MAX_FILTER = {"agent": 64, "user": 200, "model": 200}
FORMATS = {"csv": "text/csv", "json": "application/x-ndjson"}
_NONE = "none"


# Reading the query ----------------------------------------------------------------------------


def _single(params: Mapping[str, Any], name: str) -> str | None:
    values: list[str] = params.getlist(name) if hasattr(params, "getlist") else []
    if len(values) > 1:
        raise ValidationFailed(f"{name} may be given once", field=name)
    return values[0] if values else None


def moment_of(raw: str, field: str, time_zone: str) -> int:
    """A query's moment: µs since the epoch, an ISO-8601 datetime (without a zone: UTC) or a
    date (its first moment in the tenant's time zone)."""
    text = raw.strip()
    try:
        if text.lstrip("-").isdigit():
            micros = int(text)
            from_us(micros)  # within the datetimes PostgreSQL and Python hold
            return micros
        day = parse_date(text) if len(text) == len("2026-01-31") else None
        if day is not None:
            return to_us(dt.datetime.combine(day, dt.time(), tzinfo=zone(time_zone)))
        moment = parse_datetime(text)
        if moment is not None:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            return to_us(moment)
    except (ValueError, OverflowError):
        pass
    raise ValidationFailed(
        f"{field} must be µs since the Unix epoch, an ISO-8601 datetime (without a zone: UTC) "
        "or a date (the tenant's local midnight)",
        field=field,
    )


def _filter(name: str, raw: str) -> str:
    if name == "kind":
        if raw not in LedgerKind.values:
            raise ValidationFailed(f"kind must be one of {', '.join(LedgerKind.values)}",
                                   field="kind")  # fmt: skip
        return raw
    if name == "thread":
        if raw == "":
            return raw
        try:
            return str(uuid.UUID(raw))
        except ValueError:
            raise ValidationFailed(
                'thread must be a thread\'s id ("" for calls outside any thread)',
                field="thread",
            ) from None
    cap = MAX_FILTER[name]
    if len(raw) > cap:
        raise ValidationFailed(f"{name} must be at most {cap} characters", field=name)
    return raw


def usage_query_parse(
    params: Mapping[str, Any], *, tenant: Tenant, extra: Sequence[str] = ()
) -> UsageQuery:
    """The report a request's query asks for; a 400 naming the parameter for an unknown
    one (``extra`` are the route's own, checked by it), one given twice or a bad value."""
    known = [*QUERY_FIELDS, *extra]
    for name in params:
        if name not in known:
            raise ValidationFailed(
                unknown_field_message(name, known).replace("field", "query parameter", 1),
                field=name,
            )
    raw = {name: _single(params, name) for name in known}
    group_by: tuple[str, ...] = ()
    if raw["group_by"]:
        group_by = tuple(part.strip() for part in raw["group_by"].split(","))
        for part in group_by:
            if part not in DIMENSIONS:
                raise ValidationFailed(
                    f"group_by is a comma-separated list of {', '.join(DIMENSIONS)}; "
                    f"{part!r} is not one",
                    field="group_by",
                )
        if len(set(group_by)) != len(group_by):
            raise ValidationFailed("group_by names a dimension twice", field="group_by")
    period = raw["period"] or _NONE
    if period not in PERIODS:
        raise ValidationFailed(f"period must be one of {', '.join(PERIODS)}", field="period")
    start = None if not raw["from"] else moment_of(raw["from"], "from", tenant.time_zone)
    end = None if not raw["to"] else moment_of(raw["to"], "to", tenant.time_zone)
    if start is not None and end is not None and end <= start:
        raise ValidationFailed("to must be after from", field="to")
    filters = {name: _filter(name, value) for name in FILTERS if (value := raw[name]) is not None}
    return UsageQuery(start_us=start, end_us=end, group_by=group_by, period=period, **filters)


# Answering ------------------------------------------------------------------------------------


def usage_group_json(group: UsageGroup, query: UsageQuery) -> dict[str, Any]:
    """One group as the API and the JSON-lines export show it."""
    body: dict[str, Any] = {}
    if group.start is not None:
        body["period"] = query.period
        body["start"] = group.start
    for name in query.group_by:
        body[name] = group.keys[name] or None
    figures = group.figures
    body.update(
        calls=figures.calls, model_calls=figures.model_calls, tool_calls=figures.tool_calls,
        sandbox_calls=figures.sandbox_calls, turns=figures.turns,
        input_tokens=figures.input_tokens, output_tokens=figures.output_tokens,
        cached_tokens=figures.cached_tokens, cost_micros=figures.cost_micros,
        cost=figures.cost, cost_known=figures.cost_known,
        unknown_cost_calls=figures.unknown_cost_calls, cpu_ms=figures.cpu_ms,
        currency=CURRENCY,
    )  # fmt: skip
    return body


def _cursor(direction: str, key: Key) -> str:
    raw = json.dumps({direction: list(key)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def _cursor_of(request: Request, report: UsageReport) -> tuple[str, Key] | None:
    raw = request.query_params.get(CURSOR)
    if not raw:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(raw.encode("ascii")))
        (direction, key), *rest = decoded.items()
        if rest or direction not in ("a", "b") or not isinstance(key, list):
            raise ValueError(decoded)
        if not report.grouped or not report.key_valid(key):
            raise ValueError(key)
    except (ValueError, TypeError, AttributeError, UnicodeError, binascii.Error):
        raise ValidationFailed("is not a cursor this list gave", field=CURSOR) from None
    return direction, tuple(key)


def usage_page(request: Request, report: UsageReport) -> Response:
    """One page of ``report`` in the one list shape, by position (see UsageReport). An
    empty page past a cursor (its groups are gone) links back to the first page."""
    limit = page_limit(request)
    cursor = _cursor_of(request, report)
    url = request.build_absolute_uri()
    first_page = str(remove_query_param(url, CURSOR))
    next_url = previous_url = None
    if cursor is not None and cursor[0] == "b":
        groups = report.page(limit=limit + 1, before=cursor[1])
        more_before = len(groups) > limit
        groups = groups[-limit:]
        next_url = _link(url, "a", report.key(groups[-1])) if groups else first_page
        if more_before:
            previous_url = _link(url, "b", report.key(groups[0]))
    else:
        groups = report.page(limit=limit + 1, after=None if cursor is None else cursor[1])
        if len(groups) > limit:
            groups = groups[:limit]
            next_url = _link(url, "a", report.key(groups[-1]))
        if cursor is not None:
            previous_url = _link(url, "b", report.key(groups[0])) if groups else first_page
    return page_response(
        [usage_group_json(group, report.query) for group in groups],
        next=next_url, previous=previous_url,
    )  # fmt: skip


def _link(url: str, direction: str, key: Key) -> str:
    return str(replace_query_param(url, CURSOR, _cursor(direction, key)))


# Schema ---------------------------------------------------------------------------------------


class UsageGroupSerializer(serializers.Serializer[Any]):
    """One group of the tenant's usage. `cost` is a lower bound when `cost_known` is false
    (some calls had no price); `start` and `period` are there when grouped by period, each
    dimension of `group_by` under its name (null: none)."""

    period = serializers.ChoiceField(choices=["hour", "day"], required=False)
    start = serializers.IntegerField(
        required=False,
        help_text="the period's first moment (µs since the Unix epoch): a UTC hour, or a day "
        "of the tenant's time zone",
    )
    agent = serializers.CharField(required=False, allow_null=True)
    user = serializers.CharField(required=False, allow_null=True, help_text="the end user")
    thread = serializers.UUIDField(required=False, allow_null=True)
    model = serializers.CharField(
        required=False, allow_null=True,
        help_text="the model's name (for tool and sandbox calls, the tool's)",
    )  # fmt: skip
    kind = serializers.ChoiceField(choices=LedgerKind.choices, required=False)
    calls = serializers.IntegerField(help_text="model, tool and sandbox calls")
    model_calls = serializers.IntegerField()
    tool_calls = serializers.IntegerField()
    sandbox_calls = serializers.IntegerField()
    turns = serializers.IntegerField(help_text="finished turns")
    input_tokens = serializers.IntegerField(help_text="of the model calls")
    output_tokens = serializers.IntegerField(help_text="of the model calls")
    cached_tokens = serializers.IntegerField(help_text="of the model calls")
    cost_micros = serializers.IntegerField(help_text="the known cost, in millionths of `currency`")
    cost = serializers.CharField(
        help_text="the known cost as a decimal string; a lower bound when `cost_known` is false"
    )
    cost_known = serializers.BooleanField(help_text="false when some calls had no price")
    unknown_cost_calls = serializers.IntegerField(help_text="calls whose cost is unknown")
    cpu_ms = serializers.IntegerField(help_text="sandbox CPU time")
    currency = serializers.CharField(help_text="`USD`")


def _param(name: str, description: str, **kwargs: Any) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.QUERY, description=description, **kwargs)


QUERY_PARAMETERS = [
    _param("group_by", f"a comma-separated list of {', '.join(DIMENSIONS)}"),
    _param(
        "period",
        "group by UTC hour or by the tenant's local day (default none)",
        enum=list(PERIODS),
    ),
    _param("from", "from this moment: µs since the epoch, ISO-8601, or a date (local midnight)"),
    _param("to", "until this moment (excluded), as `from`"),
    _param("agent", "only this agent's calls (empty: calls without one)"),
    _param("user", "only this end user's calls (empty: calls without one)"),
    _param("thread", "only this thread's calls (a thread's id; empty: calls outside threads)"),
    _param("model", "only this model's calls (a tool's name for tool and sandbox calls)"),
    _param("kind", "only this kind of row", enum=list(LedgerKind.values)),
]

USAGE_DESCRIPTION = (
    "The tenant's usage summed from its rollups: filtered by time range and dimensions, "
    "grouped by any of `agent`, `user`, `thread`, `model`, `kind` and by `period`. Tokens "
    "are the model calls', CPU time the sandbox calls', `turns` the finished turns. Groups "
    "come oldest period first, then by their dimensions' values. Without `group_by` or "
    "`period` the answer is one item, the totals."
)
EXPORT_DESCRIPTION = (
    "The report of `GET /api/v1/usage` (same parameters, no paging), streamed whole: "
    "`format=csv` (default) a CSV file with a header row, `format=json` JSON lines, one "
    "group per line."
)


class _JsonErrors(BaseContentNegotiation):
    """The export's file is built by hand in the format ``?format=`` asks; whatever the
    ``Accept`` header, anything else it answers (an error) is JSON."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> Any:
        return next(iter(parsers), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: Any = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, str(renderer.media_type)


# Views ----------------------------------------------------------------------------------------


class UsageView(APIView):
    @extend_schema(
        operation_id="usage_list", summary="Sum the tenant's usage",
        description=USAGE_DESCRIPTION, parameters=[*QUERY_PARAMETERS, *PAGE_PARAMETERS],
        responses=page_of(UsageGroupSerializer),
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        tenant = request_principal(request).tenant
        query = usage_query_parse(request.query_params, tenant=tenant, extra=(LIMIT, CURSOR))
        return usage_page(request, usage_report(tenant=tenant, query=query))


CSV_COLUMNS_FIGURES = ("calls", "model_calls", "tool_calls", "sandbox_calls", "turns",
                       "input_tokens", "output_tokens", "cached_tokens", "cost_micros", "cost",
                       "cost_known", "unknown_cost_calls", "cpu_ms", "currency")  # fmt: skip
# A spreadsheet runs a cell starting with one of these as a formula: quoted with "'".
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_text(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def csv_header(query: UsageQuery) -> list[str]:
    dated = ["period", "start", "start_utc"] if query.period != _NONE else []
    return [*dated, *query.group_by, *CSV_COLUMNS_FIGURES]


def _csv_row(group: UsageGroup, query: UsageQuery) -> list[Any]:
    body = usage_group_json(group, query)
    dated = []
    if group.start is not None:
        dated = [query.period, group.start, from_us(group.start).isoformat()]
    keys = [_csv_text(group.keys[name]) for name in query.group_by]
    figures = [body[name] for name in CSV_COLUMNS_FIGURES]
    figures[CSV_COLUMNS_FIGURES.index("cost_known")] = (
        "true" if group.figures.cost_known else "false"
    )
    return [*dated, *keys, *figures]


def _lines(report: UsageReport, fmt: str) -> Callable[[list[UsageGroup]], bytes]:
    query = report.query
    if fmt == "json":
        return lambda groups: b"".join(
            json.dumps(usage_group_json(g, query), separators=(",", ":")).encode() + b"\n"
            for g in groups
        )

    def rows(groups: list[UsageGroup]) -> bytes:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        for group in groups:
            writer.writerow(_csv_row(group, query))
        return buffer.getvalue().encode()

    return rows


def _export_sync(report: UsageReport, fmt: str, head: bytes) -> Iterator[bytes]:
    render = _lines(report, fmt)
    yield head
    for groups in report.chunks():
        yield render(groups)


async def _export_async(report: UsageReport, fmt: str, head: bytes) -> AsyncIterator[bytes]:
    """Under ASGI Django would gather a sync iterator into one list: read each page in a
    thread (each its own query, by position)."""
    render = _lines(report, fmt)
    yield head
    after: Key | None = None
    while True:
        groups = await sync_to_async(report.page)(limit=EXPORT_CHUNK, after=after)
        if groups:
            yield render(groups)
        if len(groups) < EXPORT_CHUNK or not report.grouped:
            return
        after = report.key(groups[-1])


class UsageExportView(APIView):
    content_negotiation_class = _JsonErrors

    @extend_schema(
        operation_id="usage_export", summary="Export the tenant's usage for billing",
        description=EXPORT_DESCRIPTION,
        parameters=[
            _param("format", "`csv` (default) or `json` (JSON lines)", enum=list(FORMATS)),
            *QUERY_PARAMETERS,
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="CSV: a header row, then one row per group"
            ),
            (200, "application/x-ndjson"): OpenApiResponse(
                UsageGroupSerializer, description="JSON lines: one group per line"
            ),
        },
    )  # fmt: skip
    def get(self, request: Request) -> StreamingHttpResponse:
        tenant = request_principal(request).tenant
        fmt = _single(request.query_params, "format") or "csv"
        if fmt not in FORMATS:
            raise ValidationFailed("format must be csv or json", field="format")
        query = usage_query_parse(request.query_params, tenant=tenant, extra=("format",))
        report = usage_report(tenant=tenant, query=query)
        head = b""
        if fmt == "csv":
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\r\n").writerow(csv_header(query))
            head = buffer.getvalue().encode()
        asgi = isinstance(request._request, ASGIRequest)
        content = _export_async(report, fmt, head) if asgi else _export_sync(report, fmt, head)
        response = StreamingHttpResponse(content, content_type=FORMATS[fmt])
        name = f"usage-{tenant.slug}.{'csv' if fmt == 'csv' else 'jsonl'}"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response


# Budgets --------------------------------------------------------------------------------------


class StandingSerializer(serializers.Serializer[Any]):
    """What one subject of a budget spent and holds in the budget's current window."""

    subject = serializers.CharField(help_text='the agent, user, thread or turn; "" for the tenant')
    window_start = serializers.IntegerField(
        help_text="the window's first moment (µs since the Unix epoch); 0 for turn and lifetime"
    )
    spent_cost = serializers.CharField(help_text="a decimal string in `currency`")
    spent_tokens = serializers.IntegerField()
    reserved_cost = serializers.CharField(help_text="held for calls in flight")
    reserved_tokens = serializers.IntegerField()
    remaining_cost = serializers.CharField(allow_null=True, help_text="null: no cost limit")
    remaining_tokens = serializers.IntegerField(allow_null=True, help_text="null: no token limit")


class BudgetSerializer(serializers.Serializer[Any]):
    """A cap on the tenant's spend in cost and/or tokens for one scope over one window."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=BudgetScope.choices)
    subject = serializers.CharField(help_text='the agent, user or thread capped; "": each one')
    window = serializers.ChoiceField(choices=BudgetWindow.choices)
    limit_cost = serializers.CharField(
        allow_null=True, help_text="a decimal string in `currency`; null: no cost limit"
    )
    limit_micros = serializers.IntegerField(allow_null=True, help_text="`limit_cost` in millionths")
    limit_tokens = serializers.IntegerField(allow_null=True, help_text="null: no token limit")
    policy = serializers.ChoiceField(choices=BudgetPolicy.choices)
    thresholds = serializers.ListField(child=serializers.IntegerField(), help_text="percentages")
    currency = serializers.CharField(help_text="`USD`")
    operator = serializers.BooleanField(
        help_text="the operator's cap: shown, but not changed over the API"
    )
    created_at = serializers.IntegerField(help_text="µs since the Unix epoch")
    updated_at = serializers.IntegerField(help_text="µs since the Unix epoch")
    standing = StandingSerializer(
        many=True,
        help_text="the current window's counters, newest window then most spent first (at most 20)",
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": r"^\d{1,12}(\.\d{1,6})?$"},
            {"type": "number", "minimum": 0},
        ]
    }
)
class AmountField(serializers.Field):  # type: ignore[type-arg]
    """An amount of the currency: a decimal string or a number (documents the body; the
    service checks it)."""


class BudgetInput(StrictInput):
    """A budget's settings (a PATCH sends only those it changes)."""

    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(choices=BudgetScope.choices)
    subject = serializers.CharField(
        required=False, allow_blank=True, max_length=200,
        help_text='the agent, user or thread capped; "" (default): each one; "" for the tenant '
        "and turn scopes",
    )  # fmt: skip
    window = serializers.ChoiceField(
        choices=BudgetWindow.choices, help_text="`turn` for turn budgets, and only for them"
    )
    limit_cost = AmountField(
        required=False, allow_null=True,
        help_text="an amount of USD (a decimal string or a number, at most 6 decimals); "
        "`limit_cost` and/or `limit_tokens`",
    )  # fmt: skip
    limit_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    policy = serializers.ChoiceField(
        choices=BudgetPolicy.choices, required=False, help_text="default `pause`"
    )
    thresholds = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=99), required=False,
        max_length=MAX_THRESHOLDS, help_text="distinct percentages of the limit to announce",
    )  # fmt: skip
    operator = serializers.BooleanField(
        required=False, help_text="read-only: `true` is refused (403)"
    )


OPERATOR_REFUSED = error_response(403, "The role is too low, or the budget is the operator's")


class BudgetViewSet(TenantScopedViewSet):
    """The tenant's budgets: every role reads them, admins write them; the operator's are
    shown and cannot be changed here."""

    queryset = Budget.objects.all()
    write_role = Role.ADMIN
    ordering = ("name",)

    def _json(self, budgets: Sequence[Budget]) -> list[dict[str, Any]]:
        standings = budget_standings(tenant=self.principal.tenant, budgets=budgets)
        return [budget_json(budget, standings[budget.pk]) for budget in budgets]

    @extend_schema(
        operation_id="budgets_list", summary="List the tenant's budgets",
        description="By name, the operator's too, each with its standing.",
        responses=BudgetSerializer,
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response(self._json(page))

    @extend_schema(
        operation_id="budgets_create", summary="Create a budget",
        request=BudgetInput, responses={201: BudgetSerializer, 403: OPERATOR_REFUSED},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        budget = budget_create(tenant=self.principal.tenant, data=request.data)
        return Response(self._json([budget])[0], status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="budgets_retrieve", summary="Get a budget", responses=BudgetSerializer
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(self._json([self.get_object()])[0])

    @extend_schema(
        operation_id="budgets_partial_update", summary="Change some settings of a budget",
        description="The settings sent replace the stored ones; the others are kept. An "
        "operator budget is refused (403).",
        request=BudgetInput, responses={200: BudgetSerializer, 403: OPERATOR_REFUSED},
    )  # fmt: skip
    def partial_update(self, request: Request, pk: str) -> Response:
        budget = budget_update(
            tenant=self.principal.tenant, budget=self.get_object(), data=request.data
        )
        return Response(self._json([budget])[0])

    @extend_schema(
        operation_id="budgets_destroy", summary="Delete a budget",
        description="Its counters go with it. An operator budget is refused (403).",
        responses={204: None, 403: OPERATOR_REFUSED},
    )  # fmt: skip
    def destroy(self, request: Request, pk: str) -> Response:
        budget_delete(tenant=self.principal.tenant, budget=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

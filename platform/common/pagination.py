"""One list shape for every collection of the API.

Every list answers ``{"results": [...], "next": URL | null, "previous": URL | null}``.
``?limit=`` takes 1 to :data:`MAX_LIMIT` items (default :data:`DEFAULT_LIMIT`); anything
else is a 400 naming ``limit``. ``next`` and ``previous`` are the URLs of the
neighbouring pages, each holding an opaque ``?cursor=``; a cursor the list did not give
is a 400 naming ``cursor``.

Rows from the database page by position (keyset): the cursor holds the ordering value
of the page's edge, so rows written while a client pages neither repeat nor go missing.
A list built in memory (a directory, the registry) pages by place in the list.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any
from urllib import parse

from django.core.exceptions import ValidationError as DjangoValidation
from django.db import connection
from django.db.models import Field, Model, QuerySet
from drf_spectacular.utils import OpenApiParameter
from rest_framework import pagination
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from common.errors import ValidationFailed

# PostgreSQL's bigint, the cap of the sequence cursors (`?after=`): past it is a 400.
MAX_OFFSET = 2**63 - 1
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LIMIT = "limit"
CURSOR = "cursor"

LIMIT_HELP = f"items per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"
CURSOR_HELP = "where the page starts: the `cursor` of a list's `next` or `previous` URL"
NEXT_HELP = "the next page, or null on the last"
PREVIOUS_HELP = "the previous page, or null on the first"
PAGE_PARAMETERS = [
    OpenApiParameter(LIMIT, int, OpenApiParameter.QUERY, description=LIMIT_HELP),
    OpenApiParameter(CURSOR, str, OpenApiParameter.QUERY, description=CURSOR_HELP),
]


def page_limit(request: Request) -> int:
    """The request's ``?limit=``, or a 400 naming it."""
    raw = request.query_params.get(LIMIT)
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise ValidationFailed(
            f"must be a whole number from 1 to {MAX_LIMIT}", field=LIMIT
        ) from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed(f"must be from 1 to {MAX_LIMIT}", field=LIMIT)
    return limit


def page_response(results: Sequence[Any], *, next: str | None, previous: str | None) -> Response:
    return Response({"results": list(results), "next": next, "previous": previous})


class CursorPagination(pagination.CursorPagination):
    """Keyset pagination over a queryset ordered by ``ordering`` (the view's ``ordering``,
    else the queryset's own ``order_by``); the first field decides the position, ties are
    passed by an offset inside the cursor."""

    page_size = DEFAULT_LIMIT
    max_page_size = MAX_LIMIT
    page_size_query_param = LIMIT
    cursor_query_param = CURSOR
    ordering: Any = ("-created_at",)

    def get_page_size(self, request: Request) -> int:
        return page_limit(request)

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: Any) -> Any:
        self._model = queryset.model
        ordering = getattr(view, "ordering", None) or queryset.query.order_by or self.ordering
        return tuple(ordering)

    def decode_cursor(self, request: Request) -> Any:
        """The request's cursor, or None for the first page; a 400 naming ``cursor`` for
        anything a list of this ordering cannot have given: text that is not a cursor, or
        a position the ordering field cannot hold (it would reach the query)."""
        raw = request.query_params.get(self.cursor_query_param)
        if not raw:
            return None
        try:
            tokens = parse.parse_qs(base64.b64decode(raw).decode("ascii"), keep_blank_values=True)
            if not tokens.keys() & {"o", "r", "p"}:
                raise ValueError("holds no position")
            cursor = super().decode_cursor(request)
            if cursor is not None and cursor.position is not None:
                _position_check(self._model, self.ordering[0], cursor.position)
        except (NotFound, ValueError, TypeError, OverflowError, UnicodeError, DjangoValidation):
            raise ValidationFailed("is not a cursor this list gave", field=CURSOR) from None
        return cursor

    def get_paginated_response(self, data: Any) -> Response:
        return page_response(data, next=self.get_next_link(), previous=self.get_previous_link())

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return page_schema(schema)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {"name": LIMIT, "required": False, "in": "query", "description": LIMIT_HELP,
             "schema": {"type": "integer"}},
            {"name": CURSOR, "required": False, "in": "query", "description": CURSOR_HELP,
             "schema": {"type": "string"}},
        ]  # fmt: skip


def _position_check(model: type[Model], ordering: str, position: Any) -> None:
    """Raise ValueError unless ``position`` is a value the ordering field holds."""
    field = model._meta.get_field(ordering.lstrip("-"))
    if not isinstance(field, Field):
        raise TypeError(f"{ordering} is not a field to order by")
    value = field.to_python(position)
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = connection.ops.integer_field_range(field.get_internal_type())
        if not low <= value <= high:
            raise ValueError(f"{value} is out of the field's range")
    if isinstance(value, dt.datetime):
        value.timestamp()  # OverflowError/ValueError past what the database stores


def page_schema(items: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI schema of a page whose ``results`` are ``items``."""
    link = {"type": ["string", "null"], "format": "uri"}
    return {
        "type": "object",
        "required": ["results", "next", "previous"],
        "properties": {
            "results": items,
            "next": {**link, "description": NEXT_HELP},
            "previous": {**link, "description": PREVIOUS_HELP},
        },
    }


def paginate(
    request: Request,
    rows: QuerySet[Any] | Sequence[Any],
    serialize: Callable[[Any], Any],
    *,
    view: Any = None,
) -> Response:
    """One page of ``rows`` (a queryset pages by keyset, a list by place), each item
    serialized, in the list shape."""
    return paginate_page(request, rows, lambda page: [serialize(row) for row in page], view=view)


def paginate_page(
    request: Request,
    rows: QuerySet[Any] | Sequence[Any],
    serialize: Callable[[Sequence[Any]], list[Any]],
    *,
    view: Any = None,
) -> Response:
    """:func:`paginate`, with the page serialized as a whole: ``serialize`` may read what
    the page's rows refer to in one query instead of one per row."""
    if isinstance(rows, QuerySet):
        paginator = CursorPagination()
        page = paginator.paginate_queryset(rows, request, view)
        assert page is not None
        return paginator.get_paginated_response(serialize(page))
    limit = page_limit(request)
    start = _list_offset(request)
    items = rows[start : start + limit]
    url = request.build_absolute_uri()
    next_url = _list_link(url, start + limit) if start + limit < len(rows) else None
    previous_url = _list_link(url, max(start - limit, 0)) if start > 0 else None
    return page_response(serialize(items), next=next_url, previous=previous_url)


def _list_offset(request: Request) -> int:
    raw = request.query_params.get(CURSOR)
    if not raw:
        return 0
    try:
        decoded = base64.urlsafe_b64decode(raw.encode("ascii")).decode("ascii")
        key, value = decoded.split("=", 1)
        offset = int(value)
        if key != "at" or offset < 0:
            raise ValueError(decoded)
    except (ValueError, UnicodeError, binascii.Error):
        raise ValidationFailed("is not a cursor this list gave", field=CURSOR) from None
    return offset


def _list_link(url: str, offset: int) -> str:
    if offset == 0:
        return str(remove_query_param(url, CURSOR))
    cursor = base64.urlsafe_b64encode(f"at={offset}".encode("ascii")).decode("ascii")
    return str(replace_query_param(url, CURSOR, cursor))

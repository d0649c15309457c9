"""``/api/v1/threads/{id}/kv``: the thread's durable KV store (runtime spec §14).

``kv/<key>`` takes the rest of the path as the key, so keys may contain ``/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import NotFound, ValidationFailed
from common.pagination import MAX_OFFSET
from common.schema import error_response
from threads.api.base import ThreadScopedView
from threads.services.values import (
    MAX_LIST_LIMIT,
    StoredValue,
    value_delete,
    value_list,
    value_rename,
    value_set,
    value_stored,
)


def value_json(item: StoredValue) -> dict[str, Any]:
    return {"key": item.key, "value": item.value, "size": item.size, "updated_at": item.updated_at}


class ValueListQuery(serializers.Serializer[Any]):
    search = serializers.CharField(required=False, allow_blank=True)
    limit = serializers.IntegerField(min_value=0, max_value=MAX_LIST_LIMIT, default=100)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_OFFSET, default=0)


class ValueListView(ThreadScopedView):
    @extend_schema(
        parameters=[ValueListQuery], responses=OpenApiTypes.OBJECT, operation_id="thread_kv_list"
    )
    def get(self, request: Request, thread_id: str) -> Response:
        query = ValueListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        search = query.validated_data.get("search") or None
        limit, offset = query.validated_data["limit"], query.validated_data["offset"]
        items, total = value_list(thread=self.thread(), search=search, limit=limit, offset=offset)
        return Response(
            {"values": [value_json(item) for item in items], "total": total,
             "limit": limit, "offset": offset, "search": search}
        )  # fmt: skip


class ValuePutInput(serializers.Serializer[Any]):
    """The body of ``PUT kv/<key>`` as documented (``_put_body`` reads it)."""

    value = serializers.JSONField(help_text="any JSON value; null deletes the key (204)")
    previous_key = serializers.CharField(
        required=False, help_text="rename this key to the URL's first"
    )


def _put_body(data: object) -> tuple[Any, str | None]:
    """``(value, previous_key)`` from ``{"value": ..., "previous_key"?: "..."}``."""
    if not isinstance(data, Mapping):
        raise ValidationFailed("the body must be a JSON object")
    if "value" not in data:
        raise ValidationFailed("value is required (null deletes the key)", field="value")
    previous = data.get("previous_key")
    if previous is not None and not isinstance(previous, str):
        raise ValidationFailed("previous_key must be a string", field="previous_key")
    return data["value"], previous


class ValueDetailView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, thread_id: str, key: str) -> Response:
        item = value_stored(thread=self.thread(), key=key)
        if item is None:
            raise NotFound(f"no KV key {key!r} in this thread")
        return Response(value_json(item))

    @extend_schema(
        request=ValuePutInput,
        responses={
            200: OpenApiTypes.OBJECT,
            204: OpenApiResponse(description="`value` was null: the key is deleted"),
            409: error_response(409, "`previous_key` renames to a key that exists"),
        },
    )
    def put(self, request: Request, thread_id: str, key: str) -> Response:
        """Set ``value`` (``null`` deletes: 204). With ``previous_key``, rename it to ``key``
        first, then set the value."""
        value, previous = _put_body(request.data)
        thread = self.thread()
        with transaction.atomic():
            if previous is not None:
                value_rename(thread=thread, key=previous, new_key=key)
            value_set(thread=thread, key=key, value=value)
        if value is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        item = value_stored(thread=thread, key=key)
        assert item is not None
        return Response(value_json(item))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, thread_id: str, key: str) -> Response:
        thread = self.thread()
        if value_stored(thread=thread, key=key) is None:
            raise NotFound(f"no KV key {key!r} in this thread")
        value_delete(thread=thread, key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("kv", ValueListView.as_view(), name="thread-kv"),
    path("kv/<path:key>", ValueDetailView.as_view(), name="thread-kv-detail"),
]

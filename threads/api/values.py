"""``/api/v1/threads/{id}/kv``: the thread's durable KV store (runtime spec §14).

``kv`` lists the values by key in the list shape (keyset on the key), ``?search=`` keeping
the keys that hold it. ``kv/<key>`` takes the rest of the path as the key, so keys may
contain ``/``.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import NotFound, ValidationFailed
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate
from common.payloads import object_body
from common.schema import error_response, page_of
from threads.api.base import ThreadScopedView
from threads.models import ThreadValue
from threads.services.values import (
    StoredValue,
    value_delete,
    value_list,
    value_of,
    value_rename,
    value_set,
    value_stored,
)


class KvValueSerializer(serializers.Serializer[StoredValue]):
    """A value of a thread's KV store. `updated_at` is microseconds since the Unix epoch."""

    key = serializers.CharField(help_text="up to 255 characters; may contain `/`")
    value = serializers.JSONField(help_text="any JSON value but null")
    size = serializers.IntegerField(help_text="bytes of the value's compact JSON")
    updated_at = serializers.IntegerField()


def value_json(item: StoredValue) -> dict[str, Any]:
    return dict(KvValueSerializer(item).data)


class ValueListView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's KV values",
        description="By key. `search` keeps the keys that hold it (case-insensitive);"
        " values are encrypted at rest, so they are not searched.",
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("search", str, description="a part of the key, any case"),
        ],
        responses=page_of(KvValueSerializer),
        operation_id="thread_kv_list",
    )
    def get(self, request: Request, thread_id: str) -> Response:
        thread = self.thread()
        rows = value_list(thread=thread, search=request.query_params.get("search") or None)

        def serialize(row: ThreadValue) -> dict[str, Any]:
            return value_json(value_of(thread=thread, row=row))

        return paginate(request, rows, serialize, view=self)


# Documents the body for the schema; _put_body reads it (a null value is not a missing one).
class ValuePutInput(StrictInput):
    """The value to store under the key, and optionally the key it is renamed from."""

    value = serializers.JSONField(help_text="any JSON value; null deletes the key (204)")
    previous_key = serializers.CharField(
        required=False, help_text="rename this key to the URL's first"
    )


def _put_body(data: object) -> tuple[Any, str | None]:
    """``(value, previous_key)`` from ``{"value": ..., "previous_key"?: "..."}``."""
    body = object_body(data, list(ValuePutInput().fields))
    if "value" not in body:
        raise ValidationFailed("value is required (null deletes the key)", field="value")
    previous = body.get("previous_key")
    if previous is not None and not isinstance(previous, str):
        raise ValidationFailed("previous_key must be a string", field="previous_key")
    return body["value"], previous


class ValueDetailView(ThreadScopedView):
    @extend_schema(
        summary="Read a KV value", responses=KvValueSerializer, operation_id="thread_kv_retrieve"
    )
    def get(self, request: Request, thread_id: str, key: str) -> Response:
        item = value_stored(thread=self.thread(), key=key)
        if item is None:
            raise NotFound(f"no KV key {key!r} in this thread")
        return Response(value_json(item))

    @extend_schema(
        summary="Set, rename or delete a KV value",
        operation_id="thread_kv_set",
        description="Sets `value` under the key; `null` deletes the key (204). With"
        " `previous_key`, that key is first renamed to this one (409 when this one exists),"
        " in the same transaction.",
        request=ValuePutInput,
        responses={
            200: KvValueSerializer,
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

    @extend_schema(
        summary="Delete a KV value", responses={204: None}, operation_id="thread_kv_delete"
    )
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

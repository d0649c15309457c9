"""Pagination for list endpoints: ``?limit=&offset=`` with the total count."""

from __future__ import annotations

from rest_framework import pagination
from rest_framework.request import Request

from common.errors import ValidationFailed

# PostgreSQL's bigint: a larger OFFSET is an error in the database, not an empty page.
MAX_OFFSET = 2**63 - 1


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """``{"count", "next", "previous", "results"}`` with ``limit`` capped at ``max_limit``;
    an ``offset`` past :data:`MAX_OFFSET` is a 400 naming it."""

    default_limit = 50
    max_limit = 500

    def get_offset(self, request: Request) -> int:
        offset: int = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise ValidationFailed(f"must be at most {MAX_OFFSET}", field=self.offset_query_param)
        return offset

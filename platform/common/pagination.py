"""Pagination for list endpoints: ``?limit=&offset=`` with the total count."""

from __future__ import annotations

from rest_framework import pagination


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """``{"count", "next", "previous", "results"}`` with ``limit`` capped at ``max_limit``."""

    default_limit = 50
    max_limit = 500

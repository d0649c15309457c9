"""The ids a log line carries: tenant, thread, turn, request (and trace, read from the
active span). Bound for a block of work with :func:`bind` (a request, a drive, a turn) in a
context variable, so threads and asyncio tasks each see their own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final

FIELDS: Final = ("tenant_id", "thread_id", "turn_id", "request_id")

_ids: ContextVar[dict[str, str]] = ContextVar("log_ids", default={})  # noqa: B039 - never mutated


@contextlib.contextmanager
def bind(**ids: object) -> Iterator[None]:
    """Within the block, log lines carry ``ids`` (None values leave a field as it was)."""
    unknown = set(ids) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log ids: {sorted(unknown)}")
    token = _ids.set({**_ids.get(), **{k: str(v) for k, v in ids.items() if v is not None}})
    try:
        yield
    finally:
        _ids.reset(token)


def current() -> dict[str, str]:
    """The ids bound now (a copy)."""
    return dict(_ids.get())

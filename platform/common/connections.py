"""Async views that hold no database connection while they wait."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

P = ParamSpec("P")
R = TypeVar("R")


def connection_returned(function: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``function`` as a short sync step (on the request's thread, as Django runs sync
    views), after which the thread's database connection goes back to the pool instead of
    staying open for the rest of the request. A connection inside a transaction (a test's)
    is left open: closing it would break that transaction."""

    def step(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        finally:
            connection_release()

    return sync_to_async(step)


def connection_release() -> None:
    """Give this thread's database connection back to the pool (the next query takes one
    again), unless it is inside a transaction (a test's), which closing would break."""
    if not connection.in_atomic_block:
        connection.close()

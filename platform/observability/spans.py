"""This process's tracer, and the span block every traced part opens.

Tracing is on when a tracer provider is in use (:func:`tracing_use`, which
:func:`observability.tracing.tracing_install` calls when ``settings.TRACING`` names an
exporter); off, :func:`span` yields None and costs a list lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from threads.runtime.tool_calls import ActionNeeded, FlowAborted

# The semantic conventions the spans follow (GenAI's gen_ai.*, HTTP's, messaging's), as
# opentelemetry-semantic-conventions 0.66b2 ships them, and their schema.
SEMCONV_VERSION: Final = "1.44.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
INSTRUMENTATION: Final = "standard-agents-platform"


@dataclass(frozen=True)
class Tracing:
    """The tracer spans are made with, and whether message content goes on them."""

    tracer: Tracer
    capture_content: bool = False


_tracing: list[Tracing | None] = [None]


def tracing() -> Tracing | None:
    """The tracing of this process; None when it is off."""
    return _tracing[0]


def tracing_use(
    provider: TracerProvider | None, *, capture_content: bool = False
) -> Tracing | None:
    """Trace with ``provider`` from now on (None: stop tracing); returns the tracing it
    replaces (tests put it back). The API's global provider is left alone: it can be set
    once per process, which :func:`observability.tracing.tracing_install` does."""
    tracing = (
        None
        if provider is None
        else Tracing(
            provider.get_tracer(INSTRUMENTATION, schema_url=SCHEMA_URL),
            capture_content=capture_content,
        )
    )
    previous, _tracing[0] = _tracing[0], tracing
    return previous


def tracing_restore(previous: Tracing | None) -> None:
    """Put back what :func:`tracing_use` returned."""
    _tracing[0] = previous


@contextlib.contextmanager
def span(
    name: str,
    *,
    attributes: Mapping[str, Any],
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Context | None = None,
) -> Iterator[Span | None]:
    """The current span for the block when tracing is on (None otherwise), a child of the
    current one (or of ``parent``, a context carried from another process). An exception
    fails it (``error.type``), except a pause for a person or a stop, which it notes."""
    current = _tracing[0]
    if current is None:
        yield None
        return
    with current.tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=dict(attributes), record_exception=False,
        set_status_on_exception=False,
    ) as opened:  # fmt: skip
        try:
            yield opened
        except ActionNeeded:
            opened.set_attribute("platform.outcome", "paused")
            raise
        except FlowAborted:
            opened.set_attribute("platform.outcome", "aborted")
            raise
        except BaseException as error:
            failed(opened, type(error).__qualname__, str(error))
            opened.record_exception(error)
            raise


def failed(opened: Span, error_type: str, message: str) -> None:
    """Mark ``opened`` as failed with ``error_type`` (the conventions' ``error.type``)."""
    opened.set_attribute("error.type", error_type)
    opened.set_status(Status(StatusCode.ERROR, message[:200]))

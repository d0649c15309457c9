"""Retries and fallbacks around one model call (spec DIGEST section 3).

Each model is attempted ``attempts_per_model`` times (the spec's ``MAX_RETRIES_PER_MODEL = 2``)
with exponential backoff (``base_delay_s * 2**n`` after the n-th failed attempt, n from 0) on
retryable errors; a non-retryable error skips that model's remaining attempts. Then each
fallback is tried in order, with its own attempts and no pause before its first one. An abort
(:class:`ProviderAborted`, a user stop) ends the chain at once and never falls back.

Streaming failures: chunks go to ``on_chunk`` as they arrive, so an attempt that fails after
streaming some output has already shown it. The chain retries or falls back anyway and, before
every attempt after the first, emits a :class:`RetryStarted` marker: whatever was streamed
since the previous marker (or the start) belongs to a failed attempt, and the consumer discards
it. The :class:`ChainResult` response holds the successful attempt's output only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

from agents.providers.base import (
    AbortSignal,
    ModelSpec,
    Provider,
    ProviderAborted,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
    accumulate,
    response_chunks,
)
from agents.providers.registry import provider_for

logger = logging.getLogger(__name__)

MAX_RETRIES_PER_MODEL = 2
BASE_DELAY_S = 1.0


@dataclass(frozen=True)
class RetryStarted:
    """Emitted to ``on_chunk`` before a retry or fallback: discard what was streamed so far."""

    type: ClassVar[str] = "retry-started"
    model: str
    attempt: int
    after_error: str


ChainChunk = StreamChunk | RetryStarted


@dataclass(frozen=True)
class FailedAttempt:
    """One failed call: the model's name, its 1-based attempt number and what went wrong."""

    model: str
    attempt: int
    error: str
    status: int | None
    retryable: bool
    code: str


@dataclass(frozen=True)
class ChainResult:
    response: ProviderResponse
    spec: ModelSpec
    failed_attempts: tuple[FailedAttempt, ...]


class ProviderChainFailed(ProviderError):
    """Every attempt of the model and of its fallbacks failed; ``attempts`` lists them."""

    code = "provider_chain_failed"

    def __init__(self, spec: ModelSpec, attempts: tuple[FailedAttempt, ...]) -> None:
        models = len({attempt.model for attempt in attempts})
        summary = "; ".join(f"{a.model} attempt {a.attempt}: {a.error}" for a in attempts)
        last = attempts[-1]
        super().__init__(
            f"model '{spec.name}' and its fallbacks failed ({models} model(s), "
            f"{len(attempts)} attempt(s)): {summary}",
            retryable=last.retryable,
            http_status=last.status,
            provider=spec.kind,
            model=spec.name,
        )
        self.attempts = attempts


def generate_with_fallbacks(
    spec: ModelSpec,
    request: ProviderRequest,
    *,
    stream: bool,
    on_chunk: Callable[[ChainChunk], None] | None = None,
    abort: AbortSignal | None = None,
    sleep: Callable[[float], object] | None = None,
    base_delay_s: float = BASE_DELAY_S,
    attempts_per_model: int = MAX_RETRIES_PER_MODEL,
    provider_factory: Callable[[ModelSpec], Provider] = provider_for,
) -> ChainResult:
    """Answer ``request`` with ``spec`` or, failing that, with its fallbacks in order.

    ``sleep`` defaults to a pause that ``abort`` cuts short. With ``stream`` the call streams
    and every chunk (and :class:`RetryStarted` marker) goes to ``on_chunk``; a model whose
    capabilities say it cannot stream is called with ``generate`` and its answer replayed as
    chunks. Raises :class:`ProviderAborted` when aborted and :class:`ProviderChainFailed`
    when every attempt failed.
    """
    pause = sleep if sleep is not None else _pause_for(abort)
    failures: list[FailedAttempt] = []
    for model in (spec, *spec.fallbacks):
        for attempt in range(1, attempts_per_model + 1):
            if attempt > 1:
                pause(base_delay_s * 2 ** (attempt - 2))
            _raise_if_aborted(abort, model)
            if failures and stream and on_chunk is not None:
                on_chunk(
                    RetryStarted(model=model.name, attempt=attempt, after_error=failures[-1].error)
                )
            try:
                response = _call(provider_factory, model, request, stream, on_chunk, abort)
            except ProviderAborted:
                raise
            except ProviderError as error:
                _raise_if_aborted(abort, model)
                failures.append(_failure(model, attempt, error))
                logger.warning("model %s attempt %d failed: %s", model.name, attempt, error.message)
                if not error.retryable:
                    break
            else:
                return ChainResult(response=response, spec=model, failed_attempts=tuple(failures))
    raise ProviderChainFailed(spec, tuple(failures))


def _call(
    provider_factory: Callable[[ModelSpec], Provider],
    model: ModelSpec,
    request: ProviderRequest,
    stream: bool,
    on_chunk: Callable[[ChainChunk], None] | None,
    abort: AbortSignal | None,
) -> ProviderResponse:
    provider = provider_factory(model)
    if not stream:
        return provider.generate(request, abort=abort)
    if not model.capabilities.streaming:
        response = provider.generate(request, abort=abort)
        for chunk in response_chunks(response):
            if on_chunk is not None:
                on_chunk(chunk)
        return response
    chunks = provider.stream(request, abort=abort)
    try:
        return accumulate(_relay(chunks, on_chunk))
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()


def _relay(
    chunks: Iterator[StreamChunk], on_chunk: Callable[[ChainChunk], None] | None
) -> Iterator[StreamChunk]:
    for chunk in chunks:
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk


def _failure(model: ModelSpec, attempt: int, error: ProviderError) -> FailedAttempt:
    return FailedAttempt(
        model=model.name,
        attempt=attempt,
        error=error.message,
        status=error.http_status,
        retryable=error.retryable,
        code=error.code,
    )


def _pause_for(abort: AbortSignal | None) -> Callable[[float], object]:
    return abort.wait if abort is not None else time.sleep


def _raise_if_aborted(abort: AbortSignal | None, model: ModelSpec) -> None:
    if abort is not None and abort.is_set:
        raise ProviderAborted(
            f"the call to model '{model.name}' was aborted", provider=model.kind, model=model.name
        )

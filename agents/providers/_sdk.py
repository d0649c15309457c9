"""What the two SDK-backed adapters share: keys, options, error translation, abortable calls.

Abort: the official SDKs block in a socket read while they wait for the first byte or the next
event, and a read blocked in one thread cannot be cut short portably from another. So when a
call has an :class:`AbortSignal`, the SDK call runs in a helper thread that feeds a queue; the
caller waits on the queue, and ``AbortSignal.set`` posts a wake-up to it, so the caller raises
:class:`ProviderAborted` at once. The helper stops reading at its next event (or when the
server closes or the timeout ends the read) and closes the response; nothing it produces after
the abort is used.
"""

from __future__ import annotations

import functools
import json
import math
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar, Final, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx2

from agents.providers.base import (
    CONTEXT_LENGTH_EXCEEDED,
    AbortSignal,
    ContentDelta,
    ContentDone,
    ModelSpec,
    ProviderAborted,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    ReasoningDelta,
    ReasoningDone,
    StreamChunk,
    is_retryable_status,
)
from common.egress import egress_client, egress_refusal

T = TypeVar("T")

DEFAULT_TIMEOUT_S: Final = 60.0
_ITEM: Final = "item"
_END: Final = "end"
_ERROR: Final = "error"
_ABORT: Final = "abort"
_Kind = Literal["item", "end", "error", "abort"]


def api_key_of(spec: ModelSpec) -> str:
    """The spec's key; a refused or missing key fails before any network traffic."""
    if spec.key_refused is not None:
        raise ProviderError(
            spec.key_refused.message,
            retryable=False,
            provider=spec.kind,
            model=spec.name,
            code=spec.key_refused.code,
        )
    if not spec.api_key:
        raise ProviderError(
            f"model '{spec.name}' ({spec.kind}) has no API key: store one on the model or name "
            "an env variable that holds it (a local server that needs none accepts any value)",
            retryable=False,
            provider=spec.kind,
            model=spec.name,
            code="provider_no_api_key",
        )
    return spec.api_key


# What ``config`` of an SDK-backed model may hold: each key read here, with the check of its
# value (a message when it is wrong). An adapter adds the keys it reads itself.
ConfigCheck = Callable[[object], str | None]
ConfigProblem = tuple[str, str]


def _positive_number(value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf:
        return None
    return "must be a positive number of seconds"


def _object(value: object) -> str | None:
    return None if isinstance(value, Mapping) else "must be an object (merged into the body)"


SDK_CONFIG_KEYS: Final[Mapping[str, ConfigCheck]] = {
    "timeout_s": _positive_number,  # timeout_of
    "provider_options": _object,  # provider_options
}


def check_sdk_config(
    config: object, *, provider: str, keys: Mapping[str, ConfigCheck]
) -> list[ConfigProblem]:
    """Every problem of an SDK-backed model's ``config`` as ``(key, message)``: a key the
    adapter does not read, or a known key with a wrong value. ``""`` is the whole config."""
    if not isinstance(config, Mapping):
        return [("", "must be an object")]
    known = ", ".join(sorted(keys))
    problems: list[ConfigProblem] = []
    for key, value in config.items():
        check = keys.get(key)
        if check is None:
            problems.append((key, f"unknown key for provider {provider}; known: {known}"))
        elif (message := check(value)) is not None:
            problems.append((key, message))
    return problems


def timeout_of(spec: ModelSpec) -> float:
    value = spec.config.get("timeout_s", DEFAULT_TIMEOUT_S)
    return float(value) if isinstance(value, int | float) and value > 0 else DEFAULT_TIMEOUT_S


def provider_options(spec: ModelSpec, request: ProviderRequest) -> dict[str, Any]:
    """Model-level options first, the request's overriding (spec DIGEST section 3)."""
    model_level = spec.config.get("provider_options")
    merged = dict(model_level) if isinstance(model_level, Mapping) else {}
    merged.update(request.provider_options)
    return merged


def parse_arguments(raw: str, *, tool: str, spec: ModelSpec) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict; malformed JSON is a non-retryable error."""
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ProviderError(
            f"model '{spec.name}' sent malformed JSON arguments for tool '{tool}': {error}",
            retryable=False,
            provider=spec.kind,
            model=spec.name,
            code="provider_bad_tool_arguments",
        ) from error
    if not isinstance(parsed, dict):
        raise ProviderError(
            f"model '{spec.name}' sent arguments for tool '{tool}' that are not a JSON object",
            retryable=False,
            provider=spec.kind,
            model=spec.name,
            code="provider_bad_tool_arguments",
        )
    return parsed


# A request longer than the model's context window: OpenAI's error code, and the words of
# OpenAI, Anthropic ("prompt is too long") and OpenAI-compatible servers (vLLM, llama.cpp).
_CONTEXT_WORDS = (
    "maximum context length",
    "prompt is too long",
    "context window",
    "context length",
)


def status_error(
    spec: ModelSpec,
    status: int,
    detail: str,
    *,
    body_code: str | None = None,
    endpoint: str | None = None,
) -> ProviderError:
    """An HTTP error status as a ProviderError naming the endpoint (``endpoint``, the URL the
    call went to) and, for a refused key or an unknown model or path, the setting to check.
    A request over the model's context window has the code ``context_length_exceeded``
    (never retried: the same request fails again)."""
    too_long = status in (400, 413) and (
        body_code == CONTEXT_LENGTH_EXCEEDED or any(w in detail.lower() for w in _CONTEXT_WORDS)
    )
    where = f" at {shown_url(endpoint)}" if endpoint else ""
    hint = status_hint(spec, status)
    return ProviderError(
        f"{spec.kind} model '{spec.name}' ({spec.model_id}){where} answered HTTP {status}: "
        f"{detail}" + (f": {hint}" if hint else ""),
        retryable=False if too_long else is_retryable_status(status),
        http_status=status,
        provider=spec.kind,
        model=spec.name,
        code=CONTEXT_LENGTH_EXCEEDED if too_long else None,
    )


# The operator's settings behind a platform credential (``platform:<provider>``), by provider:
# its endpoint, its key and the demo model's id (named here, never read).
_PLATFORM_SETTINGS: Final = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"),
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL"),
}


def shown_url(url: str) -> str:
    """``url`` as an error may show it: without a user, password or query (which may carry a
    secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def reach_hint(spec: ModelSpec) -> str:
    """The setting to check when the model's endpoint cannot be reached."""
    if spec.operator_endpoint and spec.kind in _PLATFORM_SETTINGS:
        return f"check {_PLATFORM_SETTINGS[spec.kind][0]} or the model's base_url"
    if spec.base_url is None:
        return "check the network (the model has no base_url: the provider's official endpoint)"
    return "check the model's base_url"


def status_hint(spec: ModelSpec, status: int) -> str | None:
    """The setting to check after a refused key (401, 403) or an unknown model or path (404)."""
    platform = _PLATFORM_SETTINGS.get(spec.kind) if spec.operator_endpoint else None
    if status in (401, 403):
        if platform is not None:
            return f"check {platform[1]} (the platform credential's key)"
        return "check the model's credential or API key"
    if status == 404:
        if platform is not None:
            return (
                f"check the model's model_id (the demo model's comes from {platform[2]}) "
                f"and {platform[0]} or the model's base_url"
            )
        return "check the model's model_id and base_url"
    return None


def error_code_of(error: Exception) -> str | None:
    """The provider's own error code from an SDK error's JSON body (OpenAI's ``code``)."""
    body = getattr(error, "body", None)
    inner = body.get("error", body) if isinstance(body, Mapping) else None
    code = inner.get("code") if isinstance(inner, Mapping) else None
    return code if isinstance(code, str) else None


def error_detail(error: Exception) -> str:
    """The provider's own error message from an SDK error's JSON body, when it has one."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            kind = inner.get("type")
            prefix = f"{kind}: " if isinstance(kind, str) and kind else ""
            return f"{prefix}{inner['message']}"
    return str(getattr(error, "message", None) or error)


def transport_error(spec: ModelSpec, detail: str, *, endpoint: str | None = None) -> ProviderError:
    """A call that reached no answer, naming the endpoint (``endpoint``, the URL the call went
    to) and the setting to check."""
    if endpoint is None:
        return ProviderError(
            f"{spec.kind} model '{spec.name}' ({spec.model_id}) could not be reached: {detail}",
            retryable=True,
            provider=spec.kind,
            model=spec.name,
        )
    return ProviderError(
        f"{spec.kind} model '{spec.name}' ({spec.model_id}) could not be reached at "
        f"{shown_url(endpoint)} ({detail}): {reach_hint(spec)}",
        retryable=True,
        provider=spec.kind,
        model=spec.name,
    )


# What a failed connection's text says, as an error shows it.
_CONNECT_FAILURES: Final = (
    ("connection refused", "connection refused"),
    ("name or service not known", "the host name does not resolve"),
    ("nodename nor servname", "the host name does not resolve"),
    ("temporary failure in name resolution", "the host name does not resolve"),
    ("getaddrinfo failed", "the host name does not resolve"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "the network is unreachable"),
)


def _connect_detail(cause: BaseException) -> str:
    text = str(cause)
    lowered = text.lower()
    for words, shown in _CONNECT_FAILURES:
        if words in lowered:
            return shown
    return f"{type(cause).__name__}: {text}"


def aborted(spec: ModelSpec) -> ProviderAborted:
    return ProviderAborted(
        f"the call to model '{spec.name}' was aborted", provider=spec.kind, model=spec.name
    )


@contextmanager
def translated_errors(
    spec: ModelSpec,
    abort: AbortSignal | None,
    translate: Callable[[Exception], ProviderError],
) -> Iterator[None]:
    """Turn SDK exceptions into :class:`ProviderError` (:class:`ProviderAborted` once aborted)."""
    try:
        yield
    except ProviderError:
        raise
    except Exception as error:
        if abort is not None and abort.is_set:
            raise aborted(spec) from error
        raise translate(error) from error


def single(items: Iterator[T]) -> T:
    """The one item of ``items``, consuming the iterator to its end."""
    (item,) = list(items)
    return item


def run_abortable(
    produce: Callable[[], Iterator[T]], abort: AbortSignal | None, spec: ModelSpec
) -> Iterator[T]:
    """Iterate ``produce()``; with an abort signal, in a helper thread (see the module doc).

    Raises :class:`ProviderAborted` as soon as ``abort`` is set, and re-raises whatever the
    producer raised.
    """
    if abort is None:
        yield from produce()
        return
    if abort.is_set:
        raise aborted(spec)
    inbox: queue.SimpleQueue[tuple[_Kind, Any]] = queue.SimpleQueue()
    stopped = threading.Event()

    def work() -> None:
        try:
            iterator = produce()
            try:
                for item in iterator:
                    if stopped.is_set():
                        break
                    inbox.put((_ITEM, item))
            finally:
                close = getattr(iterator, "close", None)
                if callable(close):
                    close()
        except BaseException as error:  # handed to the waiting caller, who re-raises it
            inbox.put((_ERROR, error))
        else:
            inbox.put((_END, None))

    unregister = abort.add_callback(lambda: inbox.put((_ABORT, None)))
    helper = threading.Thread(target=work, name=f"provider-{spec.kind}-{spec.name}", daemon=True)
    helper.start()
    try:
        while True:
            kind, value = inbox.get()
            if kind == _ITEM:
                yield value
            elif kind == _END:
                return
            elif kind == _ERROR and not abort.is_set:
                raise value
            else:
                raise aborted(spec)
    finally:
        stopped.set()
        unregister()


class DeltaRuns:
    """Closes a run of content or reasoning deltas with its Done chunk when the output changes."""

    def __init__(self) -> None:
        self._open: Literal["content", "reasoning"] | None = None

    def content(self, delta: str) -> list[StreamChunk]:
        return [*self._switch("content"), ContentDelta(delta)] if delta else []

    def reasoning(self, delta: str) -> list[StreamChunk]:
        return [*self._switch("reasoning"), ReasoningDelta(delta)] if delta else []

    def close(self) -> list[StreamChunk]:
        closing: list[StreamChunk] = []
        if self._open == "content":
            closing.append(ContentDone())
        elif self._open == "reasoning":
            closing.append(ReasoningDone())
        self._open = None
        return closing

    def _switch(self, kind: Literal["content", "reasoning"]) -> list[StreamChunk]:
        if self._open == kind:
            return []
        closing = self.close()
        self._open = kind
        return closing


def translate_sdk_error(
    spec: ModelSpec, error: Exception, sdk: ModuleType, *, endpoint: str | None = None
) -> ProviderError:
    """An exception of the ``openai`` or ``anthropic`` SDK (they share the class names) as a
    :class:`ProviderError` naming ``endpoint`` (the URL the call went to, shown without
    credentials) and the setting to check. Order matters: timeouts are connection errors,
    and both are ``APIError`` subclasses, as are status errors. A destination the egress
    guard refused (wrapped by the SDK as a connection error) is never retried: the same call
    would be refused again."""
    refusal = egress_refusal(error)
    if refusal is not None:
        return ProviderError(
            f"{spec.kind} model '{spec.name}' may not be called: {refusal.message}",
            retryable=False,
            provider=spec.kind,
            model=spec.name,
            code=refusal.code,
        )
    if isinstance(error, sdk.APIStatusError) and error.status_code >= 400:
        return status_error(
            spec, error.status_code, error_detail(error), body_code=error_code_of(error),
            endpoint=endpoint,
        )  # fmt: skip
    if isinstance(error, sdk.APIStatusError) and 300 <= error.status_code < 400:
        location = error.response.headers.get("location", "")
        return status_error(
            spec, error.status_code, f"redirects are not followed (to {location or 'nowhere'})",
            endpoint=endpoint,
        )  # fmt: skip
    if isinstance(error, sdk.APITimeoutError):
        return transport_error(spec, "timed out", endpoint=endpoint)
    if isinstance(error, sdk.APIConnectionError | httpx2.TransportError):
        return transport_error(spec, _connect_detail(error.__cause__ or error), endpoint=endpoint)
    if isinstance(error, sdk.APIError):
        # An error event inside a stream (e.g. Anthropic's overloaded_error on a 200).
        return transport_error(spec, f"error while streaming: {error_detail(error)}")
    return ProviderError(
        f"{spec.kind} model '{spec.name}' failed: {type(error).__name__}: {error}",
        retryable=False,
        provider=spec.kind,
        model=spec.name,
    )


@functools.lru_cache(maxsize=128)
def sdk_client(
    client_class: type, base_url: str, api_key: str, timeout_s: float, *, trusted: bool
) -> Any:
    """One SDK client (and connection pool) per endpoint and key; the SDK never retries
    itself. It sends through the egress guard (``trusted``: the operator chose the endpoint,
    so no address is refused)."""
    return client_class(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=timeout_s,
        http_client=egress_client(timeout=timeout_s, trusted=trusted),
    )


class SDKProvider(ABC):
    """The call skeleton of an SDK-backed provider; subclasses shape requests and answers.

    ``generate`` and ``stream`` run the SDK call abortably (see the module doc) and translate
    its errors; a subclass supplies the client, the request parameters, the two SDK calls and
    the conversion of their results.
    """

    sdk: ClassVar[ModuleType]
    client_class: ClassVar[type]
    default_base_url: ClassVar[str]

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def _client(self) -> Any:
        """The SDK client of the spec's endpoint and key (a refused or missing key fails
        here, before any traffic)."""
        return sdk_client(
            self.client_class,
            self._endpoint(),
            api_key_of(self.spec),
            timeout_of(self.spec),
            trusted=self.spec.operator_endpoint,
        )

    def generate(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> ProviderResponse:
        params = self._params(request)
        client = self._client()

        def produce() -> Iterator[ProviderResponse]:
            with translated_errors(self.spec, abort, self._translate):
                yield self._response(self._create(client, params))

        return single(run_abortable(produce, abort, self.spec))

    def stream(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> Iterator[StreamChunk]:
        params = self._params(request)
        client = self._client()

        def produce() -> Iterator[StreamChunk]:
            with translated_errors(self.spec, abort, self._translate):
                events = self._open_stream(client, params)
                try:
                    yield from self._chunks(events)
                finally:
                    events.close()

        return run_abortable(produce, abort, self.spec)

    def _translate(self, error: Exception) -> ProviderError:
        return translate_sdk_error(self.spec, error, self.sdk, endpoint=self._endpoint())

    def _endpoint(self) -> str:
        return self.spec.base_url or self.default_base_url

    @abstractmethod
    def _params(self, request: ProviderRequest) -> dict[str, Any]: ...

    @abstractmethod
    def _create(self, client: Any, params: dict[str, Any]) -> Any:
        """The non-streaming SDK call."""

    @abstractmethod
    def _open_stream(self, client: Any, params: dict[str, Any]) -> Any:
        """The streaming SDK call; the result is iterated, then closed."""

    @abstractmethod
    def _chunks(self, events: Any) -> Iterator[StreamChunk]: ...

    @abstractmethod
    def _response(self, result: Any) -> ProviderResponse: ...

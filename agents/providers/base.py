"""The provider contract: model specs, the neutral request and response, stream chunks, errors.

Every adapter (:mod:`~agents.providers.openai_provider`,
:mod:`~agents.providers.anthropic_provider`, :mod:`~agents.providers.scripted`) turns one
:class:`ProviderRequest` into one model call and answers with a :class:`ProviderResponse`
(``generate``) or an iterator of stream chunks (``stream``, spec DIGEST section 2).

Stream contract, which every adapter honours and :func:`accumulate` relies on:

* a run of ``ReasoningDelta`` is closed by a ``ReasoningDone`` and a run of ``ContentDelta`` by a
  ``ContentDone`` before another kind of output starts or the stream finishes;
* each tool call yields ``ToolCallStart`` before its ``ToolCallDone`` (arguments parsed to a dict);
* exactly one ``Finish`` comes last and carries the usage.

A failure ends the iterator by raising :class:`ProviderError`, never by yielding an error chunk;
an abort raises :class:`ProviderAborted`.

Token accounting follows the OpenAI convention on every provider: ``prompt_tokens`` includes
``cached_tokens`` and ``completion_tokens`` includes ``reasoning_tokens``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Final, Literal, Protocol

from common.errors import DomainError

logger = logging.getLogger(__name__)

ProviderKind = Literal["openai", "anthropic", "scripted"]
Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]
ReasoningEffort = Literal["low", "medium", "high"]
# "auto" | "none" | "required", or the name of the one tool the model must call.
ToolChoice = str
TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})


def is_retryable_status(status: int) -> bool:
    """Timeouts, conflicts, rate limits and server errors are worth another try; the rest not."""
    return status in (408, 409, 429) or status >= 500


# The error code of a request longer than the model's context window (OpenAI's code; the
# SDK providers map Anthropic's and compatible servers' words to it, the scripted provider
# answers it past ``capabilities.max_context_tokens``).
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


def approximate_tokens(text: str) -> int:
    """The scripted provider's token count: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


# Model specs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCapabilities:
    max_context_tokens: int | None = None
    max_output_tokens: int | None = None
    vision: bool = False
    tool_calls: bool = True
    streaming: bool = True


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


NO_USAGE = Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class ModelPrices:
    """USD per million tokens (spec ``inputPrice``, ``outputPrice``, ``cachedPrice``)."""

    input_per_million: Decimal | None = None
    output_per_million: Decimal | None = None
    cached_per_million: Decimal | None = None

    def cost(self, usage: Usage) -> Decimal | None:
        """The USD cost of ``usage``, or None when the input or output price is unknown.

        Cached prompt tokens are charged at the cached price (the input price when that is not
        set); reasoning tokens are part of the completion and charged at the output price.
        """
        if self.input_per_million is None or self.output_per_million is None:
            return None
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = (
            self.input_per_million if self.cached_per_million is None else self.cached_per_million
        )
        total = (
            (usage.prompt_tokens - cached) * self.input_per_million
            + cached * cached_price
            + usage.completion_tokens * self.output_per_million
        )
        return total / _MILLION


# Each SDK provider's official endpoint: where a model without ``base_url`` goes, and the one
# endpoint a credential of that provider may be sent to (agents.credentials).
OFFICIAL_BASE_URLS: Final[Mapping[str, str]] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


@dataclass(frozen=True)
class KeyRefusal:
    """Why a model's call may not have its key (agents.credentials): the call fails with a
    non-retryable ProviderError of this ``code`` before any network traffic."""

    message: str
    code: str = "provider_credential_refused"


@dataclass(frozen=True)
class ModelSpec:
    """One named model with everything needed to call it, built from a ``Model`` row.

    ``api_key`` is the resolved secret; None means "no key" (the SDKs' own environment
    lookups are never used). ``config`` holds provider extras: for ``openai`` and ``anthropic``
    ``timeout_s`` (float, default 60) and ``provider_options`` (merged into the request body,
    the request's own options winning); for ``scripted`` see :mod:`agents.providers.scripted`.
    ``fallbacks`` are tried in order by :func:`agents.providers.chain.generate_with_fallbacks`;
    the fallbacks of a fallback are not followed.

    ``operator_endpoint`` is True when the operator chose where the call goes (a platform
    credential with its official or listed base URL); otherwise the destination is the
    tenant's and every connection goes through the egress guard (:mod:`common.egress`).
    ``key_refused`` says why the model's key may not be used for this call (a platform
    credential with a base URL the operator did not allow): the call fails before any
    network traffic.
    """

    name: str
    kind: ProviderKind
    model_id: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    config: Mapping[str, Any] = field(default_factory=dict)
    capabilities: ModelCapabilities = field(default_factory=ModelCapabilities)
    prices: ModelPrices = field(default_factory=ModelPrices)
    fallbacks: tuple[ModelSpec, ...] = ()
    operator_endpoint: bool = False
    key_refused: KeyRefusal | None = None


# The neutral request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image given either inline (``data``, base64) or by ``url``; exactly one of the two."""

    mime_type: str
    data: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("an ImagePart takes exactly one of data (base64) or url")

    @property
    def data_url(self) -> str:
        """The ``url``, or the inline data as a ``data:`` URL."""
        return self.url if self.url is not None else f"data:{self.mime_type};base64,{self.data}"


ContentPart = TextPart | ImagePart


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class LLMMessage:
    """One message of the conversation sent to a model.

    ``parts`` (user messages only) adds text and image parts after ``content``;
    ``tool_calls`` belong to assistant messages; a ``tool`` message answers the call
    ``tool_call_id`` of the tool ``name``. ``reasoning`` (assistant messages only) is the
    reasoning the message was answered with, replayed when its prompt asks for it.
    """

    role: Role
    content: str | None = None
    parts: tuple[ContentPart, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None

    def __post_init__(self) -> None:
        if self.parts and self.role != "user":
            raise ValueError("only user messages carry content parts")
        if (self.tool_calls or self.reasoning) and self.role != "assistant":
            raise ValueError("only assistant messages carry tool calls or reasoning")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")

    @classmethod
    def system(cls, content: str) -> LLMMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str | None, *parts: ContentPart) -> LLMMessage:
        return cls(role="user", content=content, parts=parts)

    @classmethod
    def assistant(
        cls, content: str | None, tool_calls: Sequence[ToolCall] = (), reasoning: str | None = None
    ) -> LLMMessage:
        return cls(
            role="assistant", content=content, tool_calls=tuple(tool_calls), reasoning=reasoning
        )

    @classmethod
    def tool(cls, *, tool_call_id: str, name: str, content: str) -> LLMMessage:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def content_parts(self) -> tuple[ContentPart, ...]:
        """``content`` (when not empty) as a text part, followed by ``parts``."""
        head: tuple[ContentPart, ...] = (TextPart(self.content),) if self.content else ()
        return head + self.parts

    @property
    def text(self) -> str:
        """Every text of the message joined by newlines (images left out)."""
        texts = [part.text for part in self.content_parts() if isinstance(part, TextPart)]
        return "\n".join(texts)


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model; ``parameters`` is its JSON Schema (None: no arguments)."""

    name: str
    description: str
    parameters: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ReasoningConfig:
    effort: ReasoningEffort | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class ProviderRequest:
    """What the engine asks of a model, independent of the provider.

    ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or the name of one tool; it and
    ``parallel_tool_calls`` (None: the provider's default) are only sent when there are tools.
    ``metadata`` (for example ``thread_id``) is never sent to a real provider.
    """

    messages: Sequence[LLMMessage]
    tools: Sequence[ToolSpec] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    reasoning: ReasoningConfig | None = None
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))


# The response and stream chunks ----------------------------------------------------------------


@dataclass(frozen=True)
class ProviderResponse:
    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    model_id: str
    provider: str


@dataclass(frozen=True)
class ContentDelta:
    type: ClassVar[str] = "content-delta"
    delta: str


@dataclass(frozen=True)
class ContentDone:
    type: ClassVar[str] = "content-done"


@dataclass(frozen=True)
class ReasoningDelta:
    type: ClassVar[str] = "reasoning-delta"
    delta: str


@dataclass(frozen=True)
class ReasoningDone:
    type: ClassVar[str] = "reasoning-done"


@dataclass(frozen=True)
class ToolCallStart:
    type: ClassVar[str] = "tool-call-start"
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDone:
    type: ClassVar[str] = "tool-call-done"
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Finish:
    """The last chunk. ``model_id`` and ``provider`` name who answered (for the response)."""

    type: ClassVar[str] = "finish"
    finish_reason: FinishReason
    usage: Usage
    model_id: str = ""
    provider: str = ""


StreamChunk = (
    ContentDelta
    | ContentDone
    | ReasoningDelta
    | ReasoningDone
    | ToolCallStart
    | ToolCallDone
    | Finish
)


def accumulate(chunks: Iterable[StreamChunk]) -> ProviderResponse:
    """Fold a stream into the response ``generate`` would have returned.

    Raises :class:`ProviderError` (retryable) when the stream ends without a ``Finish`` chunk,
    and lets any error raised by the iterator propagate.
    """
    content: list[str] = []
    reasoning: list[str] = []
    tool_calls: list[ToolCall] = []
    for chunk in chunks:
        if isinstance(chunk, ContentDelta):
            content.append(chunk.delta)
        elif isinstance(chunk, ReasoningDelta):
            reasoning.append(chunk.delta)
        elif isinstance(chunk, ToolCallDone):
            tool_calls.append(ToolCall(id=chunk.id, name=chunk.name, arguments=chunk.arguments))
        elif isinstance(chunk, Finish):
            return ProviderResponse(
                content="".join(content),
                reasoning="".join(reasoning),
                tool_calls=tuple(tool_calls),
                finish_reason=chunk.finish_reason,
                usage=chunk.usage,
                model_id=chunk.model_id,
                provider=chunk.provider,
            )
    raise ProviderError("the stream ended without a finish chunk", retryable=True)


def response_chunks(
    response: ProviderResponse, *, chunk_size: int | None = None
) -> list[StreamChunk]:
    """The stream that :func:`accumulate` folds back into ``response``.

    Content and reasoning are cut into ``chunk_size``-character deltas (one delta when None).
    Used to simulate streaming (scripted provider, models without streaming).
    """
    chunks: list[StreamChunk] = []
    if response.reasoning:
        chunks.extend(ReasoningDelta(piece) for piece in _pieces(response.reasoning, chunk_size))
        chunks.append(ReasoningDone())
    if response.content:
        chunks.extend(ContentDelta(piece) for piece in _pieces(response.content, chunk_size))
        chunks.append(ContentDone())
    for call in response.tool_calls:
        chunks.append(ToolCallStart(id=call.id, name=call.name))
        chunks.append(ToolCallDone(id=call.id, name=call.name, arguments=call.arguments))
    chunks.append(
        Finish(
            finish_reason=response.finish_reason,
            usage=response.usage,
            model_id=response.model_id,
            provider=response.provider,
        )
    )
    return chunks


def _pieces(text: str, size: int | None) -> list[str]:
    if size is None or size <= 0:
        return [text]
    return [text[start : start + size] for start in range(0, len(text), size)]


# Errors ----------------------------------------------------------------------------------------


class ProviderError(DomainError):
    """A model call failed.

    ``retryable`` says whether the same call may succeed if repeated (connection errors,
    timeouts, HTTP 408/409/429/5xx). ``http_status`` is the provider's HTTP status, when
    there was one (``status`` stays the class-level status the platform API answers with).
    """

    code = "provider_error"
    status = 502

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        http_status: int | None = None,
        provider: str = "",
        model: str = "",
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        self.http_status = http_status
        self.provider = provider
        self.model = model


class ProviderAborted(ProviderError):
    """The call was aborted through its :class:`AbortSignal`; never retried, never falls back."""

    code = "provider_aborted"
    status = 409

    def __init__(self, message: str = "the model call was aborted", **kwargs: Any) -> None:
        kwargs["retryable"] = False
        super().__init__(message, **kwargs)


# Aborting --------------------------------------------------------------------------------------


class AbortSignal:
    """A one-way, thread-safe flag that cancels in-flight provider calls.

    Another thread calls :meth:`set`; callbacks registered with :meth:`add_callback` then run
    once, in the setting thread (adapters use them to wake a waiting call). A callback added
    after the signal is set runs at once.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run_callback(callback)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal is set or ``timeout`` seconds pass; True when set."""
        return self._event.wait(timeout)

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback`` for :meth:`set`; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._discard(callback)
        _run_callback(callback)
        return lambda: None

    def _discard(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


def _run_callback(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a failing listener must not stop the others or the setter
        logger.exception("abort callback failed")


# The protocol ----------------------------------------------------------------------------------


class Provider(Protocol):
    """One model behind one adapter; synchronous (the engine runs in worker threads)."""

    def generate(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> ProviderResponse: ...

    def stream(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> Iterator[StreamChunk]: ...

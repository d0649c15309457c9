"""The scripted provider: deterministic model answers for tests and the offline demo.

It mirrors the spec's ``TestScript`` (DIGEST section 20) and labels every answer
``provider="scripted"``. Two drivers:

* :class:`Script`, in-process and stateful: queued responses consumed in order, each with
  optional input expectations::

      script = (
          Script()
          .tool_calls([{"name": "search", "arguments": {"q": "tea"}}])
          .text("Found it.", expect=Expectation(contains_tool_result=("search", "tea")))
          .streaming(chunk_size=4)
      )
      provider = ScriptedProvider(script)        # or provider_for(script.spec("demo"))

* stored rules (``ModelSpec.config`` of a ``Model`` row), stateless so that any worker
  process answers alike; see :mod:`agents.providers.scripted_rules`.

Usage is counted as ``ceil(characters / 4)`` unless a response gives it; generated tool call
ids are ``call_<n>`` (a :class:`Script` counts its calls; stored rules number them after the
tool calls already in the request, so they repeat when the history omits past tool calls).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agents.providers.base import (
    CONTEXT_LENGTH_EXCEEDED,
    AbortSignal,
    FinishReason,
    ModelSpec,
    ProviderAborted,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
    ToolCall,
    Usage,
    approximate_tokens,
    is_retryable_status,
    response_chunks,
)
from agents.providers.scripted_rules import Placeholders, ScriptRules, system_text
from agents.providers.scripted_rules import check_scripted_config as check_scripted_config

PROVIDER: Final = "scripted"
SCRIPT_KEY: Final = "script"
_EXCERPT: Final = 80


@dataclass(frozen=True)
class Expectation:
    """What the request answered by a scripted response must contain (TestScript ``expectInput``).

    ``contains_message``: some message's text contains it; ``contains_tool_result``:
    ``(tool_name, text)`` a result of that tool contains the text; ``message_count``: the
    request has exactly that many messages (system included); ``system_prompt_contains``:
    the system prompt contains it. All matching is case-sensitive.
    """

    contains_message: str | None = None
    contains_tool_result: tuple[str, str] | None = None
    message_count: int | None = None
    system_prompt_contains: str | None = None

    def unmet(self, request: ProviderRequest) -> list[str]:
        """One "expected ...; saw ..." sentence per unmet expectation."""
        messages = request.messages
        problems: list[str] = []
        if self.contains_message is not None and not any(
            self.contains_message in message.text for message in messages
        ):
            seen = ", ".join(f"[{m.role}] {_excerpt(m.text)!r}" for m in messages) or "none"
            problems.append(f"expected a message containing {self.contains_message!r}; saw {seen}")
        if self.contains_tool_result is not None:
            tool, needle = self.contains_tool_result
            results = [m for m in messages if m.role == "tool"]
            if not any(m.name == tool and needle in m.text for m in results):
                seen = ", ".join(f"{m.name}: {_excerpt(m.text)!r}" for m in results) or "none"
                problems.append(
                    f"expected a result of tool {tool!r} containing {needle!r}; "
                    f"saw tool results {seen}"
                )
        if self.message_count is not None and len(messages) != self.message_count:
            problems.append(f"expected {self.message_count} messages; saw {len(messages)}")
        if self.system_prompt_contains is not None:
            system = system_text(messages)
            if self.system_prompt_contains not in system:
                problems.append(
                    f"expected the system prompt to contain {self.system_prompt_contains!r}; "
                    f"saw {_excerpt(system)!r}"
                )
        return problems


@dataclass(frozen=True)
class ScriptedError:
    message: str
    code: str | None = None
    status: int = 500
    retryable: bool = True


@dataclass(frozen=True)
class ScriptedResponse:
    """One queued answer. ``tool_calls`` entries are ``{"name", "arguments", "id"?}``."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    error: ScriptedError | None = None
    expect: Expectation | None = None
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    delay_ms: int = 0


@dataclass(eq=False)
class Script:
    """A queue of scripted responses, consumed in order; thread-safe.

    ``requests`` records every request the script answered (or refused), for assertions.
    """

    responses: list[ScriptedResponse] = field(default_factory=list)
    chunk_size: int | None = None
    chunk_delay_ms: int = 0
    requests: list[ProviderRequest] = field(default_factory=list)
    _taken: int = 0
    _calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def text(
        self,
        content: str,
        *,
        expect: Expectation | None = None,
        usage: Usage | None = None,
        finish_reason: FinishReason | None = None,
        delay_ms: int = 0,
    ) -> Script:
        return self._add(
            ScriptedResponse(
                content=content,
                expect=expect,
                usage=usage,
                finish_reason=finish_reason,
                delay_ms=delay_ms,
            )
        )

    def tool_calls(
        self,
        calls: Sequence[Mapping[str, Any]],
        content: str | None = None,
        *,
        expect: Expectation | None = None,
        usage: Usage | None = None,
        finish_reason: FinishReason | None = None,
        delay_ms: int = 0,
    ) -> Script:
        for call in calls:
            if not isinstance(call.get("name"), str) or not call["name"]:
                raise ValueError(f"a scripted tool call needs a name: {call!r}")
        return self._add(
            ScriptedResponse(
                content=content or "",
                tool_calls=tuple(calls),
                expect=expect,
                usage=usage,
                finish_reason=finish_reason,
                delay_ms=delay_ms,
            )
        )

    def error(
        self,
        message: str,
        code: str | None = None,
        status: int = 500,
        retryable: bool = True,
        *,
        expect: Expectation | None = None,
        delay_ms: int = 0,
    ) -> Script:
        failure = ScriptedError(message=message, code=code, status=status, retryable=retryable)
        return self._add(ScriptedResponse(error=failure, expect=expect, delay_ms=delay_ms))

    def reasoning(
        self,
        content: str,
        reasoning: str,
        *,
        expect: Expectation | None = None,
        usage: Usage | None = None,
        finish_reason: FinishReason | None = None,
        delay_ms: int = 0,
    ) -> Script:
        return self._add(
            ScriptedResponse(
                content=content,
                reasoning=reasoning,
                expect=expect,
                usage=usage,
                finish_reason=finish_reason,
                delay_ms=delay_ms,
            )
        )

    def streaming(self, chunk_size: int = 8, chunk_delay_ms: int = 0) -> Script:
        """Stream content in ``chunk_size``-character deltas (default: one delta)."""
        self.chunk_size = chunk_size
        self.chunk_delay_ms = chunk_delay_ms
        return self

    def spec(self, name: str = "scripted", *, fallbacks: Sequence[ModelSpec] = ()) -> ModelSpec:
        """A :class:`ModelSpec` that :func:`~agents.providers.registry.provider_for` answers
        with this script (in-process only: a script cannot be stored)."""
        return ModelSpec(
            name=name,
            kind="scripted",
            model_id=name,
            config={SCRIPT_KEY: self},
            fallbacks=tuple(fallbacks),
        )

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self.responses) - self._taken

    def take(self, request: ProviderRequest) -> tuple[int, ScriptedResponse]:
        """The next response (1-based position, response); records ``request``."""
        with self._lock:
            self.requests.append(request)
            if self._taken >= len(self.responses):
                raise ProviderError(
                    f"the script is exhausted: all {len(self.responses)} scripted responses "
                    "were used",
                    retryable=False,
                    provider=PROVIDER,
                    code="script_exhausted",
                )
            self._taken += 1
            return self._taken, self.responses[self._taken - 1]

    def next_call_ids(self, count: int) -> list[str]:
        with self._lock:
            first = self._calls + 1
            self._calls += count
        return [f"call_{n}" for n in range(first, first + count)]

    def _add(self, response: ScriptedResponse) -> Script:
        with self._lock:
            self.responses.append(response)
        return self


@dataclass(frozen=True)
class _Answer:
    response: ProviderResponse | None
    error: ProviderError | None
    delay_ms: int


class ScriptedProvider:
    """The :class:`~agents.providers.base.Provider` for ``kind == "scripted"``.

    Raises :class:`ProviderError` (non-retryable) at construction when stored rules are invalid.
    """

    def __init__(
        self,
        source: Script | ScriptRules,
        *,
        name: str = "scripted",
        model_id: str = "scripted",
        max_context_tokens: int | None = None,
    ) -> None:
        self.source = source
        self.name = name
        self.model_id = model_id
        # Like a real model, a request whose input passes the window is refused (HTTP 400,
        # ``context_length_exceeded``) before any response is taken.
        self.max_context_tokens = max_context_tokens

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ScriptedProvider:
        window = spec.capabilities.max_context_tokens
        script = spec.config.get(SCRIPT_KEY)
        if isinstance(script, Script):
            return cls(script, name=spec.name, model_id=spec.model_id, max_context_tokens=window)
        rules = ScriptRules.parse(spec.config, model=spec.name)
        return cls(rules, name=spec.name, model_id=spec.model_id, max_context_tokens=window)

    @property
    def chunking(self) -> tuple[int | None, int]:
        return self.source.chunk_size, self.source.chunk_delay_ms

    def generate(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> ProviderResponse:
        return self._settle(self._answer(request), abort, request.max_output_tokens)

    def stream(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> Iterator[StreamChunk]:
        response = self._settle(self._answer(request), abort, request.max_output_tokens)
        chunk_size, delay_ms = self.chunking
        for index, chunk in enumerate(response_chunks(response, chunk_size=chunk_size)):
            if index and delay_ms:
                self._pause(delay_ms, abort)
            yield chunk

    # Answering ---------------------------------------------------------------------------------

    def _settle(
        self, answer: _Answer, abort: AbortSignal | None, cap: int | None = None
    ) -> ProviderResponse:
        self._pause(answer.delay_ms, abort)
        if answer.error is not None:
            raise answer.error
        assert answer.response is not None
        return _capped(answer.response, cap)

    def _pause(self, delay_ms: int, abort: AbortSignal | None) -> None:
        if abort is None:
            if delay_ms:
                time.sleep(delay_ms / 1000)
            return
        if abort.is_set or (delay_ms and abort.wait(delay_ms / 1000)):
            raise ProviderAborted(
                f"the call to model '{self.name}' was aborted", provider=PROVIDER, model=self.name
            )

    def _answer(self, request: ProviderRequest) -> _Answer:
        window = self.max_context_tokens
        if window is not None:
            sent = counted_usage(request, "", "", ()).prompt_tokens
            if sent > window:
                error = ProviderError(
                    f"scripted model '{self.name}': the request has {sent} input tokens; the "
                    f"model's maximum context length is {window} tokens",
                    retryable=False, http_status=400, provider=PROVIDER, model=self.name,
                    code=CONTEXT_LENGTH_EXCEEDED,
                )  # fmt: skip
                return _Answer(response=None, error=error, delay_ms=0)
        if isinstance(self.source, Script):
            return self._from_script(self.source, request)
        return self._from_rules(self.source, request)

    def _from_script(self, script: Script, request: ProviderRequest) -> _Answer:
        position, scripted = script.take(request)
        unmet = scripted.expect.unmet(request) if scripted.expect else []
        if unmet:
            return self._failure(
                f"scripted response #{position} of model '{self.name}': {'; '.join(unmet)}",
                code="script_expectation_failed",
            )
        if scripted.error is not None:
            failure = scripted.error
            return _Answer(
                response=None,
                error=ProviderError(
                    failure.message,
                    retryable=failure.retryable,
                    http_status=failure.status,
                    provider=PROVIDER,
                    model=self.name,
                    code=failure.code or "scripted_error",
                ),
                delay_ms=scripted.delay_ms,
            )
        ids = iter(script.next_call_ids(len(scripted.tool_calls)))
        calls = tuple(
            ToolCall(
                id=str(call.get("id") or next(ids)),
                name=str(call["name"]),
                arguments=dict(call.get("arguments") or {}),
            )
            for call in scripted.tool_calls
        )
        response = self._response(
            request, scripted.content, scripted.reasoning, calls, scripted.finish_reason
        )
        if scripted.usage is not None:
            response = dataclasses.replace(response, usage=scripted.usage)
        return _Answer(response=response, error=None, delay_ms=scripted.delay_ms)

    def _from_rules(self, rules: ScriptRules, request: ProviderRequest) -> _Answer:
        rule = rules.first_match(request)
        if rule is None:
            last = request.messages[-1].role if request.messages else "none (no messages)"
            return self._failure(
                f"no scripted rule of model '{self.name}' matches the request "
                f"(last message role: {last})",
                code="script_no_rule",
            )
        respond, values = rule.respond, Placeholders.of(request)
        if respond.error is not None:
            return _Answer(
                response=None,
                error=ProviderError(
                    values.text(respond.error),
                    retryable=is_retryable_status(respond.status),
                    http_status=respond.status,
                    provider=PROVIDER,
                    model=self.name,
                    code="scripted_error",
                ),
                delay_ms=respond.delay_ms,
            )
        earlier = sum(len(message.tool_calls) for message in request.messages)
        calls = tuple(
            ToolCall(
                id=str(call.get("id") or f"call_{earlier + index}"),
                name=str(call["name"]),
                arguments=values.arguments(call.get("arguments") or {}),
            )
            for index, call in enumerate(respond.tool_calls, start=1)
        )
        response = self._response(
            request, values.text(respond.text), values.text(respond.reasoning), calls, None
        )
        return _Answer(response=response, error=None, delay_ms=respond.delay_ms)

    def _failure(self, message: str, *, code: str) -> _Answer:
        error = ProviderError(
            message, retryable=False, provider=PROVIDER, model=self.name, code=code
        )
        return _Answer(response=None, error=error, delay_ms=0)

    def _response(
        self,
        request: ProviderRequest,
        content: str,
        reasoning: str,
        calls: tuple[ToolCall, ...],
        finish_reason: FinishReason | None,
    ) -> ProviderResponse:
        return ProviderResponse(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=finish_reason or ("tool_calls" if calls else "stop"),
            usage=counted_usage(request, content, reasoning, calls),
            model_id=self.model_id,
            provider=PROVIDER,
        )


def _capped(response: ProviderResponse, cap: int | None) -> ProviderResponse:
    """As a real model does with ``max_output_tokens``: an answer longer than ``cap`` tokens
    stops there (``finish_reason`` ``length``; its text cut at ``cap`` * 4 characters)."""
    usage = response.usage
    if cap is None or usage.completion_tokens <= cap:
        return response
    return dataclasses.replace(
        response,
        content=response.content[: cap * 4],
        finish_reason="length",
        usage=dataclasses.replace(
            usage, completion_tokens=cap, total_tokens=usage.prompt_tokens + cap,
            reasoning_tokens=min(usage.reasoning_tokens, cap),
        ),
    )  # fmt: skip


def counted_usage(
    request: ProviderRequest, content: str, reasoning: str, calls: Sequence[ToolCall]
) -> Usage:
    """Approximate usage: ``ceil(chars / 4)`` of what was sent and of what was answered."""
    sent = sum(
        len(message.text) + sum(len(json.dumps(call.arguments)) for call in message.tool_calls)
        for message in request.messages
    )
    prompt = math.ceil(sent / 4)
    reasoning_tokens = approximate_tokens(reasoning)
    completion = (
        approximate_tokens(content)
        + reasoning_tokens
        + sum(approximate_tokens(json.dumps(call.arguments)) for call in calls)
    )
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=reasoning_tokens,
    )


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"

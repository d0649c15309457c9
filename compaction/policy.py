"""A prompt's compaction policy with its defaults resolved: the window, the trigger, the
tail kept verbatim, the summarizer."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from agents.documents import CompactionDoc, PromptDoc
from agents.providers.base import ImagePart, LLMMessage, ModelSpec

# Context windows of models known by their provider's id (a prefix matches its dated
# versions), used when a model's definition says nothing (capabilities.max_context_tokens).
KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gpt-3.5-turbo", 16_385),
    ("claude-", 200_000),
)
# The tail kept verbatim when the policy names none: this share of the window.
DEFAULT_TAIL_SHARE = 0.25
# Per message framing, as providers count it roughly.
MESSAGE_TOKENS = 4
IMAGE_TOKENS = 1_000


def known_window(model_id: str) -> int | None:
    for prefix, window in KNOWN_WINDOWS:
        if model_id.startswith(prefix):
            return window
    return None


@dataclass(frozen=True)
class Policy:
    enabled: bool
    window: int | None  # None: unknown (only the reactive trigger applies)
    trigger: float
    idle_trigger: float
    keep_tail_tokens: int
    tool_result_max_chars: int
    summarizer_model: str
    version: str

    @property
    def limit(self) -> int | None:
        """The context size in tokens past which a step compacts first."""
        return int(self.window * self.trigger) if self.window else None

    @property
    def target(self) -> int | None:
        """What a compaction aims the context at: half of the window's trigger, so that
        compactions are rare, not one per step."""
        return int(self.window * self.trigger / 2) if self.window else None


def policy_of(prompt: PromptDoc, spec: ModelSpec) -> Policy:
    doc: CompactionDoc = prompt.compaction
    window = (
        doc.context_window or spec.capabilities.max_context_tokens or known_window(spec.model_id)
    )
    tail = doc.keep_tail_tokens
    if tail is None:
        tail = int(window * DEFAULT_TAIL_SHARE) if window else 4_000
    version = hashlib.sha256(
        json.dumps(doc.model_dump(mode="json"), sort_keys=True).encode()
    ).hexdigest()[:12]
    return Policy(
        enabled=doc.enabled, window=window, trigger=doc.trigger, idle_trigger=doc.idle_trigger,
        keep_tail_tokens=tail, tool_result_max_chars=doc.tool_result_max_chars,
        summarizer_model=doc.summarizer_model or prompt.model, version=version,
    )  # fmt: skip


def text_tokens(text: str | None) -> int:
    """The estimate every figure here uses: a token per four characters, rounded up."""
    return math.ceil(len(text) / 4) if text else 0


def llm_tokens(messages: Sequence[LLMMessage]) -> int:
    """An estimate of a built context's input tokens."""
    total = 0
    for message in messages:
        total += MESSAGE_TOKENS + text_tokens(message.content)
        for part in message.parts:
            total += IMAGE_TOKENS if isinstance(part, ImagePart) else text_tokens(part.text)
        for call in message.tool_calls:
            total += text_tokens(call.name) + text_tokens(json.dumps(call.arguments))
    return total

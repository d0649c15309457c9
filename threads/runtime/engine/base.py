"""What every part of the engine shares: the acting side, the runtime, a failed step and
what one step produced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from agents.providers.base import ModelSpec, Provider, ProviderError, ToolCall
from agents.providers.chain import BASE_DELAY_S
from agents.providers.registry import provider_for
from threads.runtime.tool_calls import ToolOutcome

Side = Literal["a", "b"]


@dataclass(frozen=True)
class Runtime:
    """What the engine talks to beyond the database; tests replace the models."""

    provider_factory: Callable[[ModelSpec], Provider] = provider_for
    load_model: Callable[[str], ModelSpec] | None = None
    retry_base_delay_s: float = BASE_DELAY_S
    # Give the pooled database connection back whenever a flow waits (Flow.idle: workers run
    # many flows per process); in-process tests keep theirs (their transaction lives on it).
    release_connection: bool = False


class StepFailed(Exception):
    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class StepOutcome:
    """One step's answer, its tool calls and their outcomes (what the stop conditions read)."""

    content: str
    calls: tuple[ToolCall, ...]
    outcomes: list[ToolOutcome]

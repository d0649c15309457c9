"""A prompt's ``reasoning.include`` and ``reasoning.exclude`` (DIGEST §4 and §18.3, rule 6):
reasoning is replayed into the context only when the prompt includes it, and only with the
messages that prompt answered; an excluded reasoning is neither stored nor streamed."""

from __future__ import annotations

from typing import Any

import pytest

from agents.providers.base import ContentDelta, ReasoningDelta
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Message, Thread
from threads.runtime.records import CallTimer

THOUGHT = "The user greets me; a short answer will do."


def two_turns(engine: Engine, reasoning: dict[str, Any] | None) -> Thread:
    """A thread whose first answer came with reasoning, then a second turn."""
    engine.define(
        prompts=[prompt("thinker", **({"reasoning": reasoning} if reasoning else {}))],
        agents=[{"name": "thinker", "side_a": {"prompt": "thinker"}}],
    )
    thread = engine.thread("thinker")
    engine.script.reasoning("Hello!", THOUGHT).text("Still here.")
    engine.send(thread, "hi")
    engine.drive(thread)
    return thread


def replayed(engine: Engine) -> list[str | None]:
    """The reasoning of each assistant message the second call was sent."""
    second = engine.script.requests[1]
    return [message.reasoning for message in second.messages if message.role == "assistant"]


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [({"include": True}, [THOUGHT]), ({"include": False}, [None]), (None, [None])],
)
def test_reasoning_is_replayed_only_when_the_prompt_includes_it(
    engine: Engine, reasoning: dict[str, Any] | None, expected: list[str | None]
) -> None:
    thread = two_turns(engine, reasoning)
    engine.send(thread, "again")
    engine.drive(thread)

    assert replayed(engine) == expected
    answer = Message.objects.get(thread=thread, role="assistant", content="Hello!")
    assert answer.reasoning_content == THOUGHT  # stored either way


def test_reasoning_is_replayed_only_with_the_messages_its_prompt_answered(
    engine: Engine,
) -> None:
    thread = two_turns(engine, {"include": True})
    # As if another prompt (a handoff's, say) had answered the first message.
    answer = Message.objects.get(thread=thread, role="assistant", content="Hello!")
    answer.metadata = {**answer.metadata, "prompt": "someone_else"}
    answer.save(update_fields=["metadata"])
    engine.send(thread, "again")
    engine.drive(thread)

    assert replayed(engine) == [None]


def test_excluded_reasoning_is_neither_stored_nor_replayed(engine: Engine) -> None:
    thread = two_turns(engine, {"include": True, "exclude": True})
    engine.send(thread, "again")
    engine.drive(thread)

    answer = Message.objects.get(thread=thread, role="assistant", content="Hello!")
    assert answer.reasoning_content == ""
    assert replayed(engine) == [None]


@pytest.mark.parametrize("streamed", [True, False])
def test_excluded_reasoning_is_not_streamed(engine: Engine, streamed: bool) -> None:
    engine.define(
        prompts=[prompt("thinker")], agents=[{"name": "thinker", "side_a": {"prompt": "thinker"}}]
    )
    message = Message.objects.create(
        tenant=engine.tenant, thread=engine.thread("thinker"), seq=1, role="assistant"
    )
    published: list[str] = []
    timer = CallTimer(message, lambda kind, _: published.append(kind), reasoning=streamed)
    timer.on_chunk(ReasoningDelta("hmm"))
    timer.on_chunk(ContentDelta("Hi"))

    deltas = ["reasoning.delta", "model.delta"] if streamed else ["model.delta"]
    assert published == ["model.requested", *deltas]

"""The structured summary: what the summarizer is asked, how its answer is read, how the
model is shown it. The summary is updated with each new range (the previous summary and
the new messages go in; the updated summary comes out), never re-summarized from
summaries of summaries; a range too long for the summarizer's window goes in chunks."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agents.providers.base import LLMMessage, ProviderRequest
from compaction.policy import text_tokens

KEYS = ("intent", "decisions", "state", "artifacts", "open_items")
LIST_KEYS = KEYS[1:]
# Characters of one message the summarizer sees at most (a huge tool result is cut).
MESSAGE_CHARS = 6_000
# The summary's answer at most, in tokens.
SUMMARY_MAX_TOKENS = 2_000
# A chunk's share of the summarizer's window (the rest: instructions, summary, answer).
CHUNK_SHARE = 0.5
UNKNOWN_WINDOW_CHUNK_TOKENS = 16_000

INSTRUCTIONS = (
    "You maintain the running summary of a long conversation between a user and an AI "
    "agent, so that the agent can carry on without the earlier messages. Update the current "
    "summary with the new messages. Answer with only a JSON object with the keys intent (a "
    "string: what the user wants overall), decisions (what was decided and why), state "
    "(facts that hold now: names, numbers, identifiers, file paths, results of tools), "
    "artifacts (what was produced or changed, and where), open_items (questions, promises and "
    "tasks not finished); the last four are lists of short strings. Keep every fact the "
    "agent may still need; drop what no longer holds."
)


def empty() -> dict[str, Any]:
    return {"intent": "", **{key: [] for key in LIST_KEYS}}


def transcript_line(message: Mapping[str, Any]) -> str:
    """One stored message as the summarizer reads it."""
    role, seq = message.get("role"), message.get("seq")
    text = message.get("content") or ""
    if len(text) > MESSAGE_CHARS:
        text = f"{text[:MESSAGE_CHARS]}… [{len(text) - MESSAGE_CHARS} more characters]"
    calls = message.get("tool_calls")
    if calls:
        text = f"{text} [calls: {calls if isinstance(calls, str) else json.dumps(calls)}]".strip()
    name = f" {message['name']}" if role == "tool" and message.get("name") else ""
    return f"[{seq}] {role}{name}: {text}"


def chunks(lines: Sequence[str], budget_tokens: int) -> Iterator[list[str]]:
    """``lines`` in order, in runs of at most ``budget_tokens`` (a longer line alone)."""
    run: list[str] = []
    used = 0
    for line in lines:
        size = text_tokens(line) + 1
        if run and used + size > budget_tokens:
            yield run
            run, used = [], 0
        run.append(line)
        used += size
    if run:
        yield run


def chunk_budget(window: int | None) -> int:
    return int(window * CHUNK_SHARE) if window else UNKNOWN_WINDOW_CHUNK_TOKENS


def request(current: Mapping[str, Any], lines: Sequence[str]) -> ProviderRequest:
    content = (
        f"Current summary:\n{json.dumps(current, ensure_ascii=False)}\n\n"
        "New messages ([seq] role: text):\n" + "\n".join(lines)
    )
    return ProviderRequest(
        messages=[LLMMessage.system(INSTRUCTIONS), LLMMessage.user(content)],
        max_output_tokens=SUMMARY_MAX_TOKENS,
    )


def parsed(text: str, previous: Mapping[str, Any]) -> dict[str, Any]:
    """The summarizer's answer as a summary. An answer that is not the JSON object asked
    for is kept as text under ``state`` (with the previous summary's facts): a weak
    summarizer loses structure, never the content."""
    found: Any = None
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            found = json.loads(text[start : end + 1])
        except ValueError:
            found = None
    if not isinstance(found, dict):
        kept = dict(previous) if previous else empty()
        kept["state"] = [*_strings(kept.get("state")), text.strip()] if text.strip() else []
        return {key: kept.get(key, "" if key == "intent" else []) for key in KEYS}
    summary = empty()
    intent = found.get("intent")
    summary["intent"] = intent if isinstance(intent, str) else json.dumps(intent or "")
    for key in LIST_KEYS:
        summary[key] = _strings(found.get(key))
    return summary


def _strings(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [item if isinstance(item, str) else json.dumps(item) for item in value]
    return [json.dumps(value)]


TITLES = {"decisions": "Decisions", "state": "State", "artifacts": "Artifacts",
          "open_items": "Open items"}  # fmt: skip


def rendered(
    summary: Mapping[str, Any], *, from_seq: int, to_seq: int, notes: Sequence[str] = ()
) -> str:
    """The archive marker's text: what the model is shown in place of the range."""
    lines = [
        f"[Summary of the earlier conversation, messages {from_seq} to {to_seq}. The original "
        "messages are kept: call the recall tool with a seq, a range or words to read them.]"
    ]
    if summary.get("intent"):
        lines.append(f"Intent: {summary['intent']}")
    for key, title in TITLES.items():
        items = summary.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines.extend(f"- {item}" for item in items)
    lines.extend(notes)
    return "\n".join(lines)

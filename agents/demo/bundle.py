"""The demo bundle: an ai_human assistant with four function tools and a subprompt, a
dual_ai writer/reviewer pair, and a coordinator that delegates drafts to that pair as a
subagent on a child thread.

With ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` or ``ANTHROPIC_API_KEY`` set, the agents use
a real model through the operator's platform credential (the demo tenant is granted it);
otherwise the scripted model, which answers by fixed rules and says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agents.documents import ModelDoc

SCRIPTED_NOTE = (
    "This is the scripted demo model: it answers by fixed rules, not with a language model. "
    "Ask it for the time or the date, to count the words of a sentence, to summarize something, to "
    "remind you of something (in a minute) or to announce something. "
    "Set OPENAI_API_KEY (or OPENAI_BASE_URL) or ANTHROPIC_API_KEY and run `make run` again "
    "to use a real model."
)

SCRIPTED_RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "writing_pair"},
     "respond": {"text": "The writing pair finished (scripted coordinator): {last_tool_result}"}},
    {"when": {"system_contains": "You coordinate", "last_role": "user"},
     "respond": {"tool_calls": [{"name": "writing_pair",
                                 "arguments": {"message": "{last_user_message}"}}]}},
    {"when": {"last_tool": "current_time"},
     "respond": {"text": "It is {last_tool_result}. (scripted demo model)"}},
    {"when": {"last_tool": "count_words"},
     "respond": {"text": "That is {last_tool_result} words. (scripted demo model)"}},
    {"when": {"last_tool": "summarize"},
     "respond": {"text": "Here is the summary: {last_tool_result}"}},
    {"when": {"last_tool": "set_reminder"},
     "respond": {"text": "Done: {last_tool_result}. (scripted demo model)"}},
    {"when": {"last_tool": "announce"},
     "respond": {"text": "Done: {last_tool_result}. (scripted demo model)"}},
    {"when": {"system_contains": "You summarize"},
     "respond": {"text": "In short: {last_user_message} (scripted summary)"}},
    {"when": {"system_contains": "You write short drafts"},
     "respond": {"text": "Draft: The sea keeps every promise it never made. (scripted writer)"}},
    {"when": {"system_contains": "You review drafts"},
     "respond": {"text": "Review: vivid; keep it that short. (scripted reviewer)"}},
    # Only where the prompt offers the tool: a tenant may keep an older assistant prompt.
    {"when": {"last_role": "user", "last_user_contains": "remind me",
              "system_contains": "set_reminder"},
     "respond": {"tool_calls": [{"name": "set_reminder",
                                 "arguments": {"text": "{last_user_message}", "minutes": 1}}]}},
    {"when": {"last_role": "user", "last_user_contains": "announce",
              "system_contains": "announce"},
     "respond": {"tool_calls": [{"name": "announce",
                                 "arguments": {"message": "{last_user_message}"}}]}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {"last_role": "user", "last_user_contains": "count"},
     "respond": {"tool_calls": [{"name": "count_words",
                                 "arguments": {"text": "{last_user_message}"}}]}},
    {"when": {"last_role": "user", "last_user_contains": "summar"},
     "respond": {"tool_calls": [{"name": "summarize",
                                 "arguments": {"text": "{last_user_message}"}}]}},
    # current_time answers the date too ("Saturday 28 November 2026, 12:30 UTC").
    {"when": {"last_role": "user", "last_user_contains": "date"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {}, "respond": {"text": SCRIPTED_NOTE}},
]  # fmt: skip


# Prices (USD per 1M tokens) of the default demo models; another model's are unknown.
_PRICES = {"gpt-4o-mini": ("0.15", "0.6"), "claude-3-5-haiku-latest": ("0.8", "4")}
SCRIPTED_MODEL: dict[str, Any] = {
    "name": "demo_model", "provider": "scripted", "model_id": "scripted-demo",
    "config": {"rules": SCRIPTED_RULES},
}  # fmt: skip
PlatformCredentials = Mapping[str, Mapping[str, str | None]]


def demo_model(credentials: PlatformCredentials, *, model_ids: Mapping[str, str]) -> dict[str, Any]:
    """A real model on the operator's platform credential when there is one (OpenAI first),
    else the scripted one. ``credentials``: ``settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS``
    (with only ``OPENAI_BASE_URL``, a local server, the credential holds a placeholder key);
    ``model_ids``: the model of each provider (``openai``, ``anthropic``)."""
    for provider in ("openai", "anthropic"):
        if provider in credentials:
            official = not credentials[provider].get("base_url")
            return _provider_model(provider, model_ids[provider], official=official)
    return dict(SCRIPTED_MODEL)


def _provider_model(provider: str, model_id: str, *, official: bool) -> dict[str, Any]:
    model = {
        "name": "demo_model", "provider": provider, "model_id": model_id,
        "credential": f"platform:{provider}",
    }  # fmt: skip
    prices = _PRICES.get(model_id) if official else None
    if prices is not None:
        model["input_price"], model["output_price"] = prices
    return model


def is_seeded_provider_model(doc: ModelDoc) -> bool:
    """Whether a stored model is a real demo model exactly as this seed writes it for some
    configuration (any model id, on the official endpoint or another): one that should
    follow ``OPENAI_MODEL`` / ``ANTHROPIC_MODEL`` and the configured provider. A model the
    tenant changed in any other way (prices, config, base_url, credential) is not."""
    if doc.provider == "scripted":
        return False
    return any(
        doc == ModelDoc.model_validate(_provider_model(doc.provider, doc.model_id, official=o))
        for o in (True, False)
    )


# The placeholder key earlier seeds stored on the demo model for a local server (before the
# model took its key and endpoint from the platform credential ``platform:openai``).
EARLIER_LOCAL_SERVER_KEY = "local-server"


def is_earlier_local_model(doc: ModelDoc, *, stored_key: str | None) -> bool:
    """Whether a stored model is the demo model of a local server as earlier seeds wrote it:
    its own ``base_url`` and the placeholder key stored on the model."""
    if doc.provider != "openai" or doc.base_url is None:
        return False
    earlier = {"name": "demo_model", "provider": "openai", "model_id": doc.model_id,
               "base_url": doc.base_url}  # fmt: skip
    return stored_key == EARLIER_LOCAL_SERVER_KEY and doc == ModelDoc.model_validate(earlier)


def relies_on_platform_env(doc: Any) -> bool:
    """Whether a stored model takes its key from a provider variable of the platform env,
    as the demo model did before platform credentials (models never read that level now)."""
    return bool(
        doc.credential is None and doc.api_key_env in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    )


# The configs of the scripted model as earlier versions of the seed wrote it (sha256 of the
# key-sorted JSON): still untouched, so a later seed may replace them.
_EARLIER_SCRIPTED_CONFIGS = frozenset(
    {
        "c4305f4e6242b1098a4ff9bfda64b6bc79d2c454dd17744924d006e36cd59f4c",
        "c7c9366664df3d5fe7340c6f4b33a8796b18bfcd188bb5621d9e9882c0a486de",
    }
)


def is_seeded_scripted_model(doc: Any) -> bool:
    """Whether a stored model is the scripted demo model exactly as this seed or an earlier
    one writes it."""
    if doc.provider != "scripted" or doc.model_id != SCRIPTED_MODEL["model_id"]:
        return False
    digest = hashlib.sha256(json.dumps(doc.config, sort_keys=True).encode()).hexdigest()
    return bool(doc.config == SCRIPTED_MODEL["config"] or digest in _EARLIER_SCRIPTED_CONFIGS)


def demo_bundle(
    credentials: PlatformCredentials, *, model_ids: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "version": 1,
        "models": [demo_model(credentials, model_ids=model_ids)],
        "prompts": [
            {
                "name": "assistant",
                "tool_description": "A friendly assistant that can tell the time, count "
                "words, summarize, set reminders and make announcements",
                "prompt": "You are a friendly assistant. Use your tools when they help: "
                "current_time for the time, count_words to count words, summarize to "
                "summarize a text, set_reminder to remind the user of something in a number "
                "of minutes, announce to announce something to the apps watching this "
                "conversation. Keep answers short.",
                "model": "demo_model",
                "include_chat": True,
                "include_past_tools": True,
                "tools": [
                    "current_time",
                    "count_words",
                    "set_reminder",
                    "announce",
                    {"name": "summarize", "init_user_message_property": "text"},
                ],
            },
            {
                "name": "summarize",
                "tool_description": "Summarize a text in one sentence",
                "prompt": "You summarize the user's text in one sentence.",
                "model": "demo_model",
                "required_schema": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "The text"}},
                    "required": ["text"],
                },
            },
            {
                "name": "coordinator",
                "tool_description": "Delegates writing to a writer and reviewer pair",
                "prompt": "You coordinate writing work. For any writing request, call the "
                "writing_pair tool with a clear instruction, then report its result briefly.",
                "model": "demo_model",
                "include_chat": True,
                "include_past_tools": True,
                "tools": ["writing_pair"],
            },
            {
                "name": "writer",
                "tool_description": "Writes short drafts",
                "prompt": "You write short drafts and improve them after each review.",
                "model": "demo_model",
                "include_chat": True,
            },
            {
                "name": "reviewer",
                "tool_description": "Reviews drafts",
                "prompt": "You review drafts: one concrete suggestion each time.",
                "model": "demo_model",
                "include_chat": True,
            },
        ],
        "agents": [
            {
                "name": "assistant",
                "type": "ai_human",
                "side_a": {"prompt": "assistant", "label": "Assistant"},
                "description": "Chat with an assistant that has four tools and a subprompt: "
                "the time, word counts, reminders (a scheduled effect) and announcements (a "
                "custom event).",
            },
            {
                "name": "coordinator",
                "type": "ai_human",
                "side_a": {"prompt": "coordinator", "label": "Coordinator"},
                "description": "Delegates each writing request to the writing pair, which "
                "works on a child thread (a subagent), and reports the result.",
            },
            {
                "name": "writing_pair",
                "type": "dual_ai",
                "side_a": {"prompt": "writer", "label": "Writer"},
                "side_b": {"prompt": "reviewer", "label": "Reviewer"},
                "max_session_turns": 2,
                "expose_as_tool": True,
                "tool_description": "A writer and a reviewer iterate on a short draft",
                "description": "Two AI sides: a writer drafts, a reviewer critiques.",
            },
        ],
        "code_tools": [],
    }
